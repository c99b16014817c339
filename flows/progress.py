"""Progress reporting for flows: the CLI installs a reporter; flows look it up at run time.

Callbacks cannot be flow parameters (Prefect serialises parameters), so they travel through here. Without
an installed reporter (a deployment run by a worker, a CI log), every stage logs one line when it
completes, with its count and seconds, through Prefect's run logger inside a flow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

Reporter = Callable[[str, int, int], None]


def _log(message: str) -> None:
    """One line to Prefect's run logger inside a flow or task run, else to the `cribsheet` logger."""
    try:
        from prefect.exceptions import MissingContextError
        from prefect.logging import get_run_logger

        try:
            get_run_logger().info(message)
            return
        except MissingContextError:
            pass
    except ImportError:  # pragma: no cover - prefect is a core dependency
        pass
    logging.getLogger("cribsheet").info(message)


HEARTBEAT_S = 30.0
"""Longest silence of a running stage without a terminal: a line with its counts at least this often."""


class LineReporter:
    """Logs one line per stage when it completes (`retrieve: 87/87 in 3.2 s`), and while a stage runs a line
    with its latest counts at least every `every` seconds (`embed: 4096/19780 after 31 s`), also through a
    long call that reports nothing until it returns (one engine batch): a log without a terminal never
    goes quiet on long work. `close()` stops the heartbeat thread.

    `clock` gives the seconds lines report; with `thread=False` no heartbeat thread starts and the lines
    between ticks come only from calling `beat()`, so a test with a fake clock sees exactly which lines
    come out, in which order.
    """

    def __init__(
        self,
        emit: Callable[[str], None] = _log,
        every: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.perf_counter,
        thread: bool = True,
    ) -> None:
        self.emit = emit
        self.every = every
        self.clock = clock
        self.threaded = thread
        self._started: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._counts: dict[str, tuple[int, int]] = {}
        self._done: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        """Record a tick; emit the stage's line when `done` reaches `total` (total 0: not known yet), or a
        heartbeat when the stage has been silent for `every` seconds.
        """
        now = self.clock()
        with self._lock:
            start = self._started.setdefault(stage, now)
            if stage in self._done:
                return
            self._counts[stage] = (done, total)
            if 0 < total <= done:
                self._done.add(stage)
                line = f"{stage}: {done}/{total} in {now - start:.1f} s"
            elif now - self._last.get(stage, start) >= self.every:
                line = self._heartbeat(stage, now)
            else:
                line = ""
            if self._thread is None and self.threaded:
                self._thread = threading.Thread(target=self._run, name="cribsheet-heartbeat", daemon=True)
                self._thread.start()
        if line:
            self.emit(line)

    def _run(self) -> None:
        """The heartbeat thread: a `beat()` every `every` seconds (at most 5) until `close()`."""
        while not self._stop.wait(min(self.every, 5.0)):
            self.beat()

    def beat(self) -> None:
        """Every stage still running and silent for `every` seconds gets a line with its latest counts."""
        now = self.clock()
        lines = []
        with self._lock:
            for stage, start in self._started.items():
                if stage in self._done or now - self._last.get(stage, start) < self.every:
                    continue
                lines.append(self._heartbeat(stage, now))
        for line in lines:
            self.emit(line)

    def _heartbeat(self, stage: str, now: float) -> str:
        """A running stage's line with its latest counts; marks the stage as just heard from (lock held)."""
        self._last[stage] = now
        done, total = self._counts.get(stage, (0, 0))
        return f"{stage}: {done}/{total or '?'} after {now - self._started[stage]:.0f} s"

    def close(self) -> None:
        """Stop the heartbeat thread."""
        self._stop.set()


class _Holder:
    reporter: Reporter | None = None
    fallback: LineReporter = LineReporter()


def set_reporter(reporter: Reporter | None) -> None:
    """Install the reporter used by every flow in this process (None: one log line per stage)."""
    _Holder.reporter = reporter
    _Holder.fallback.close()
    _Holder.fallback = LineReporter()


def report(stage: str, done: int, total: int) -> None:
    """Forward one progress tick to the installed reporter."""
    (_Holder.reporter or _Holder.fallback)(stage, done, total)
