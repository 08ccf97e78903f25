"""Builds started early, at the lowest CPU priority, for sessions later in the same nox run.

CI's run (`nox -s build lint tests sanitize fuzz`) compiles core's tests five
ways (Release, the aarch64 and x86 emulation subsets, ASan, TSan) and two
tiers under ASan: about ten minutes of compiling on two cores, while the
run's pip, pytest and qemu phases leave a core idle for minutes. Each such
build is queued here once its inputs exist and runs under `nice -n 19`, so it
takes only the CPU the foreground leaves. The session that needs a build
waits for it (`wait`), then runs its own commands as before: ninja finds the
work done. A build that failed or never started is done in the foreground,
its errors shown there (the background log is in build/logs/).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nox is only needed by the sessions, not to import this module
    import nox

from .env import BUILD_DIR

# One command: its argv and the variables it adds to the environment.
Step = tuple[list[str], dict[str, str]]


@dataclass
class _Job:
    steps: list[Step]
    log: Path
    state: str = "queued"  # queued, running, done, failed, cancelled
    proc: subprocess.Popen | None = field(default=None, repr=False)


_jobs: dict[str, _Job] = {}  # in the order queued, which is the order run
_lock = threading.Condition()
_worker: threading.Thread | None = None


def requested_sessions(argv: list[str] | None = None) -> set[str]:
    """The sessions named on nox's command line (`-s a b`, `--sessions a b`,
    `-s a -s b`); nox's default session list when none is named."""
    argv = sys.argv[1:] if argv is None else argv
    named: set[str] = set()
    taking = False
    for arg in argv:
        if arg == "--":  # the sessions' own arguments
            break
        if arg in ("-s", "-e", "--session", "--sessions"):
            taking = True
        elif arg.startswith("-"):
            taking = False
        elif taking:
            named.add(arg)
    return named or {"tests"}


def queue(key: str, steps: list[Step]) -> None:
    """Run `steps` in order, in the background, after the builds queued
    before; once a run (a key queued twice is queued once)."""
    global _worker
    with _lock:
        if key in _jobs:
            return
        log = BUILD_DIR / "logs" / f"prebuild-{key}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        _jobs[key] = _Job(steps, log)
        if _worker is None:
            _worker = threading.Thread(target=_work, name="prebuild", daemon=True)
            _worker.start()
        _lock.notify_all()


def wait(session: nox.Session, key: str) -> bool:
    """Whether build `key` finished in the background. One still queued is
    taken off the queue (the caller does it now, at full priority); one
    running is waited for; one that failed is reported, for the caller to redo."""
    with _lock:
        job = _jobs.get(key)
        if job is None:
            return False
        if job.state == "queued":
            job.state = "cancelled"
            return False
        if job.state == "running":
            session.log(f"waiting for {key}, built in the background ({job.log})")
        while job.state == "running":
            _lock.wait()
    if job.state == "failed":
        tail = job.log.read_text(errors="replace")[-2000:]
        session.warn(f"{key}: the background build failed; redoing it here:\n{tail}")
    return job.state == "done"


def run_after(session: nox.Session, key: str, steps: list[Step]) -> None:
    """`steps` in the foreground, after build `key`'s background run (when
    there is one: then the build tool finds the work done)."""
    wait(session, key)
    for argv, env in steps:
        session.run(*argv, external=True, env=env)


def state(key: str) -> str | None:
    """queued, running, done, failed or cancelled; None for a key never queued."""
    with _lock:
        job = _jobs.get(key)
        return job.state if job else None


def _next_job() -> _Job:
    with _lock:
        while True:
            for job in _jobs.values():
                if job.state == "queued":
                    job.state = "running"
                    return job
            _lock.wait()


def _work() -> None:
    while True:
        job = _next_job()
        ok = True
        with open(job.log, "w") as out:
            for argv, env in job.steps:
                out.write(f"$ {' '.join(argv)}\n")
                out.flush()
                # Its own process group, so that a nox stopped early stops it too
                # (_stop); not its own session: where the kernel groups CPU time by
                # session (sched_autogroup_enabled, as on this kind of machine), a
                # new session's niced build would still get half the CPU.
                proc = subprocess.Popen(
                    ["nice", "-n", "19", *argv],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env},
                    process_group=0,
                )
                with _lock:
                    job.proc = proc
                if proc.wait() != 0:
                    ok = False
                    break
        with _lock:
            job.proc = None
            job.state = "done" if ok else "failed"
            _lock.notify_all()


@atexit.register
def _stop() -> None:
    with _lock:
        running = [job.proc for job in _jobs.values() if job.proc is not None]
    for proc in running:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
