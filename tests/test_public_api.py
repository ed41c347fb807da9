"""The public surface: every exported name and its public members carry a docstring, the
package is typed, and public classes name an importable module (so Spark's cloudpickle
ships them by reference, not by value)."""

from __future__ import annotations

import importlib
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest

import aioproducer
import aioproducer.errors
import aioproducer.protocol
import aioproducer.testing

# Modules whose ``__all__`` is the public API. Optional modules (Spark needs pyspark) are
# added when present so the check covers them without making them required to import.
_PUBLIC_MODULES = ["aioproducer", "aioproducer.errors", "aioproducer.oauth", "aioproducer.testing"]
for _optional in ("aioproducer.spark", "aioproducer.sync", "aioproducer.runner"):
    try:
        importlib.import_module(_optional)
    except ImportError:
        continue
    _PUBLIC_MODULES.append(_optional)


def _public_objects() -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for module_name in _PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            if name.startswith("__"):
                continue
            found.append((f"{module_name}.{name}", getattr(module, name)))
    return found


def _undocumented_members(cls: type) -> list[str]:
    missing = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        func = member.fget if isinstance(member, property) else member
        if isinstance(func, (staticmethod, classmethod)):
            func = func.__func__
        if not (inspect.isfunction(func) or isinstance(member, property)):
            continue
        if not (inspect.getdoc(func) or "").strip():
            missing.append(name)
    return missing


def _qualname(value: object) -> str | None:
    # Test ids must not hold addresses: every pytest-xdist worker collects the same ids.
    return value if isinstance(value, str) else ""


@pytest.mark.parametrize(("qualname", "obj"), _public_objects(), ids=_qualname)
def test_public_names_are_documented(qualname: str, obj: Any) -> None:
    if isinstance(obj, (str, int, float, tuple, frozenset, dict)):
        return  # constants are documented where they are defined
    if typing.get_origin(obj) is not None:
        return  # so are type aliases (a ``#:`` comment), which cannot carry a docstring
    assert (inspect.getdoc(obj) or "").strip(), f"{qualname} has no docstring"
    if inspect.isclass(obj) and not issubclass(obj, BaseException):
        assert _undocumented_members(obj) == [], f"{qualname} has undocumented members"


@pytest.mark.parametrize(("qualname", "obj"), _public_objects(), ids=_qualname)
def test_public_classes_name_an_importable_module(qualname: str, obj: Any) -> None:
    if not inspect.isclass(obj):
        return
    module = importlib.import_module(obj.__module__)
    assert getattr(module, obj.__name__) is obj, f"{qualname}: {obj.__module__} lacks it"


def test_the_package_is_typed() -> None:
    assert (Path(aioproducer.__file__).parent / "py.typed").is_file()


def test_every_error_class_is_documented() -> None:
    for name, obj in vars(aioproducer.errors).items():
        if (
            inspect.isclass(obj)
            and issubclass(obj, BaseException)
            and not name.startswith("_")
            and obj.__module__ == aioproducer.errors.__name__
        ):
            assert (obj.__doc__ or "").strip(), f"errors.{name} has no docstring"


def test_protocol_package_documents_itself() -> None:
    assert (aioproducer.protocol.__doc__ or "").strip()
