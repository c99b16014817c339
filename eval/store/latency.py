"""The latency part of the results store: the latency phase's slots, written one probe question (one block)
per transaction, summarised into the samples' latency columns, and read back as per-question pairs that
never span two runs or two measurement sessions.
"""

from __future__ import annotations

from collections.abc import Sequence

from eval.store.lifecycle import LATENCY_COLUMNS, Owner, Record, StorePart, check_owner
from eval.store.rows import LatencySlotRow


class LatencyStore(StorePart):
    """The latency phase's part of the store, mixed into `DuckDBStore`."""

    def add_slots(self, rows: Sequence[LatencySlotRow], owner: Owner | None = None) -> None:
        """One block's slots (every setting of one probe question, every repeat), together or not at all; a
        block stored again (a resumed phase) replaces the one it measures again.
        """
        with self.transaction() as con:
            for run_id in sorted({r.run_id for r in rows}):
                if owner is not None:
                    check_owner(con, run_id, owner)
            for run_id, question_id in sorted({(r.run_id, r.question_id) for r in rows}):
                con.execute("DELETE FROM latency_slots WHERE run_id = ? AND question_id = ?", [run_id, question_id])
            self._insert(con, "latency_slots", rows)

    def measured_questions(self, run_id: str, setting_hashes: Sequence[str], repeats: int) -> set[str]:
        """Probe questions whose block is complete for every one of `setting_hashes` (a resumed phase skips
        them): each setting holds `repeats` twin-0 slots of the question.
        """
        if not setting_hashes:
            return set()
        rows = self.query(
            "SELECT question_id FROM latency_slots WHERE run_id = ? AND twin = 0 AND list_contains(?, setting_hash) "
            "GROUP BY question_id HAVING count(DISTINCT setting_hash) = ? AND count(*) = ?",
            [run_id, list(setting_hashes), len(setting_hashes), len(setting_hashes) * repeats],
        )
        return {str(r["question_id"]) for r in rows}

    def summarise_latency(self, run_id: str, owner: Owner | None = None) -> int:
        """Write each probe question's latency into its sample rows: the median over its ok twin-0 slots of
        each part (every setting of the run, reused ones included: their earlier run's latency is cleared
        first, never kept). Returns the sample rows that got a latency.
        """
        nulls = ", ".join(f"{c} = NULL" for c in LATENCY_COLUMNS)
        with self.transaction() as con:
            if owner is not None:
                check_owner(con, run_id, owner)
            con.execute(f"UPDATE samples SET {nulls} WHERE run_id = ?", [run_id])
            con.execute(
                """
UPDATE samples s SET probe_ttft_s = m.ttft, probe_prefill_s = m.prefill, probe_decode_s = m.decode,
    probe_cached_tokens = m.cached, e2e_latency_s = m.e2e, e2e_cold_s = m.e2e, e2e_paid_s = m.e2e,
    offline_s = m.offline, latency_n = m.n, latency_session = m.session
FROM (SELECT setting_hash, question_id, median(ttft_s) AS ttft, median(prefill_s) AS prefill,
             median(decode_s) AS decode, CAST(median(cached_tokens) AS BIGINT) AS cached,
             median(e2e_live_s) AS e2e, median(offline_s) AS offline, count(*) AS n, any_value(session_id) AS session
      FROM latency_slots WHERE run_id = ? AND twin = 0 AND status = 'ok' AND e2e_live_s IS NOT NULL
      GROUP BY setting_hash, question_id) m
WHERE s.run_id = ? AND s.setting_hash = m.setting_hash AND s.question_id = m.question_id""",
                [run_id, run_id],
            )
            (n,) = con.execute(
                "SELECT count(*) FROM samples WHERE run_id = ? AND latency_n IS NOT NULL", [run_id]
            ).fetchone()
        return int(n)

    def slot_pairs(
        self, run_a: str, hash_a: str, twin_a: int, run_b: str, hash_b: str, twin_b: int, column: str = "e2e_live_s"
    ) -> dict[str, float]:
        """Per probe question, the paired ratio a / b of `column`: the ratio inside each block (both requests
        timed back to back, within one run and one session), and the median of those over the question's
        blocks. Two runs never pair: an empty result (the gate then gives no latency verdict, and says why).
        """
        if column not in ("e2e_live_s", "ttft_s", "prefill_s"):
            raise ValueError(f"not a slot timing: {column}")
        if run_a != run_b:
            return {}
        rows = self.query(
            f"""
SELECT a.question_id, median(a.{column} / b.{column}) AS ratio
FROM latency_slots a JOIN latency_slots b
  ON a.run_id = b.run_id AND a.session_id = b.session_id AND a.question_id = b.question_id AND a.repeat = b.repeat
WHERE a.run_id = ? AND a.setting_hash = ? AND a.twin = ? AND b.setting_hash = ? AND b.twin = ?
  AND a.status = 'ok' AND b.status = 'ok' AND a.{column} > 0 AND b.{column} > 0
GROUP BY a.question_id""",
            [run_a, hash_a, twin_a, hash_b, twin_b],
        )
        return {str(r["question_id"]): float(r["ratio"]) for r in rows if r["ratio"] is not None}

    def slots(self, run_id: str) -> list[Record]:
        """Every slot of a run, in measurement order."""
        return self.query(
            "SELECT * FROM latency_slots WHERE run_id = ? ORDER BY measured_at, question_id, repeat, position",
            [run_id],
        )

    def cache_hit_pairs(self, run_id: str) -> set[tuple[str, str]]:
        """(setting hash, question id) of every sample of a run that the semantic answer cache served."""
        rows = self.query(
            "SELECT setting_hash, question_id FROM samples WHERE run_id = ? AND cache_hit_of IS NOT NULL", [run_id]
        )
        return {(str(r["setting_hash"]), str(r["question_id"])) for r in rows}

    def has_slots(self, run_id: str) -> bool:
        """Whether a run's latency was measured by the latency phase (a store written before it has none)."""
        rows = self.query("SELECT count(*) AS n FROM latency_slots WHERE run_id = ?", [run_id])
        return bool(rows[0]["n"])
