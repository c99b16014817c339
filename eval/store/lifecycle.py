"""The run lifecycle part of the results store: a run whose process died is marked `killed`, an
unfinished run is found by its fingerprint and reopened, and what a resumed run needs is read back.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from corpus.errors import CribsheetError
from eval.store.rows import QuestionRow, RunRow, SettingRow

Record = dict[str, Any]
"""One stored row as column -> value."""

LATENCY_COLUMNS = (
    "probe_ttft_s",
    "probe_prefill_s",
    "probe_decode_s",
    "probe_cached_tokens",
    "e2e_latency_s",
    "e2e_cold_s",
    "e2e_paid_s",
    "offline_s",
    "latency_n",
    "latency_session",
)
"""Sample columns the latency phase writes (and a reused row never keeps from the run it came from)."""


def drop_setting(con: Any, run_id: str, setting_hash: str) -> None:
    """Delete one setting's samples and claims of a run (inside the caller's transaction)."""
    for table in ("samples", "claims"):
        con.execute(f"DELETE FROM {table} WHERE run_id = ? AND setting_hash = ?", [run_id, setting_hash])


class RunTakenOver(CribsheetError):
    """Another process took a run over (its owner was silent past the takeover timeout): the old owner stops
    and writes nothing more.
    """


Owner = tuple[int, str]
"""(pid, host) of the process that runs a run (`runs.pid`, `runs.host`)."""


def check_owner(con: Any, run_id: str, owner: Owner) -> None:
    """Raise `RunTakenOver` unless process `owner` still runs `run_id` (inside the caller's transaction, so
    the write that follows lands only while it does).
    """
    holder = con.execute("SELECT pid, host, status FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if holder is not None and (holder[0], holder[1], holder[2]) == (*owner, "running"):
        return
    now = "gone" if holder is None else f"{holder[2]}, held by process {holder[0]} on {holder[1]}"
    raise RunTakenOver(
        f"run {run_id} is no longer this process's (process {owner[0]} on {owner[1]}; the run is now {now}): "
        "it was taken over; nothing written"
    )


Alive = Callable[[str, int], bool | None]
"""(host, pid) -> whether that process is alive; None when this machine cannot tell (another host)."""


@dataclass
class Claimed:
    """What claiming a run decided: the run to write, whether it resumes one, what it keeps."""

    run_id: str
    resumed: bool = False
    done: set[str] = field(default_factory=set)
    """Setting hashes whose rows are already stored (kept, not recomputed)."""
    stage_seconds: dict[str, float] = field(default_factory=dict)
    """Stage times the earlier attempts recorded (a failed attempt records them; a killed one cannot)."""


class StorePart:
    """Base of the store's parts mixed into `DuckDBStore`, which provides `transaction`, `query`, `_insert`."""

    def transaction(self) -> AbstractContextManager[Any]:  # pragma: no cover - provided by the store
        """All or nothing."""
        raise NotImplementedError

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Record]:  # pragma: no cover
        """Rows of a read query as dicts."""
        raise NotImplementedError

    @staticmethod
    def _insert(con: Any, table: str, rows: Any) -> None:  # pragma: no cover - provided by the store
        raise NotImplementedError


