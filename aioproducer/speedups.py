"""Which implementation of the per-record hot path runs: compiled with mypyc, or pure Python.

Where a C compiler exists, installing the package (``pip install .`` or ``pip install -e
.``) compiles the modules named in :data:`HOT_MODULES` with mypyc, from the very same
sources (they are ``mypy --strict`` clean). Importing :mod:`aioproducer` then picks one
implementation for all of them, once:

* pure Python if ``AIOPRODUCER_PURE_PYTHON=1`` is set;
* pure Python if the compiled modules are missing, or if any source changed since it was
  compiled (an editable install after an edit): a stale build never runs;
* else the compiled modules.

Mixing is never allowed: compiled classes check the types of their fields, so a compiled
accumulator needs the compiled record builder. :data:`ACTIVE` says which one runs and
:data:`REASON` why; ``python -m aioproducer info`` prints both.

This module imports only the standard library: the build (``setup.py``) reads
:data:`HOT_MODULES` from it without importing the package.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = [
    "ACTIVE",
    "ENV_VAR",
    "EXTENSIONS",
    "HOT_MODULES",
    "MANIFEST",
    "REASON",
    "can_compile",
    "extension",
    "select",
    "source_digest",
]

#: The modules compiled with mypyc: the checks, partitioning, batching and encoding a
#: record passes through on its way into a batch, and ``Producer.send``'s common case. The record encoder is compiled on its
#: own (``protocol/record_encoder.py``), not ``protocol/records.py`` around it, nor
#: ``results.py``, whose public classes would lose their docstrings.
HOT_MODULES: tuple[str, ...] = (
    "aioproducer.adaptive",
    "aioproducer.accumulator",
    "aioproducer.budget",
    "aioproducer.intake",
    "aioproducer.partitioner",
    "aioproducer.prepared",
    "aioproducer.protocol.record_encoder",
    "aioproducer.sending",
    # Bulk sends of sequences (split from the intake, compiled with it).
    "aioproducer.sequences",
    # A bulk send's runs into batches (split from the accumulator, compiled with it).
    "aioproducer.run_append",
)
#: Compiled with Cython from their ``.pyx`` sources where Cython and a C compiler exist:
#: modules with no pure-Python twin of the same name, whose callers keep another path (the
#: column encoder's numpy, the pure-Python ``DeliveryHandle``) and ask :func:`extension`
#: whether they may use them.
EXTENSIONS: tuple[str, ...] = (
    "aioproducer.protocol._column_codec",
    # DeliveryHandle without garbage-collector support (``results.py`` chooses it).
    "aioproducer._handle",
    # DeliveryFuture likewise (``sync.py`` chooses it).
    "aioproducer._future",
)
#: Set to ``1`` to run the pure-Python sources even where compiled modules are installed.
ENV_VAR = "AIOPRODUCER_PURE_PYTHON"
#: Written by the build next to this module: the digest of every source it compiled.
MANIFEST = "speedups.json"

#: ``"compiled"`` or ``"pure"``, once :func:`select` ran (at ``import aioproducer``).
ACTIVE = "pure"
#: Why :data:`ACTIVE` is what it is, in words.
REASON = "not selected yet"

log = logging.getLogger("aioproducer")

_ROOT = Path(__file__).resolve().parent.parent


def source_digest(path: Path) -> str:
    """The SHA-256 of a source file, as the build writes it into the manifest."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _source(module: str) -> Path:
    return _ROOT.joinpath(*module.split(".")).with_suffix(".py")


def _compiled_file(module: str) -> Path | None:
    source = _source(module)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def _manifest_digests() -> dict[str, str] | None:
    """The source digests the build wrote (module name to SHA-256), None if no build."""
    try:
        digests: dict[str, str] = json.loads(Path(__file__).with_name(MANIFEST).read_text()).get(
            "sources", {}
        )
    except (OSError, ValueError):
        return None
    return digests


def _check_compiled() -> str | None:
    """None if every hot module has an up-to-date compiled build, else why not."""
    digests = _manifest_digests()
    if digests is None:
        return "no compiled build is installed"
    for module in HOT_MODULES:
        if _compiled_file(module) is None:
            return f"{module} has no compiled build"
        if digests.get(module) != source_digest(_source(module)):
            return f"{module} changed since it was compiled (rebuild with pip install -e .)"
    return None


def _extension_why(module: str) -> str | None:
    """None if ``module`` (one of :data:`EXTENSIONS`) has an up-to-date build, else why."""
    if os.environ.get(ENV_VAR) == "1":
        return f"{ENV_VAR}=1"
    digests = _manifest_digests()
    if digests is None:
        return "no compiled build is installed"
    if _compiled_file(module) is None or module not in digests:
        return f"{module} has no compiled build (no Cython or no C compiler at install)"
    try:
        digest = source_digest(_source(module).with_suffix(".pyx"))
    except OSError:
        return f"{module}'s source is missing: its build cannot be checked"
    if digests[module] != digest:
        return f"{module} changed since it was compiled (rebuild with pip install -e .)"
    return None


def extension(module: str) -> tuple[ModuleType | None, str]:
    """The compiled extension ``module`` (one of :data:`EXTENSIONS`) if it may run here,
    else None; and why, in words. A stale or missing build never runs."""
    why = _extension_why(module)
    if why is None:
        try:
            return importlib.import_module(module), "compiled with Cython"
        except ImportError as exc:
            why = f"{module} does not load ({exc})"
    return None, why


def can_compile() -> str | None:
    """The C compiler a build here would use, if it and Python's headers are present."""
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    found = shutil.which(compiler.split()[0]) if compiler.strip() else None
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    return found if found and headers.exists() else None


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the hot modules' ``.py`` sources, before the compiled files beside them."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in HOT_MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, _source(fullname))


def select() -> str:
    """Choose the implementation before any hot module is imported; returns :data:`ACTIVE`.

    Called by ``aioproducer/__init__.py``; later calls change nothing.
    """
    global ACTIVE, REASON
    if any(finder.__class__ is _SourceFinder for finder in sys.meta_path) or any(
        module in sys.modules for module in HOT_MODULES
    ):
        return ACTIVE
    if os.environ.get(ENV_VAR) == "1":
        why: str | None = f"{ENV_VAR}=1"
    else:
        why = _check_compiled()
    if why is None:
        ACTIVE, REASON = "compiled", "mypyc-compiled hot path"
    else:
        ACTIVE, REASON = "pure", why
        # Whatever compiled files exist are stepped around, never half used.
        sys.meta_path.insert(0, _SourceFinder())
        log.info("aioproducer runs its pure-Python hot path: %s", why)
    return ACTIVE


if __name__ == "aioproducer.speedups":
    # Imported as part of the package (first thing in __init__): choose now. The build
    # loads this file under another name and only reads it.
    select()
