"""LoopRunner: a lazily started loop in a daemon thread, fork-safe, closable."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import select
import sys
import threading
import time

import pytest

from aioproducer import LoopRunner
from aioproducer.runner import default_runner


async def _whoami() -> tuple[str, int, bool]:
    thread = threading.current_thread()
    return thread.name, os.getpid(), thread.daemon


async def _fail() -> None:
    raise ValueError("from the loop")


def test_starts_lazily_in_a_daemon_thread_and_runs_coroutines() -> None:
    before = {t.ident for t in threading.enumerate()}
    runner = LoopRunner(name="test-loop")
    try:
        assert not runner.started and runner.thread is None
        assert {t.ident for t in threading.enumerate()} == before
        name, pid, daemon = runner.call(_whoami)
        assert (name, pid, daemon) == ("test-loop", os.getpid(), True)
        assert runner.started and runner.thread is not None and runner.thread.daemon
        assert runner.call(asyncio.sleep, 0, "x") == "x"
        with pytest.raises(ValueError, match="from the loop"):
            runner.call(_fail)
        # The same loop serves every call, from any thread.
        loops = []

        async def current_loop() -> asyncio.AbstractEventLoop:
            return asyncio.get_running_loop()

        threads = [
            threading.Thread(target=lambda: loops.append(runner.call(current_loop)))
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(map(id, loops))) == 1 and loops[0] is runner.loop
    finally:
        runner.close()


def test_uses_uvloop_when_installed() -> None:
    pytest.importorskip("uvloop")
    runner = LoopRunner()
    try:
        assert type(runner.loop).__module__.startswith("uvloop")
    finally:
        runner.close()
    plain = LoopRunner(use_uvloop=False)
    try:
        assert not type(plain.loop).__module__.startswith("uvloop")
    finally:
        plain.close()


def test_close_stops_the_thread_cancels_tasks_and_refuses_more_work() -> None:
    runner = LoopRunner()
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.set()

    pending = runner.submit(forever)
    thread = runner.thread
    assert thread is not None and thread.is_alive()
    runner.close()
    assert not thread.is_alive()
    assert cancelled.is_set() and pending.cancelled()
    assert runner.closed and "closed" in repr(runner)
    with pytest.raises(RuntimeError, match="closed"):
        runner.call(_whoami)
    runner.close()  # idempotent


def test_call_from_the_loop_thread_is_refused() -> None:
    runner = LoopRunner()
    try:

        async def nested() -> None:
            runner.call(_whoami)

        with pytest.raises(RuntimeError, match="own thread"):
            runner.call(nested)
    finally:
        runner.close()


def test_default_runner_is_shared_and_not_picklable_by_accident() -> None:
    assert default_runner() is default_runner()
    with pytest.raises(TypeError):
        pickle.dumps(default_runner().loop)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_fresh_loop_of_its_own() -> None:
    runner = LoopRunner(name="parent-loop")
    try:
        parent_name, parent_pid, _ = runner.call(_whoami)
        parent_thread = runner.thread
        assert parent_thread is not None
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what the runner did here, then leave at once
            code = 0
            try:
                os.close(read_fd)
                started_before = runner.started
                name, child_pid, daemon = runner.call(_whoami)
                report = {
                    "started_before": started_before,
                    "pid": child_pid,
                    "daemon": daemon,
                    "new_thread": runner.thread is not parent_thread,
                    "name": name,
                }
                os.write(write_fd, json.dumps(report).encode())
            except BaseException as exc:
                os.write(write_fd, json.dumps({"error": repr(exc)}).encode())
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        ready, _, _ = select.select([read_fd], [], [], 30)
        assert ready, "the forked child did not answer within 30 s (deadlock after fork?)"
        data = b""
        while chunk := os.read(read_fd, 4096):
            data += chunk
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        report = json.loads(data)
        assert "error" not in report, report
        assert os.waitstatus_to_exitcode(status) == 0
        assert report == {
            "started_before": False,
            "pid": pid,
            "daemon": True,
            "new_thread": True,
            "name": "parent-loop",
        }
        # The parent's loop is untouched by the child.
        assert runner.call(_whoami) == (parent_name, parent_pid, True)
        assert runner.thread is parent_thread
    finally:
        runner.close()


def test_a_busy_loop_thread_does_not_keep_the_interpreter_alive(tmp_path: object) -> None:
    import subprocess

    code = (
        "import asyncio\n"
        "from aioproducer import LoopRunner\n"
        "r = LoopRunner()\n"
        "r.submit(asyncio.sleep, 3600)\n"
        "print('leaving')\n"
    )
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "leaving"
    assert time.monotonic() - started < 30