class RunLifecycle(StorePart):
    """The run lifecycle, mixed into `DuckDBStore`."""

    def claim(
        self,
        run: RunRow,
        settings: Sequence[SettingRow],
        questions: Sequence[QuestionRow],
        alive: Alive,
        stale_after_s: float,
        resume: bool = True,
        max_failed_fraction: float = 1.0,
    ) -> Claimed:
        """Start `run`, or reopen the unfinished run with its fingerprint, in ONE transaction (the store's file
        lock serializes it against every other process): runs whose process is dead, or whose heartbeat is
        older than `stale_after_s` (from any machine), are marked `killed` first; a live run with the same
        fingerprint is an error, so two processes never write one run.
        """
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        stale_before = now - dt.timedelta(seconds=stale_after_s)
        with self.transaction() as con:
            running = con.execute(
                "SELECT run_id, pid, host, coalesce(heartbeat_at, started_at) < ? AS stale, "
                "coalesce(heartbeat_at, started_at) AS seen FROM runs WHERE status = 'running'",
                [stale_before],
            ).fetchall()
            for run_id, pid, host, stale, seen in running:
                if pid is not None and alive(str(host), int(pid)) is False:
                    error = f"process {pid} on {host} died before the run finished"
                elif stale:
                    error = f"taken over: no heartbeat from process {pid} on {host} since {seen:%Y-%m-%d %H:%M:%S} UTC"
                else:
                    continue
                con.execute(
                    "UPDATE runs SET status = 'killed', finished_at = ?, error = ? WHERE run_id = ?",
                    [now, error, run_id],
                )
            live = con.execute(
                "SELECT run_id, pid, host FROM runs WHERE status = 'running' AND fingerprint = ?", [run.fingerprint]
            ).fetchall()
            if live:
                run_id, pid, host = live[0]
                raise CribsheetError(
                    f"run {run_id} over the same inputs is still running (pid {pid} on {host}); "
                    "wait for it, or stop it and run again to resume it"
                )
            previous = (
                con.execute(
                    "SELECT run_id, stage_seconds, pid, host, error FROM runs WHERE fingerprint = ? "
                    "AND status IN ('failed', 'killed') ORDER BY started_at DESC LIMIT 1",
                    [run.fingerprint],
                ).fetchone()
                if resume and run.fingerprint
                else None
            )
            if previous is None:
                fresh = run.model_copy(update={"heartbeat_at": now})
                self._insert(con, "runs", [fresh])
                self._insert(con, "settings", settings)
                self._insert(con, "questions", questions)
                return Claimed(run_id=run.run_id)
            run_id, stages, old_pid, old_host, error = previous
            took = f"{old_pid}@{old_host}" if str(error or "").startswith("taken over") else None
            con.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL, error = NULL, pid = ?, host = ?, "
                "heartbeat_at = ?, resumes = coalesce(resumes, 0) + 1, "
                "taken_over_from = coalesce(?, taken_over_from) WHERE run_id = ?",
                [run.pid, run.host, now, took, run_id],
            )
            done = con.execute(
                "SELECT setting_hash FROM samples WHERE run_id = ? GROUP BY setting_hash "
                "HAVING avg((status <> 'ok')::DOUBLE) <= ?",
                [run_id, max_failed_fraction],
            ).fetchall()
            earlier = json.loads(stages) if stages else {}
            return Claimed(run_id=str(run_id), resumed=True, done={str(h) for (h,) in done}, stage_seconds=earlier)

    def heartbeat(self, run_id: str, pid: int, host: str) -> None:
        """Record that process `pid` on `host` is alive and still runs `run_id`; `RunTakenOver` (nothing
        written) when another process took the run over.
        """
        with self.transaction() as con:
            check_owner(con, run_id, (pid, host))
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            con.execute("UPDATE runs SET heartbeat_at = ? WHERE run_id = ?", [now, run_id])

    def probe_points(self, run_id: str) -> list[tuple[int, float]]:
        """(uncached prompt tokens, prefill seconds) of every probe request of a run."""
        rows = self.query(
            "SELECT prompt_tokens - coalesce(probe_cached_tokens, 0) AS c, probe_prefill_s FROM samples "
            "WHERE run_id = ? AND probe_prefill_s IS NOT NULL AND prompt_tokens IS NOT NULL",
            [run_id],
        )
        return [(int(r["c"]), float(r["probe_prefill_s"])) for r in rows]

    def judge_pairs(self, run_id: str, column: str = "judge_supported") -> list[tuple[bool, bool]]:
        """(checker supported, other verdict) of every claim of a run that the LLM judge (`judge_supported`)
        or the model verifier (`model_supported`) decided.
        """
        if column not in ("judge_supported", "model_supported"):
            raise ValueError(f"not a verdict column: {column}")
        rows = self.query(
            f"SELECT supported, {column} AS other FROM claims WHERE run_id = ? AND {column} IS NOT NULL", [run_id]
        )
        return [(bool(r["supported"]), bool(r["other"])) for r in rows]

    def reusable_source(
        self,
        reuse_key: str,
        setting_hash: str,
        run_id: str,
        max_failed_fraction: float = 1.0,
        models_sha256: str | None = None,
    ) -> str | None:
        """The newest other run with the same reuse key that holds this setting's rows, with at most
        `max_failed_fraction` of them failed, computed with the same models the setting alone names
        (`models_sha256`: its reranker, compressor LM, unit scorer).

        A failed row is copied only once it has failed twice: a source whose setting has failed rows is
        reused only when another computation of the setting (not a copy of the same one) failed on exactly
        the same questions. A transient failure (a timeout, an engine restart) is computed again by the next
        run, instead of being copied into every later run and leaving each gate on it UNDECIDED; a failure
        that comes back costs one computation more, then is copied like any row.
        """
        rows = self.query(
            "WITH computed AS (SELECT s.run_id, any_value(coalesce(s.reused_from_run, s.run_id)) AS origin, "
            "avg((s.status <> 'ok')::DOUBLE) AS failed_share, count_if(s.status <> 'ok') AS n_failed, "
            "list_sort(list(s.question_id) FILTER (WHERE s.status <> 'ok')) AS failed "
            "FROM samples s JOIN runs r ON r.run_id = s.run_id WHERE r.reuse_key = ? AND s.setting_hash = ? "
            "AND EXISTS (SELECT 1 FROM settings t WHERE t.run_id = s.run_id AND t.setting_hash = s.setting_hash "
            "AND t.models_sha256 IS NOT DISTINCT FROM ?) GROUP BY s.run_id) "
            "SELECT c.run_id FROM computed c JOIN runs r ON r.run_id = c.run_id "
            "WHERE c.run_id <> ? AND c.failed_share <= ? AND (c.n_failed = 0 OR EXISTS ("
            "SELECT 1 FROM computed d WHERE d.origin <> c.origin AND d.failed = c.failed)) "
            "ORDER BY r.started_at DESC LIMIT 1",
            [reuse_key, setting_hash, models_sha256, run_id, max_failed_fraction],
        )
        return str(rows[0]["run_id"]) if rows else None

    def copy_setting(self, source_run: str, run_id: str, setting_hash: str, owner: Owner | None = None) -> int:
        """Copy one setting's samples and claims from `source_run` into `run_id` (samples marked with the run
        that computed them), in one transaction; returns the number of samples. With `owner` (pid, host),
        nothing is copied unless that process still runs `run_id` (`RunTakenOver`).
        """
        with self.transaction() as con:
            if owner is not None:
                check_owner(con, run_id, owner)
            drop_setting(con, run_id, setting_hash)
            # Answers are reused, latency never is: the latency phase measures a reused setting again tonight.
            cleared = "".join(f", NULL AS {c}" for c in LATENCY_COLUMNS)
            con.execute(
                "INSERT INTO samples SELECT * REPLACE (? AS run_id, coalesce(reused_from_run, run_id) AS "
                f"reused_from_run{cleared}) FROM samples WHERE run_id = ? AND setting_hash = ?",
                [run_id, source_run, setting_hash],
            )
            con.execute(
                "INSERT INTO claims SELECT * REPLACE (? AS run_id) FROM claims WHERE run_id = ? AND setting_hash = ?",
                [run_id, source_run, setting_hash],
            )
            (n,) = con.execute(
                "SELECT count(*) FROM samples WHERE run_id = ? AND setting_hash = ?", [run_id, setting_hash]
            ).fetchone()
        return int(n)

    def question_ids(self, run_id: str) -> list[str]:
        """The ids of a run's questions."""
        return [
            str(r["question_id"]) for r in self.query("SELECT question_id FROM questions WHERE run_id = ?", [run_id])
        ]

    def sequential_decisions(self) -> list[Record]:
        """Every sequential gate decision of the store (its looks in `results_json`), newest first."""
        return self.query(
            "SELECT created_at, decision, exit_code, baseline, candidate, n_questions, report_path, reasons, "
            "results_json, baseline_hash, candidate_hash, baseline_run, candidate_run "
            "FROM gate_decisions WHERE results_json LIKE '%\"sequence_id\"%' ORDER BY created_at DESC"
        )

    def decisions_for_run(self, run_id: str) -> list[Record]:
        """Gate decisions whose baseline or candidate came from this run, newest first."""
        return self.query(
            "SELECT created_at, decision, exit_code, baseline, candidate, n_questions, report_path, reasons, "
            "results_json, baseline_hash, candidate_hash, baseline_run, candidate_run "
            "FROM gate_decisions WHERE baseline_run = ? OR candidate_run = ? ORDER BY created_at DESC",
            [run_id, run_id],
        )
