"""``emq worker --processes N``: N worker processes under one supervisor.

Python runs one thread at a time per process, so CPU-bound handlers need processes. The
supervisor starts N ``emq worker`` processes with the same options and runs no job itself:

* **a process that exits is started again**: at once when it stopped on its own (exit 0, its
  ``--max-jobs`` done), else after a backoff that doubles while it keeps dying young (0.5 s,
  1 s, 2 s … at most 30 s; a process that lived 30 s starts the count again). With ``--burst``
  nothing is started again: a process that found its queues empty is done, and one that
  failed is reported in the exit code.
* **SIGTERM or SIGINT is passed on, once per signal received**: the first stops every process
  gracefully (each finishes or requeues what it holds within its grace), a second makes them
  exit at once, as it does a single worker. A process still alive 10 s after its grace is
  killed. The processes run in sessions of their own, so a terminal's Ctrl-C reaches the
  supervisor alone and is passed on once (under systemd, use ``KillMode=mixed``).
* **If the supervisor dies** (SIGKILL, say), each process gets SIGTERM from the kernel
  (``PR_SET_PDEATHSIG``) and stops gracefully: none is left running unsupervised.

Deciding is pure (:func:`restart_delay_s`, :func:`after_exit`); :class:`Supervisor` only
starts, waits and signals.
"""

from __future__ import annotations

import ctypes
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Sequence

log = logging.getLogger("echomq.supervisor")

#: a process gets this long after its grace to exit before it is killed
KILL_AFTER_GRACE_S = 10.0
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class RestartPolicy:
    first_s: float = 0.5  #: the wait before starting again a process that died young
    max_s: float = 30.0
    healthy_s: float = 30.0  #: a process that lived this long starts the backoff again


def restart_delay_s(policy: RestartPolicy, young_deaths: int) -> float:
    """The wait before the next start of a process that died young ``young_deaths`` times in a row
    (0: it lived long enough to count as healthy)."""
    if young_deaths <= 0:
        return 0.0
    return min(policy.max_s, policy.first_s * 2 ** (young_deaths - 1))


@dataclass(frozen=True)
class Exit:
    """What to do after a process exited: start it again after ``delay_s`` (None: do not), and
    its slot's count of young deaths from now on."""

    delay_s: float | None
    young_deaths: int


def after_exit(policy: RestartPolicy, *, returncode: int, lived_s: float, young_deaths: int, stopping: bool,
               burst: bool) -> Exit:
    """The decision for one process's exit: never while stopping or in burst mode; otherwise start
    it again: at once when it stopped on its own (exit 0: its ``--max-jobs``) or after a healthy
    life, after a growing backoff while it keeps dying young."""
    if stopping or burst:
        return Exit(None, young_deaths)
    deaths = 0 if returncode == 0 or lived_s >= policy.healthy_s else young_deaths + 1
    return Exit(restart_delay_s(policy, deaths), deaths)


def process_commands(options: Sequence[str], processes: int, metrics_port: int | None) -> list[list[str]]:
    """The command of each of ``processes`` worker processes (pure): ``emq worker`` with ``options``
    (the app and every option given but ``--processes``, ``--url`` and ``--metrics-port``), each
    with a ``--metrics-port`` of its own (the given one + its index; 0, a free port, stays 0)."""
    # -P: the current directory is not put first on sys.path (load_app puts it after the standard library)
    return [[sys.executable, "-P", "-m", "echomq.cli", "worker", *options,
             *([] if metrics_port is None else ["--metrics-port", str(metrics_port and metrics_port + index)])]
            for index in range(processes)]


def how_it_ended(returncode: int | None) -> str:
    """A process's exit as people read it: Popen's negative code is the signal that killed it."""
    if returncode is not None and returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with {returncode}"


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux), checked against a
    supervisor that died before this call."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the processes outlive a killed supervisor
        return
    if os.getppid() != parent:
        os._exit(1)


@dataclass
class _Slot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    pidfd: int | None = None
    started: float = 0.0
    young_deaths: int = 0
    start_at: float | None = None  #: monotonic time of its next start, while it waits for one
    returncode: int | None = None  #: its last exit's


