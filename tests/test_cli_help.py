"""``python -m aioproducer --help`` describes every command it has."""

from __future__ import annotations

import subprocess
import sys

from aioproducer.__main__ import _parser


def test_help_describes_every_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aioproducer", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    [commands] = [a for a in _parser()._actions if a.dest == "command"]
    names = sorted(commands.choices)  # type: ignore[arg-type]
    assert names == ["demo", "info"]
    overview = result.stdout.split("commands:", 1)[1]
    for name in names:
        described = [line for line in overview.splitlines() if line.strip().startswith(name)]
        assert described and len(described[0].split()) > 3, (name, result.stdout)
