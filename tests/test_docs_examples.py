"""The README's and the getting-started page's example programs run as written.

The code blocks marked with ``<!-- tested -->`` are run as they are, with the address of
the test broker in ``KAFKA_BOOTSTRAP`` (as the pages tell the reader to set it), and every
record they report as delivered (``... to topic[partition] at offset N``) is read back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]
_TESTED_BLOCK = re.compile(r"<!-- tested -->\n```python\n(.*?)\n```", re.DOTALL)
_DELIVERED = re.compile(r"delivered to (\S+)\[(\d+)\] at offset (\d+)")


def _tested_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in PAGES:
        found = _TESTED_BLOCK.findall(page.read_text(encoding="utf-8"))
        assert found, f"{page.name} has no <!-- tested --> python block"
        blocks += [(f"{page.name}#{n}", code) for n, code in enumerate(found, 1)]
    return blocks


@pytest.mark.parametrize(("where", "code"), _tested_blocks(), ids=[w for w, _ in _tested_blocks()])
def test_documented_example_runs_and_delivers(
    where: str, code: str, kafka: KafkaCluster, tmp_path: Path
) -> None:
    program = tmp_path / "example.py"
    program.write_text(code + "\n", encoding="utf-8")
    # This checkout's package, whichever one the interpreter has installed.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap_servers, "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, str(program)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,  # as a reader would: not from inside the repository
    )
    assert result.returncode == 0, f"{where}:\n{result.stdout}{result.stderr}"
    delivered = _DELIVERED.findall(result.stdout)
    assert delivered, f"{where} printed no delivery:\n{result.stdout}"
    for topic, partition, offset in delivered:
        records = consume_all(kafka.bootstrap_servers, topic, partitions=[int(partition)])
        assert int(offset) in {r.offset for r in records}, (where, topic, partition, offset)
        [record] = [r for r in records if r.offset == int(offset)]
        assert record.value is not None and record.value.startswith(b"hello"), record
