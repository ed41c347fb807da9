"""The documentation's example programs and commands run as written.

The code blocks marked with ``<!-- tested -->`` are run as they are, each as a program of
its own, with the address of the test broker in ``KAFKA_BOOTSTRAP`` (as the pages tell the
reader to set it). Each must exit with status 0; every record it reports as delivered
(``delivered to topic[partition] at offset N``) is read back; and when the block is followed
by a ``<!-- output -->`` text block, each line of that block must appear in what it printed,
in order (``...`` in a line stands for anything).

Shell blocks marked ``<!-- tested -->`` are run line by line from the repository's root with
the same environment, ``.venv/bin/python`` being this interpreter.

The Spark guide's blocks run in ``tests/spark/test_spark_docs.py``, in the shared Spark session.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aioproducer.config import ProducerConfig
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [
    ROOT / "README.md",
    DOCS / "index.md",
    DOCS / "getting-started.md",
    DOCS / "async.md",
    DOCS / "threads.md",
    DOCS / "errors.md",
]
_BLOCK = re.compile(
    r"<!-- tested -->\n```(python|sh)\n(.*?)\n```"
    r"(?:\n+<!-- output -->\n```text\n(.*?)\n```)?",
    re.DOTALL,
)
_DELIVERED = re.compile(r"delivered to (\S+)\[(\d+)\] at offset (\d+)")


def _tested_blocks() -> list[tuple[str, str, str, str]]:
    blocks = []
    seen = set()
    for page in PAGES:
        found = _BLOCK.findall(page.read_text(encoding="utf-8"))
        assert found, f"{page.name} has no <!-- tested --> block"
        # The same program on two pages (README and the home page) runs once.
        found = [block for block in found if block not in seen]
        seen.update(found)
        blocks += [
            (f"{page.name}#{n}", kind, code, out) for n, (kind, code, out) in enumerate(found, 1)
        ]
    return blocks


def _env(kafka: KafkaCluster) -> dict[str, str]:
    # This checkout's package, whichever one the interpreter has installed.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap_servers, "PYTHONPATH": path}


def expect_lines(where: str, printed: str, expected: str) -> None:
    """Each expected line appears in ``printed``, in order; ``...`` matches anything."""
    position = 0
    for line in expected.splitlines():
        pattern = ".*?".join(re.escape(part) for part in line.split("..."))
        found = re.compile(pattern).search(printed, position)
        assert found, f"{where}: {line!r} not printed (in order) in:\n{printed}"
        position = found.end()


_BLOCKS = _tested_blocks()


@pytest.mark.parametrize(("where", "kind", "code", "output"), _BLOCKS, ids=[b[0] for b in _BLOCKS])
def test_documented_example_runs_as_written(
    where: str, kind: str, code: str, output: str, kafka: KafkaCluster, tmp_path: Path
) -> None:
    if kind == "sh":
        printed = _run_commands(where, code, _env(kafka))
    else:
        program = tmp_path / "example.py"
        program.write_text(code + "\n", encoding="utf-8")
        result = subprocess.run(
            [sys.executable, str(program)],
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(kafka),
            cwd=tmp_path,  # as a reader would: not from inside the repository
        )
        assert result.returncode == 0, f"{where}:\n{result.stdout}{result.stderr}"
        printed = result.stdout
    if output:
        expect_lines(where, printed, output)
    for topic, partition, offset in _DELIVERED.findall(printed):
        records = consume_all(kafka.bootstrap_servers, topic, partitions=[int(partition)])
        assert int(offset) in {r.offset for r in records}, (where, topic, partition, offset)


def _run_commands(where: str, script: str, env: dict[str, str]) -> str:
    printed = []
    for line in script.splitlines():
        command = line.split("  #", 1)[0].strip()
        if not command:
            continue
        command = command.replace(".venv/bin/python", sys.executable)
        result = subprocess.run(
            command, shell=True, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
        )
        assert result.returncode == 0, f"{where}: {command}\n{result.stdout}{result.stderr}"
        printed.append(result.stdout)
    return "".join(printed)


def test_async_guide_names_every_setting() -> None:
    section = (DOCS / "async.md").read_text(encoding="utf-8").split("## Configuration", 1)[1]
    named = set(re.findall(r"`([a-z_]+)`", section))
    fields = set(ProducerConfig.__dataclass_fields__)
    derived = {name for name, f in ProducerConfig.__dataclass_fields__.items() if not f.init}
    missing = sorted(fields - derived - named)
    assert not missing, f"docs/async.md's Configuration section does not name {missing}"


def test_errors_guide_table_names_every_client_side_error() -> None:
    import aioproducer.errors as errors

    page = (DOCS / "errors.md").read_text(encoding="utf-8")
    table = page.split("## The hierarchy", 1)[1].split("## Handling each kind", 1)[0]
    named = set(re.findall(r"`(\w+)`", table))
    classes = [getattr(errors, name) for name in errors.__all__]
    # Broker errors are covered by their rows by code and retriability; every other
    # error class is named in the table.
    missing = [
        cls.__name__
        for cls in classes
        if isinstance(cls, type)
        and issubclass(cls, errors.KafkaError)
        and not issubclass(cls, errors.BrokerResponseError)
        and cls.__name__ not in named
    ]
    assert not missing, f"docs/errors.md's table does not name {missing}"
