"""The pure-Python wheel: built from this checkout with ``python -m build --wheel``, installed
in a fresh venv whose PATH has no C compiler, it imports, says it runs pure Python, and
passes broker-free unit tests.

``AIOPRODUCER_PURE_PYTHON=1`` at build time skips the mypyc compilation (see setup.py), so
the wheel is ``py3-none-any``: what a platform without a compiled wheel gets. The build
runs in pip's isolated build environments and the installs reuse the pip cache (nothing
but PyPI is reached). About a minute of the test suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Broker-free unit tests of the code around the hot path, run from the installed wheel.
UNIT_TESTS = [
    "tests/producer/test_accumulator.py",
    "tests/producer/test_completion_once.py",
    "tests/sync/test_sync_bulk.py",
]
_SKIP = shutil.ignore_patterns(
    ".venv", "build", "dist", "site", "*.egg-info", "__pycache__", ".git", "*.so", "speedups.json"
)

pytestmark = pytest.mark.slow


def _run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 240) -> str:
    result = subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{args}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_pure_wheel_installs_and_runs_without_a_compiler(tmp_path: Path) -> None:
    # A copy of the checkout, so the build leaves nothing in it (build/, *.egg-info).
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=_SKIP, symlinks=True)
    dist = tmp_path / "dist"
    build_env = {**os.environ, "AIOPRODUCER_PURE_PYTHON": "1"}
    _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)],
        build_env,
        tmp_path,
    )
    [wheel] = dist.glob("aioproducer-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "aioproducer/producer.py" in names and "aioproducer/py.typed" in names
    assert not [n for n in names if n.endswith((".so", ".pyd"))], names

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, symlinks=True).create(env_dir)
    bin_dir = env_dir / "bin"
    # Only the venv's own programs: no gcc, cc or anything else a build could reach for.
    env = {
        "PATH": str(bin_dir),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "CC": "no-compiler-here",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    for tool in ("gcc", "cc", "clang"):
        assert shutil.which(tool, path=env["PATH"]) is None
    python = str(bin_dir / "python")
    _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            str(wheel),
            "pytest>=8",
            "trio>=0.25",
            "uvloop>=0.19",
        ],
        env,
        tmp_path,
    )
    info = _run([python, "-m", "aioproducer", "info"], env, tmp_path)
    assert "hot path    pure" in info, info
    where = _run([python, "-c", "import aioproducer; print(aioproducer.__file__)"], env, tmp_path)
    assert str(env_dir) in where, where
    # The unit tests from this checkout, against the installed package (run from outside
    # the checkout, so the source tree is not importable).
    tests = tmp_path / "tests"
    shutil.copytree(ROOT / "tests", tests, ignore=_SKIP)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    out = _run(
        [
            python,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-m",
            "not broker",
            "-W",
            "ignore::pytest.PytestConfigWarning",
            *UNIT_TESTS,
        ],
        env,
        tmp_path,
    )
    assert " passed" in out and "failed" not in out, out[-2000:]
