"""Resuming a sweep after a crash, and reusing finished settings of earlier runs.

Each setting's rows are written in one transaction, so a run that died holds whole settings only. A new
sweep first marks the runs of this machine whose process is gone as `killed`; then, if an unfinished run
(failed or killed) has the same fingerprint (same config, questions, index, code, packages and hardware),
it reopens that run and computes only the settings it lacks. Settings that another run computed over the
same inputs (the same reuse key: the fingerprint without the grid) are copied from it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence

from corpus.errors import CribsheetError
from eval.settings import Setting
from eval.store import DuckDBStore
from eval.store.lifecycle import Claimed, Owner, RunTakenOver
from eval.store.rows import QuestionRow, RunRow, SettingRow


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


HEARTBEAT_S = 30.0
"""How often a running sweep records that it is alive (`runs.heartbeat_at`)."""
STALE_AFTER_S = 600.0
"""A `running` run silent for this long may be taken over from any machine: twenty heartbeats missed, well
past any single step (an engine start, one LLMLingua setting's compression, a setting's transaction)."""
MAX_HEARTBEAT_FAILURES = 3
"""Heartbeats failed in a row that end a sweep (at its next setting or write): even when each one waits out a
busy store's lock timeout (120 s), the heartbeat gives up before the run has been silent for `STALE_AFTER_S`."""


def _alive(host: str, pid: int) -> bool | None:
    """Whether process `pid` is alive, when it ran on this machine; None for another machine's."""
    return process_alive(pid) if host == socket.gethostname() else None


def claim_run(
    store: DuckDBStore,
    row: RunRow,
    settings: Sequence[SettingRow],
    questions: Sequence[QuestionRow],
    resume: bool = True,
    max_failed_fraction: float = 1.0,
    stale_after_s: float = STALE_AFTER_S,
) -> Claimed:
    """Start `row`'s run, or reopen the unfinished run with its fingerprint (`resume`), in one transaction:
    a live run with the same fingerprint is an error, so two processes never write one run; a run whose
    process died on this machine, or that has been silent for `stale_after_s` on any, is taken over.
    """
    return store.claim(row, settings, questions, _alive, stale_after_s, resume, max_failed_fraction)


class HeartbeatFailed(CribsheetError):
    """A sweep's heartbeat could not be written several times in a row: the run would soon look abandoned
    and be taken over, so the sweep stops instead of writing on.
    """


log = logging.getLogger("cribsheet.heartbeat")


class Heartbeat:
    """A daemon thread that records every `every_s` that this process still runs `run_id` (stopped before
    the run is closed, so it never races the closing write).

    It never dies silently: every failed beat is logged with the run id, and when the run was taken over
    (`RunTakenOver`) or `max_failures` beats in a row failed, it stops and keeps what ended it; the sweep
    calls `check()` before each setting and each write, which raises it there.
    """

    def __init__(
        self, store: DuckDBStore, run_id: str, every_s: float = HEARTBEAT_S, max_failures: int = MAX_HEARTBEAT_FAILURES
    ) -> None:
        import threading

        self.store, self.run_id, self.every_s, self.max_failures = store, run_id, every_s, max_failures
        self.owner: Owner = (os.getpid(), socket.gethostname())
        self.failure: CribsheetError | None = None
        """What ended the heartbeat before `stop()` (None while it beats)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{run_id}", daemon=True)

    def start(self) -> Heartbeat:
        """Begin beating."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating (idempotent); called before the run's closing write."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def check(self) -> None:
        """Raise what ended the heartbeat, if anything did: `RunTakenOver`, or `HeartbeatFailed`."""
        if self.failure is not None:
            raise self.failure

    def _beat(self) -> None:
        failures = 0
        while not self._stop.wait(self.every_s):
            try:
                self.store.heartbeat(self.run_id, *self.owner)
            except RunTakenOver as exc:
                log.error("heartbeat of run %s refused; the sweep stops at its next step: %s", self.run_id, exc)
                self.failure = exc
                return
            # Any other error is counted, not fatal at once: a store busy past its lock timeout is a
            # CribsheetError that the next beat usually outlives; only a run of failures ends the run.
            except Exception as exc:
                failures += 1
                log.warning(
                    "heartbeat of run %s failed (%d of %d in a row): %s: %s",
                    self.run_id,
                    failures,
                    self.max_failures,
                    type(exc).__name__,
                    exc,
                    exc_info=not isinstance(exc, CribsheetError),  # an unexpected error: its traceback
                )
                if failures >= self.max_failures:
                    self.failure = HeartbeatFailed(
                        f"run {self.run_id}: its heartbeat failed {failures} times in a row (last: "
                        f"{type(exc).__name__}: {exc}); stopped so that no other process takes the run over while "
                        "this one still writes; fix the cause and run again to resume it"
                    )
                    log.error("%s", self.failure)
                    return
            else:
                failures = 0


def reuse_settings(
    store: DuckDBStore,
    reuse_key: str,
    run_id: str,
    settings: Sequence[Setting],
    setting_hash: Callable[[Setting], str],
    tick: Callable[[str, int, int], None],
    max_failed_fraction: float = 1.0,
    owner: Owner | None = None,
    models: Callable[[Setting], str | None] = lambda setting: None,
) -> tuple[list[Setting], int]:
    """Copy into `run_id` the rows of every setting that an earlier run with the same reuse key computed
    (same config apart from the grid, questions, index, code, packages, hardware); returns the settings left
    to compute and how many were reused. With `owner`, each copy is refused once that process no longer runs
    `run_id` (`RunTakenOver`). `models` gives a setting's own models' digest (`setting_models_sha256`): a
    source computed with other weights for them is not reused.
    """
    left, reused = [], 0
    for setting in settings:
        source = store.reusable_source(reuse_key, setting_hash(setting), run_id, max_failed_fraction, models(setting))
        if source is None:
            left.append(setting)
            continue
        n = store.copy_setting(source, run_id, setting_hash(setting), owner)
        tick(f"reused {setting.name} from run {source}", n, n)
        reused += 1
    return left, reused
