"""The compiled hot path: chosen once at import, switchable, never stale, and equal to the
pure-Python one in everything it produces."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aioproducer import speedups

ROOT = Path(__file__).resolve().parent.parent
COMPILED = speedups.ACTIVE == "compiled"
needs_compiled = pytest.mark.skipif(
    not COMPILED, reason=f"the compiled hot path is not active here ({speedups.REASON})"
)


def _python(*args: str, cwd: Path = ROOT, pure: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != speedups.ENV_VAR}
    if pure:
        env[speedups.ENV_VAR] = "1"
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _files(cwd: Path = ROOT, pure: bool = False) -> list[str]:
    code = (
        "import importlib, aioproducer.speedups as s; "
        "print('\\n'.join(importlib.import_module(m).__file__ for m in s.HOT_MODULES))"
    )
    result = _python("-c", code, cwd=cwd, pure=pure)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_info_says_which_implementation_runs() -> None:
    result = _python("-m", "aioproducer", "info")
    assert result.returncode == 0, result.stderr
    if os.environ.get(speedups.ENV_VAR) != "1":
        # (With it set, this process runs pure on purpose; the child, without it, need not.)
        assert f"hot path    {speedups.ACTIVE}: {speedups.REASON}" in result.stdout
    pure = _python("-m", "aioproducer", "info", "--require-compiled", pure=True)
    assert pure.returncode == 0, pure.stderr
    assert f"hot path    pure: {speedups.ENV_VAR}=1" in pure.stdout


def test_the_environment_variable_selects_pure_python_for_every_hot_module() -> None:
    assert all(path.endswith(".py") for path in _files(pure=True))


@needs_compiled
def test_every_hot_module_runs_compiled_when_built() -> None:
    for name in speedups.HOT_MODULES:
        assert not importlib.import_module(name).__file__.endswith(".py"), name  # type: ignore[union-attr]


@needs_compiled
def test_a_source_changed_after_the_build_runs_pure(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "aioproducer", tmp_path / "aioproducer")
    for group in ROOT.glob("aioproducer__mypyc*"):
        shutil.copy(group, tmp_path)
    assert all(not path.endswith(".py") for path in _files(cwd=tmp_path))
    with (tmp_path / "aioproducer" / "budget.py").open("a") as source:
        source.write("# edited\n")
    assert all(path.endswith(".py") for path in _files(cwd=tmp_path))
    info = _python("-m", "aioproducer", "info", "--require-compiled", cwd=tmp_path)
    assert "aioproducer.budget changed since it was compiled" in info.stdout
    # A machine that can compile must not pass its tests on a stale or missing build.
    assert info.returncode == (1 if speedups.can_compile() else 0)


@needs_compiled
def test_compiled_and_pure_python_give_the_same_results() -> None:
    # The same Hypothesis examples in both processes (derandomized): handles, errors,
    # budget and batch bytes must be identical.
    # Run from the root (-c puts it first on sys.path), so the tree under test is imported.
    run = "import runpy; runpy.run_path('tests/speedups_parity.py', run_name='__main__')"
    compiled = _python("-c", run)
    pure = _python("-c", run, pure=True)
    assert compiled.returncode == 0, compiled.stderr
    assert pure.returncode == 0, pure.stderr
    c_mode, c_examples, c_lines, c_digest = compiled.stdout.split()
    p_mode, p_examples, p_lines, p_digest = pure.stdout.split()
    assert (c_mode, p_mode) == ("compiled", "pure")
    assert int(c_examples) >= 200 and int(c_lines) > 1000
    assert (c_examples, c_lines, c_digest) == (p_examples, p_lines, p_digest)