class Supervisor:
    """Runs ``commands[i]`` in slot i until they are done (burst) or a signal stops them."""

    def __init__(self, commands: Sequence[Sequence[str]], *, burst: bool, grace_s: float,
                 env: dict[str, str] | None = None, policy: RestartPolicy = RestartPolicy()) -> None:
        self.commands = [list(command) for command in commands]
        self.env = env
        self.burst, self.grace_s, self.policy = burst, grace_s, policy
        self.slots = [_Slot(i) for i in range(len(self.commands))]
        self.signals = 0
        self.kill_at: float | None = None

    def run(self) -> int:
        """Supervise until every process is done; the exit code: 0 when each exited 0 (or was
        stopped by the first signal and exited 0), else 1."""
        wake_read, wake_write = socket.socketpair()
        wake_write.setblocking(False)
        previous_fd = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        handlers = {signum: signal.signal(signum, lambda signum, frame: None)
                    for signum in (signal.SIGTERM, signal.SIGINT)}
        selector = selectors.DefaultSelector()
        selector.register(wake_read, selectors.EVENT_READ, None)
        try:
            for slot in self.slots:
                self._start(slot, selector)
            log.info("supervisor %d: %d worker processes: %s", os.getpid(), len(self.slots),
                     " ".join(str(slot.process.pid) for slot in self.slots if slot.process))
            while any(slot.process or slot.start_at is not None for slot in self.slots):
                for key, _ in selector.select(self._timeout()):
                    if key.data is None:
                        self._signalled(wake_read)
                    else:
                        self._exited(key.data, selector)
                self._start_due(selector)
                self._kill_late()
        finally:
            for slot in self.slots:  # on an error of our own: leave no process unsupervised
                if slot.process and slot.process.poll() is None:
                    slot.process.kill()
                if slot.pidfd is not None:
                    os.close(slot.pidfd)
            signal.set_wakeup_fd(previous_fd)
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            selector.close()
            wake_read.close()
            wake_write.close()
        # a process the passed-on signal ended before it set its handler (one just started) was stopped
        stopped = (0, None, -signal.SIGTERM, -signal.SIGINT) if self.signals else (0, None)
        failed = [slot for slot in self.slots if slot.returncode not in stopped]
        for slot in failed:
            log.error("supervisor %d: worker process %d of %d %s", os.getpid(), slot.index + 1, len(self.slots),
                      how_it_ended(slot.returncode))
        return 1 if failed else 0

    def _start(self, slot: _Slot, selector: selectors.BaseSelector) -> None:
        slot.start_at = None
        slot.process = subprocess.Popen(self.commands[slot.index], env=self.env, start_new_session=True,
                                        preexec_fn=lambda parent=os.getpid(): _die_with_parent(parent))
        slot.pidfd = os.pidfd_open(slot.process.pid)
        slot.started = time.monotonic()
        selector.register(slot.pidfd, selectors.EVENT_READ, slot)

    def _timeout(self) -> float | None:
        due = [t for t in (*(slot.start_at for slot in self.slots), self.kill_at) if t is not None]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _signalled(self, wake_read: socket.socket) -> None:
        for signum in wake_read.recv(64):
            if signum not in (signal.SIGTERM, signal.SIGINT):
                continue
            self.signals += 1
            name = signal.Signals(signum).name
            log.info("supervisor %d: %s%s: passed on to the worker processes", os.getpid(),
                     "second " if self.signals > 1 else "", name)
            if self.kill_at is None:
                self.kill_at = time.monotonic() + self.grace_s + KILL_AFTER_GRACE_S
            for slot in self.slots:
                slot.start_at = None  # stopping: nothing starts again
                if slot.process and slot.process.poll() is None:
                    slot.process.send_signal(signum)

    def _exited(self, slot: _Slot, selector: selectors.BaseSelector) -> None:
        assert slot.process is not None and slot.pidfd is not None
        selector.unregister(slot.pidfd)
        os.close(slot.pidfd)
        returncode, pid = slot.process.wait(), slot.process.pid
        slot.process, slot.pidfd = None, None
        lived_s = time.monotonic() - slot.started
        decision = after_exit(self.policy, returncode=returncode, lived_s=lived_s, young_deaths=slot.young_deaths,
                              stopping=self.signals > 0, burst=self.burst)
        slot.young_deaths = decision.young_deaths
        if decision.delay_s is None:
            slot.returncode = returncode
            log.info("supervisor %d: worker process %d %s", os.getpid(), pid, how_it_ended(returncode))
            return
        slot.start_at = time.monotonic() + decision.delay_s
        log.warning("supervisor %d: worker process %d %s after %.1f s; starting another in %.1f s",
                    os.getpid(), pid, how_it_ended(returncode), lived_s, decision.delay_s)

    def _start_due(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.start_at is not None and slot.start_at <= now:
                self._start(slot, selector)
                log.info("supervisor %d: worker process %d started", os.getpid(), slot.process.pid)

    def _kill_late(self) -> None:
        if self.kill_at is None or time.monotonic() < self.kill_at:
            return
        for slot in self.slots:
            if slot.process and slot.process.poll() is None:
                log.error("supervisor %d: worker process %d outlived its grace by %.0f s: killed", os.getpid(),
                          slot.process.pid, KILL_AFTER_GRACE_S)
                slot.process.kill()
        self.kill_at = None
