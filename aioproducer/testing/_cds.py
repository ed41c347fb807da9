"""Class-data sharing for broker JVMs: an archive of the broker's loaded classes, written
once per machine next to the cached jars, that later JVMs map instead of loading and
verifying every class again. It cuts JVM start-up CPU by about a third.

Package-internal: :func:`cds_allowed`, :func:`class_data_archive` and :func:`jvm_flags` are
its interface. Recording an archive needs a broker to run; the caller passes that run in
(``record``), so this module knows nothing of how clusters are started.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ._install import JavaRuntime, KafkaSetupError, exclusive_lock

__all__ = ["cds_allowed", "class_data_archive", "jvm_flags"]

#: Set to ``0`` (or false, no, off) to run every JVM without class-data sharing.
ENV_SWITCH = "AIOPRODUCER_KAFKA_CDS"

# A failed recording is retried a day later, in case the cause was passing.
_RETRY_FAILED_AFTER = 86400.0

#: The JVM main class whose run is recorded; the short-lived tools are not worth it.
BROKER_MAIN_CLASS = "kafka.Kafka"


def cds_allowed(jvm_args: Sequence[str]) -> bool:
    """Whether JVMs started with ``jvm_args`` may use an archive: not when the environment
    turns it off, nor when the caller already chose their own class-data-sharing flags."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return not any(
        "SharedArchiveFile" in a or "ArchiveClassesAtExit" in a or a.startswith("-Xshare")
        for a in jvm_args
    )


def jvm_flags(main_class: str, *, archive: Path | None, record_to: Path | None) -> list[str]:
    """The flags that make a JVM running ``main_class`` map ``archive``, or else (a broker
    only) write its loaded classes to ``record_to`` when it exits normally."""
    if archive is not None:
        return [f"-XX:SharedArchiveFile={archive}"]
    if record_to is not None and main_class == BROKER_MAIN_CLASS:
        return [f"-XX:ArchiveClassesAtExit={record_to}"]
    return []


def class_data_archive(
    java: JavaRuntime, libs: Path, record: Callable[[Path], None]
) -> Path | None:
    """A class-data-sharing archive for this Java and these jars, created on first use.

    ``record(path)`` makes the archive: a one-off training run of a broker started with
    ``-XX:ArchiveClassesAtExit=path`` (see :func:`jvm_flags`), given some work, and shut
    down cleanly. The archive is keyed by the Java build and the jar names, so another JDK
    gets its own. Any failure only costs the speed-up: it is remembered in a ``.failed``
    file and the broker starts without CDS. Returns None while another process is creating
    the archive.
    """
    identity = "\n".join(
        [
            os.path.realpath(java.executable),
            java.version_line,
            *sorted(p.name for p in libs.iterdir()),
        ]
    )
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    directory = libs.parent / "cds"
    archive = directory / f"broker-{key}.jsa"
    failed = directory / f"broker-{key}.failed"
    if archive.is_file():
        return archive
    with contextlib.suppress(OSError):
        if time.time() - failed.stat().st_mtime < _RETRY_FAILED_AFTER:
            return None
    try:
        directory.mkdir(exist_ok=True)
        with exclusive_lock(directory / ".lock", timeout=0.0):
            if archive.is_file():
                return archive
            staging = directory / f".broker-{key}-{os.getpid()}.jsa"
            try:
                record(staging)
                if staging.is_file() and staging.stat().st_size > 0:
                    os.replace(staging, archive)
                    return archive
                failed.write_text("the training broker wrote no archive\n", encoding="utf-8")
            except Exception as exc:
                failed.write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
            finally:
                with contextlib.suppress(OSError):
                    staging.unlink()
    except (OSError, KafkaSetupError):
        # Read-only cache, or the lock is held by a process that is creating the archive.
        pass
    return None
