"""Resuming a sweep after a crash, and reusing finished settings of earlier runs.

Each setting's rows are written in one transaction, so a run that died holds whole settings only. A new
sweep first marks the runs of this machine whose process is gone as `killed`; then, if an unfinished run
(failed or killed) has the same fingerprint (same config, questions, index, code, packages and hardware),
it reopens that run and computes only the settings it lacks. Settings that another run computed over the
same inputs (the same reuse key: the fingerprint without the grid) are copied from it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence

from corpus.errors import CribsheetError
from eval.settings import Setting
from eval.store import DuckDBStore
from eval.store.lifecycle import Claimed
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


class Heartbeat:
    """A daemon thread that records every `every_s` that this process still runs `run_id` (stopped before
    the run is closed, so it never races the closing write).
    """

    def __init__(self, store: DuckDBStore, run_id: str, every_s: float = HEARTBEAT_S) -> None:
        import threading

        self.store, self.run_id, self.every_s = store, run_id, every_s
        self.owner = (os.getpid(), socket.gethostname())
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

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                if not self.store.heartbeat(self.run_id, *self.owner):
                    return  # taken over: the next write refuses (`add_samples(owner=...)`)
            except CribsheetError:
                continue  # the store was busy past its lock timeout: try again next beat


def reuse_settings(
    store: DuckDBStore,
    reuse_key: str,
    run_id: str,
    settings: Sequence[Setting],
    setting_hash: Callable[[Setting], str],
    tick: Callable[[str, int, int], None],
    max_failed_fraction: float = 1.0,
) -> tuple[list[Setting], int]:
    """Copy into `run_id` the rows of every setting that an earlier run with the same reuse key computed
    (same config apart from the grid, questions, index, code, packages, hardware); returns the settings left
    to compute and how many were reused.
    """
    left, reused = [], 0
    for setting in settings:
        source = store.reusable_source(reuse_key, setting_hash(setting), run_id, max_failed_fraction)
        if source is None:
            left.append(setting)
            continue
        n = store.copy_setting(source, run_id, setting_hash(setting))
        tick(f"reused {setting.name} from run {source}", n, n)
        reused += 1
    return left, reused
