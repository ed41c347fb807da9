"""Build hook: compile the per-record hot path with mypyc where a C compiler exists.

Everything else about the package is in pyproject.toml. The modules named in
``aioproducer/speedups.py`` are compiled from their own sources (``HOT_MODULES`` with
mypyc, ``EXTENSIONS`` with Cython); with no compiler (or no mypyc, or no Cython) the build
prints one line saying so and installs the pure-Python package (or the numpy column
encoder and the pure-Python ``DeliveryHandle``), which works the same, only slower.
``AIOPRODUCER_PURE_PYTHON=1`` at build time skips the compilation on purpose.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def _speedups() -> Any:
    # Loaded by path: importing the package would need its dependencies at build time.
    spec = importlib.util.spec_from_file_location(
        "aioproducer_speedups", HERE / "aioproducer" / "speedups.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _say(message: str) -> None:
    print(f"aioproducer build: {message}", file=sys.stderr, flush=True)


class _OptionalBuildExt(build_ext):
    """Builds the compiled modules if it can; otherwise leaves a pure-Python install."""

    def run(self) -> None:
        manifest = HERE / "aioproducer" / speedups.MANIFEST
        if self.inplace:
            _remove_stray_builds()
        if not self.extensions:
            # Nothing to compile (mypyc missing or refused the sources): no manifest, or
            # compiled files left from an earlier build would pass for current ones.
            manifest.unlink(missing_ok=True)
            super().run()
            return
        try:
            super().run()
        except Exception as exc:
            manifest.unlink(missing_ok=True)
            _say(f"could not compile the hot path ({exc}); installing pure Python")
            return
        # Written only once everything compiled: at import, its digests tell a current
        # build from a stale one. Only what this build compiled is listed.
        built = {ext.name for ext in self.extensions}
        digests = {}
        if _MYPYC:
            digests.update(
                (module, speedups.source_digest(_path(module, ".py")))
                for module in speedups.HOT_MODULES
            )
        digests.update(
            (module, speedups.source_digest(_path(module, ".pyx")))
            for module in speedups.EXTENSIONS
            if module in built
        )
        manifest.write_text(json.dumps({"sources": digests}, indent=1, sort_keys=True) + "\n")
        if not self.inplace:
            # A wheel build: the manifest goes into the wheel beside the compiled modules.
            target = Path(self.build_lib) / "aioproducer" / speedups.MANIFEST
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(manifest.read_text())
        _say("compiled the hot path with mypyc" if _MYPYC else "compiled the column encoder")


def _path(module: str, suffix: str) -> Path:
    return HERE.joinpath(*module.split(".")).with_suffix(suffix)


def _remove_stray_builds() -> None:
    # A module compiled by an earlier build but no longer on the list would shadow its
    # source (Python prefers an extension module beside a .py of the same name).
    hot = {_path(m, "") for m in (*speedups.HOT_MODULES, *speedups.EXTENSIONS)}
    for path in (HERE / "aioproducer").rglob("*"):
        # The most specific suffix first (".cpython-311-x86_64-linux-gnu.so" before ".so").
        suffix = next((s for s in EXTENSION_SUFFIXES if path.name.endswith(s)), None)
        if suffix is not None and path.parent / path.name[: -len(suffix)] not in hot:
            _say(f"removing {path.relative_to(HERE)}, no longer compiled")
            path.unlink()


speedups = _speedups()
ext_modules: list[Any] = []
_MYPYC = False
if os.environ.get(speedups.ENV_VAR) == "1":
    _say(f"{speedups.ENV_VAR}=1: installing pure Python")
else:
    try:
        from mypyc.build import mypycify

        ext_modules = mypycify(
            [
                # Optional dependencies (uvloop, ...) are absent from the build
                # environment: their values are Any there, which strict mode would refuse.
                "--no-warn-return-any",
                *(str(Path(*m.split(".")).with_suffix(".py")) for m in speedups.HOT_MODULES),
            ],
            opt_level="3",
            group_name="aioproducer",
        )
        _MYPYC = True
    except (Exception, SystemExit) as exc:  # mypyc missing, or mypy found an error
        _say(f"mypyc cannot compile the hot path ({exc!r}); installing pure Python")
    try:
        from Cython.Build import cythonize

        ext_modules += cythonize(
            [
                Extension(m, [str(Path(*m.split(".")).with_suffix(".pyx"))])
                for m in speedups.EXTENSIONS
            ],
            # The generated C stays out of the package directory.
            build_dir="build/cython",
            quiet=True,
        )
    except ImportError:
        _say("Cython is missing: the column encoder runs numpy, handles are Python objects")
    except Exception as exc:  # Cython refused the source
        _say(f"Cython cannot compile {speedups.EXTENSIONS} ({exc!r}); their fallbacks run")

setup(ext_modules=ext_modules, cmdclass={"build_ext": _OptionalBuildExt})
