"""The first fetch of the broker jars says what it downloads, and how far along it is."""

from __future__ import annotations

import pytest

from aioproducer.testing._install import _FetchProgress

_MAVEN_LINES = [
    "[INFO] Scanning for projects...",
    "Downloading from central: https://repo.maven.apache.org/maven2/org/x/a.jar",
    "Downloaded from central: https://repo.maven.apache.org/maven2/org/x/a.jar (6.5 MB at 3.1 MB/s)",
    "Downloaded from central: https://repo.maven.apache.org/maven2/org/x/b.pom (950 B at 12 kB/s)",
    "Downloaded from central: https://repo.maven.apache.org/maven2/org/x/c.jar (5.4 MB at 2 MB/s)",
    "Downloaded from central: https://repo.maven.apache.org/maven2/org/x/d.jar (512 kB at 1 MB/s)",
]


def test_fetch_says_the_size_then_counts_the_downloads(capsys: pytest.CaptureFixture[str]) -> None:
    progress = _FetchProgress("4.3.1")
    for line in _MAVEN_LINES:
        progress.line(line + "\n")
    progress.done()
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0].startswith("fetching Apache Kafka 4.3.1 with Maven (about 66 MB, once")
    # Not a terminal: a line each 10 MB, then the total (6.5 + 0.00095 + 5.4 + 0.512 MB).
    assert lines[1:] == ["  downloaded  11.9 MB of about 66 MB", "  downloaded  12.4 MB: done"]
