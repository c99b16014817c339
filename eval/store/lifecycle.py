"""The run lifecycle part of the results store: a run whose process died is marked `killed`, an
unfinished run is found by its fingerprint and reopened, and what a resumed run needs is read back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

Record = dict[str, Any]


class RunLifecycle:
    """Mixed into `DuckDBStore`, which provides `transaction` and `query`."""

    def transaction(self) -> AbstractContextManager[Any]:  # pragma: no cover - provided by the store
        """All or nothing."""
        raise NotImplementedError

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Record]:  # pragma: no cover
        """Rows of a read query as dicts."""
        raise NotImplementedError

    def mark_killed(self, run_id: str, error: str) -> None:
        """A `running` run whose process is gone: `killed`, with the time it was found so."""
        with self.transaction() as con:
            con.execute(
                "UPDATE runs SET status = 'killed', finished_at = ?, error = ? WHERE run_id = ? AND status = 'running'",
                [dt.datetime.now(dt.UTC), error, run_id],
            )

    def reopen_run(self, run_id: str, pid: int, host: str) -> None:
        """An unfinished run taken over by this process to resume it."""
        with self.transaction() as con:
            con.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL, error = NULL, pid = ?, host = ?, "
                "resumes = coalesce(resumes, 0) + 1 WHERE run_id = ?",
                [pid, host, run_id],
            )

    def running_runs(self) -> list[Record]:
        """Runs marked `running`, with the process and machine that run them."""
        return self.query("SELECT run_id, pid, host, fingerprint FROM runs WHERE status = 'running'")

    def resumable_run(self, fingerprint: str) -> Record | None:
        """The newest run with this fingerprint that did not finish (failed or killed), if any."""
        rows = self.query(
            "SELECT run_id, status, stage_seconds FROM runs WHERE fingerprint = ? AND status IN ('failed', 'killed') "
            "ORDER BY started_at DESC LIMIT 1",
            [fingerprint],
        )
        return rows[0] if rows else None

    def settings_done(self, run_id: str) -> set[str]:
        """Settings of a run whose rows are stored (each setting is written in one transaction)."""
        return {
            str(r["setting_hash"])
            for r in self.query("SELECT DISTINCT setting_hash FROM samples WHERE run_id = ?", [run_id])
        }

    def probe_points(self, run_id: str) -> list[tuple[int, float]]:
        """(uncached prompt tokens, prefill seconds) of every probe request of a run."""
        rows = self.query(
            "SELECT prompt_tokens - coalesce(probe_cached_tokens, 0) AS c, probe_prefill_s FROM samples "
            "WHERE run_id = ? AND probe_prefill_s IS NOT NULL AND prompt_tokens IS NOT NULL",
            [run_id],
        )
        return [(int(r["c"]), float(r["probe_prefill_s"])) for r in rows]

    def judge_pairs(self, run_id: str) -> list[tuple[bool, bool]]:
        """(checker supported, judge supported) of every claim of a run that the LLM judge decided."""
        rows = self.query(
            "SELECT supported, judge_supported FROM claims WHERE run_id = ? AND judge_supported IS NOT NULL", [run_id]
        )
        return [(bool(r["supported"]), bool(r["judge_supported"])) for r in rows]

    def reusable_source(self, reuse_key: str, setting_hash: str, run_id: str) -> str | None:
        """The newest other run with the same reuse key that holds this setting's rows."""
        rows = self.query(
            "SELECT r.run_id FROM runs r WHERE r.reuse_key = ? AND r.run_id <> ? AND EXISTS ("
            "SELECT 1 FROM samples s WHERE s.run_id = r.run_id AND s.setting_hash = ?) "
            "ORDER BY r.started_at DESC LIMIT 1",
            [reuse_key, run_id, setting_hash],
        )
        return str(rows[0]["run_id"]) if rows else None

    def copy_setting(self, source_run: str, run_id: str, setting_hash: str) -> int:
        """Copy one setting's samples and claims from `source_run` into `run_id` (samples marked with the run
        that computed them), in one transaction; returns the number of samples.
        """
        with self.transaction() as con:
            con.execute(
                "INSERT INTO samples SELECT * REPLACE (? AS run_id, coalesce(reused_from_run, run_id) AS "
                "reused_from_run) FROM samples WHERE run_id = ? AND setting_hash = ?",
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

    def decisions_for_run(self, run_id: str) -> list[Record]:
        """Gate decisions whose baseline or candidate came from this run, newest first."""
        return self.query(
            "SELECT created_at, decision, exit_code, baseline, candidate, n_questions, report_path "
            "FROM gate_decisions WHERE baseline_run = ? OR candidate_run = ? ORDER BY created_at DESC",
            [run_id, run_id],
        )
