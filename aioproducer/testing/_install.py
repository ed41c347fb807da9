"""Finding Java and Maven, and fetching the Apache Kafka broker jars into a local cache.

Package-internal besides the names :mod:`aioproducer.testing` exports: ``exclusive_lock``
(an ``flock`` that concurrent processes take turns on) and ``file_tail`` (the last lines of a
log file), which the cluster uses too.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import KafkaError

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "MIN_JAVA_VERSION",
    "JavaRuntime",
    "KafkaSetupError",
    "default_cache_dir",
    "ensure_kafka",
    "exclusive_lock",
    "file_tail",
    "find_java",
]

#: The Apache Kafka release that :class:`~aioproducer.testing.KafkaCluster` runs by default.
DEFAULT_KAFKA_VERSION = "4.4.0"

#: Kafka 4.x brokers refuse to run on anything older.
MIN_JAVA_VERSION = 17

_COMPLETE_MARKER = ".complete"
_POM_RESOURCE = "kafka-broker-pom.xml"
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z._-]*$")
_JAVA_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')
_LOCK_TIMEOUT = 900.0
_MAVEN_TIMEOUT = 900.0

_INSTALL_JAVA_HINT = (
    "Install a Java 17+ runtime, e.g. `sudo apt-get install openjdk-17-jre-headless` "
    "(Debian/Ubuntu), `sudo dnf install java-17-openjdk-headless` (Fedora/RHEL), "
    "`brew install openjdk@17` (macOS) or a build from https://adoptium.net, "
    "then put `java` on PATH or point JAVA_HOME at it."
)
_INSTALL_MAVEN_HINT = (
    "Install Apache Maven 3.6+, e.g. `sudo apt-get install maven` (Debian/Ubuntu), "
    "`sudo dnf install maven` (Fedora/RHEL), `brew install maven` (macOS) or "
    "https://maven.apache.org/download.cgi, and put `mvn` on PATH. Maven is only needed "
    "once per Kafka version: the jars are cached"
)


class KafkaSetupError(KafkaError, RuntimeError):
    """A local Kafka broker could not be installed, started or controlled.

    The message says what went wrong and, where it helps, what to install or which log file
    to read.
    """


@dataclass(frozen=True)
class JavaRuntime:
    """A ``java`` executable that is recent enough to run a Kafka broker."""

    #: Absolute path of the ``java`` executable.
    executable: str
    #: Feature release number, e.g. ``17`` or ``21``.
    major_version: int
    #: The first line ``java -version`` printed.
    version_line: str


def default_cache_dir() -> Path:
    """Return where Kafka jars are cached unless a ``cache_dir`` is given.

    ``$AIOPRODUCER_CACHE_DIR`` wins; otherwise ``$XDG_CACHE_HOME/aioproducer`` when that is
    set, else ``~/.cache/aioproducer``.
    """
    explicit = os.environ.get("AIOPRODUCER_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "aioproducer"


def _java_candidates() -> list[tuple[str, str]]:
    """Candidate ``java`` executables as (path, where it came from), best first."""
    found: list[tuple[str, str]] = []
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        exe = Path(java_home) / "bin" / "java"
        if os.access(exe, os.X_OK):
            found.append((str(exe), "JAVA_HOME"))
    on_path = shutil.which("java")
    if on_path:
        found.append((on_path, "PATH"))
    return found


_JAVA_VERSIONS: dict[tuple[str, float], tuple[int, str]] = {}


def _java_major(executable: str) -> tuple[int, str]:
    try:
        key = (os.path.realpath(executable), os.stat(executable).st_mtime)
    except OSError:
        key = (executable, 0.0)
    cached = _JAVA_VERSIONS.get(key)
    if cached is None:
        cached = _JAVA_VERSIONS[key] = _probe_java(executable)
    return cached


def _probe_java(executable: str) -> tuple[int, str]:
    try:
        proc = subprocess.run(
            [executable, "-version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KafkaSetupError(f"could not run `{executable} -version`: {exc}") from exc
    output = (proc.stderr or "") + (proc.stdout or "")
    first_line = output.strip().splitlines()[0] if output.strip() else ""
    match = _JAVA_VERSION_RE.search(output)
    if proc.returncode != 0 or match is None:
        raise KafkaSetupError(
            f"`{executable} -version` did not report a Java version "
            f"(exit code {proc.returncode}): {output.strip()[:500]!r}. {_INSTALL_JAVA_HINT}"
        )
    major = int(match.group(1))
    if major == 1 and match.group(2) is not None:
        # Java 8 and older call themselves "1.8.0_xxx".
        major = int(match.group(2))
    return major, first_line


def find_java() -> JavaRuntime:
    """Locate a Java 17+ runtime (``$JAVA_HOME/bin/java`` first, then ``java`` on PATH).

    Raises :class:`KafkaSetupError` naming what to install when there is none, or when the
    one found is too old.
    """
    candidates = _java_candidates()
    if not candidates:
        raise KafkaSetupError(
            "Java 17 or newer is required to run the Apache Kafka broker, but no `java` "
            "executable was found (JAVA_HOME is not set to a JDK/JRE and `java` is not on "
            f"PATH). {_INSTALL_JAVA_HINT}"
        )
    too_old: list[str] = []
    for executable, origin in candidates:
        major, line = _java_major(executable)
        if major >= MIN_JAVA_VERSION:
            return JavaRuntime(executable, major, line)
        too_old.append(f"{executable} (from {origin}) is Java {major}")
    raise KafkaSetupError(
        f"Java {MIN_JAVA_VERSION} or newer is required to run Apache Kafka 4.x, but "
        + "; ".join(too_old)
        + f". {_INSTALL_JAVA_HINT}"
    )


def _find_maven() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaSetupError(
            "Apache Maven (`mvn`) is needed to download the Apache Kafka broker jars from "
            f"Maven Central (about 45 MB), but it was not found on PATH. {_INSTALL_MAVEN_HINT} "
            "(set AIOPRODUCER_CACHE_DIR to share a cache prepared elsewhere with "
            "`python -m aioproducer.testing.kafka fetch`)."
        )
    return mvn


def _check_version(version: str) -> None:
    if not _VERSION_RE.match(version):
        raise ValueError(f"not a Kafka version: {version!r}")


@contextlib.contextmanager
def exclusive_lock(path: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive ``flock`` on *path*, so concurrent fetches take turns."""
    import fcntl  # POSIX only, like the rest of this package

    with open(path, "a+b") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise KafkaSetupError(
                        f"timed out after {timeout:.0f}s waiting for another process to "
                        f"finish fetching Kafka (lock file {path})"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _libs_ready(home: Path) -> bool:
    return (home / _COMPLETE_MARKER).is_file() and (home / "libs").is_dir()


def ensure_kafka(version: str = DEFAULT_KAFKA_VERSION, cache_dir: str | Path | None = None) -> Path:
    """Make sure the jars of Apache Kafka *version* are cached; return their directory.

    The jars land in ``<cache_dir>/kafka-<version>/libs`` (cache directory: see
    :func:`default_cache_dir`). The first call downloads them with Maven from Maven Central;
    later calls only check a marker file. Fetching happens in a temporary directory that is
    renamed into place once complete, under an exclusive file lock, so concurrent processes
    (e.g. pytest-xdist workers) neither collide nor see a half-finished download.

    Raises :class:`KafkaSetupError` if Java 17+ is missing, if Maven is needed but missing,
    or if Maven fails (the message names Maven's log file).
    """
    _check_version(version)
    find_java()
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    home = cache / f"kafka-{version}"
    if _libs_ready(home):
        return home / "libs"

    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KafkaSetupError(f"cannot create the Kafka cache directory {cache}: {exc}") from exc
    with exclusive_lock(cache / f".kafka-{version}.lock", _LOCK_TIMEOUT):
        if _libs_ready(home):
            return home / "libs"
        mvn = _find_maven()
        if home.exists():
            # Without its marker the directory did not come from a finished fetch; never
            # trust it.
            shutil.rmtree(home)
        log_path = cache / f"kafka-{version}-fetch.log"
        staging = Path(tempfile.mkdtemp(prefix=f".kafka-{version}-", dir=cache))
        try:
            _fetch_with_maven(mvn, version, staging, log_path)
            shutil.copyfile(log_path, staging / "fetch.log")
            (staging / _COMPLETE_MARKER).write_text(f"kafka {version}\n", encoding="utf-8")
            # mkdtemp made it private (0700); the jars are public artefacts.
            staging.chmod(0o755)
            os.replace(staging, home)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            log_path.unlink()
    return home / "libs"


def _fetch_with_maven(mvn: str, version: str, staging: Path, log_path: Path) -> None:
    pom = staging / "pom.xml"
    pom.write_bytes(resources.files(__package__).joinpath(_POM_RESOURCE).read_bytes())
    libs = staging / "libs"
    command = [
        mvn,
        "-B",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={libs}",
        f"-Dkafka.version={version}",
    ]
    progress = _FetchProgress(version)
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(command) + "\n").encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=staging,
            )
        except OSError as exc:
            raise KafkaSetupError(f"could not run Maven ({mvn}): {exc}") from exc
        deadline = time.monotonic() + _MAVEN_TIMEOUT
        assert proc.stdout is not None
        for line in proc.stdout:  # Maven's batch mode prints one line per download
            log.write(line)
            progress.line(line.decode(errors="replace"))
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise KafkaSetupError(
                    f"Maven did not finish fetching Apache Kafka {version} within "
                    f"{_MAVEN_TIMEOUT:.0f}s; see {log_path}"
                )
        proc.wait()
        progress.done()
    if proc.returncode != 0:
        raise KafkaSetupError(
            f"Maven failed (exit code {proc.returncode}) to fetch Apache Kafka {version} "
            f"from Maven Central; its output is in {log_path}. Last lines:\n"
            + file_tail(log_path, 15)
        )
    core_jar = libs / f"kafka_2.13-{version}.jar"
    if not core_jar.is_file():
        raise KafkaSetupError(
            f"Maven finished but {core_jar.name} is missing from {libs}; see {log_path}"
        )


