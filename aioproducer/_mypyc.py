"""mypyc's class decorator, or a stand-in that does nothing where mypy is not installed.

The compiled modules (``speedups.py``) mark a class with it that plain Python classes may
subclass. Without mypy (a pure-Python install) the sources run uncompiled and the
decorator has nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["mypyc_attr"]

_T = TypeVar("_T")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - only without mypy installed

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        """Leave the class as it is."""
        return lambda cls: cls
