"""Resuming a sweep after a crash, and reusing finished settings of earlier runs.

Each setting's rows are written in one transaction, so a run that died holds whole settings only. A new
sweep first marks the runs of this machine whose process is gone as `killed`; then, if an unfinished run
(failed or killed) has the same fingerprint (same config, questions, index, code, packages and hardware),
it reopens that run and computes only the settings it lacks. Settings that another run computed over the
same inputs (the same reuse key: the fingerprint without the grid) are copied from it.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from corpus.errors import CribsheetError
from eval.settings import Setting
from eval.store import DuckDBStore
from eval.store.rows import QuestionRow, RunRow, SettingRow


@dataclass
class RunClaim:
    """The run this sweep writes: a new one, or an unfinished one it resumes."""

    run_id: str
    resumed: bool = False
    done: set[str] = field(default_factory=set)
    """Setting hashes whose rows are already stored (kept, not recomputed)."""
    stage_seconds: dict[str, float] = field(default_factory=dict)
    """Stage times the earlier attempts recorded (a failed attempt records them; a killed one cannot)."""


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def mark_dead_runs(store: DuckDBStore) -> list[str]:
    """Mark `killed` every `running` run of this machine whose process is gone; returns their ids."""
    host = socket.gethostname()
    killed = []
    for run in store.running_runs():
        if run["host"] == host and run["pid"] is not None and not process_alive(int(run["pid"])):
            store.mark_killed(str(run["run_id"]), f"process {run['pid']} on {host} died before the run finished")
            killed.append(str(run["run_id"]))
    return killed


def claim_run(
    store: DuckDBStore,
    row: RunRow,
    settings: Sequence[SettingRow],
    questions: Sequence[QuestionRow],
    resume: bool = True,
) -> RunClaim:
    """Start `row`'s run, or reopen the unfinished run with its fingerprint (`resume`); a live run with
    the same fingerprint is an error, so two processes never write one run.
    """
    mark_dead_runs(store)
    live = [r for r in store.running_runs() if r["fingerprint"] == row.fingerprint]
    if live:
        other = live[0]
        raise CribsheetError(
            f"run {other['run_id']} over the same inputs is still running (pid {other['pid']} on {other['host']}); "
            "wait for it, or stop it and run again to resume it"
        )
    previous = store.resumable_run(str(row.fingerprint)) if resume and row.fingerprint else None
    if previous is None:
        store.start_run(row, settings, questions)
        return RunClaim(run_id=row.run_id)
    run_id = str(previous["run_id"])
    store.reopen_run(run_id, os.getpid(), socket.gethostname())
    stages = json.loads(previous["stage_seconds"]) if previous["stage_seconds"] else {}
    return RunClaim(run_id=run_id, resumed=True, done=store.settings_done(run_id), stage_seconds=stages)


def reuse_settings(
    store: DuckDBStore,
    reuse_key: str,
    run_id: str,
    settings: Sequence[Setting],
    setting_hash: Callable[[Setting], str],
    tick: Callable[[str, int, int], None],
) -> tuple[list[Setting], int]:
    """Copy into `run_id` the rows of every setting that an earlier run with the same reuse key computed
    (same config apart from the grid, questions, index, code, packages, hardware); returns the settings left
    to compute and how many were reused.
    """
    left, reused = [], 0
    for setting in settings:
        source = store.reusable_source(reuse_key, setting_hash(setting), run_id)
        if source is None:
            left.append(setting)
            continue
        n = store.copy_setting(source, run_id, setting_hash(setting))
        tick(f"reused {setting.name} from run {source}", n, n)
        reused += 1
    return left, reused