# What Maven downloads for the broker the first time (the jars and their poms), to say how
# far along a fetch is; only an indication, so it need not follow every version exactly.
_APPROX_DOWNLOAD_MB = 66
_DOWNLOADED_RE = re.compile(r"Downloaded from \S+: \S+ \(([\d.]+) (B|kB|MB|GB)")
_UNITS = {"B": 1e-6, "kB": 1e-3, "MB": 1.0, "GB": 1e3}


class _FetchProgress:
    """Says on stderr that the broker jars are being downloaded, and how far along."""

    def __init__(self, version: str) -> None:
        self.megabytes = 0.0
        self.shown = 0.0
        self.tty = sys.stderr.isatty()
        print(
            f"fetching Apache Kafka {version} with Maven (about {_APPROX_DOWNLOAD_MB} MB, "
            "once; later runs use the cache) ...",
            file=sys.stderr,
            flush=True,
        )

    def line(self, text: str) -> None:
        found = _DOWNLOADED_RE.search(text)
        if found is None:
            return
        self.megabytes += float(found.group(1)) * _UNITS[found.group(2)]
        # On a terminal one line redrawn in place; in a log a line every 10 MB.
        if self.tty or self.megabytes - self.shown >= 10:
            self.shown = self.megabytes
            end = "\r" if self.tty else "\n"
            print(
                f"  downloaded {self.megabytes:5.1f} MB of about {_APPROX_DOWNLOAD_MB} MB",
                end=end,
                file=sys.stderr,
                flush=True,
            )

    def done(self) -> None:
        print(f"  downloaded {self.megabytes:5.1f} MB: done", file=sys.stderr, flush=True)


def file_tail(path: Path, lines: int) -> str:
    """Last *lines* lines of a text file, or a note saying it could not be read."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])
