"""The latency part of the results store: the latency phase's slots, written one probe question (one block)
per transaction, summarised into the samples' latency columns, and read back as per-question pairs that
never span two runs or two measurement sessions.
"""

from __future__ import annotations

from collections.abc import Sequence

from eval.store.lifecycle import LATENCY_COLUMNS, Owner, Record, StorePart, check_owner
from eval.store.rows import LatencySlotRow

SLOT_COLUMNS = ("e2e_live_s", "ttft_s", "prefill_s", "prompt_tokens")
"""The slot columns a latency ratio may be read from (`eval.gate.load_check.latency_column` maps a policy's
metric to one)."""


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
            for run_id, question_id, repeat in sorted({(r.run_id, r.question_id, r.repeat) for r in rows}):
                con.execute(
                    "DELETE FROM latency_slots WHERE run_id = ? AND question_id = ? AND repeat = ?",
                    [run_id, question_id, repeat],
                )
            self._insert(con, "latency_slots", rows)

    def measured_blocks(self, run_id: str, setting_hashes: Sequence[str]) -> set[tuple[str, int]]:
        """(probe question, repeat) of every block complete for each of `setting_hashes` (a resumed phase
        skips them): each setting holds the block's twin-0 slot.
        """
        if not setting_hashes:
            return set()
        rows = self.query(
            "SELECT question_id, repeat FROM latency_slots WHERE run_id = ? AND twin = 0 "
            "AND list_contains(?, setting_hash) GROUP BY question_id, repeat HAVING count(DISTINCT setting_hash) = ?",
            [run_id, list(setting_hashes), len(setting_hashes)],
        )
        return {(str(r["question_id"]), int(r["repeat"])) for r in rows}

    def measured_questions(self, run_id: str, setting_hashes: Sequence[str], repeats: int) -> set[str]:
        """Probe questions whose every block (`repeats` of them) is complete for each of `setting_hashes`."""
        blocks = self.measured_blocks(run_id, setting_hashes)
        return {q for q, _ in blocks if all((q, r) in blocks for r in range(repeats))}

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
        if column not in SLOT_COLUMNS:
            raise ValueError(f"not a slot timing: {column}")
        if run_a != run_b:
            return {}
        rows = self.query(
            f"""
SELECT a.question_id, exp(median(ln(a.{column} / b.{column}))) AS ratio
FROM latency_slots a JOIN latency_slots b
  ON a.run_id = b.run_id AND a.session_id = b.session_id AND a.question_id = b.question_id AND a.repeat = b.repeat
WHERE a.run_id = ? AND a.setting_hash = ? AND a.twin = ? AND b.setting_hash = ? AND b.twin = ?
  AND a.status = 'ok' AND b.status = 'ok' AND a.{column} > 0 AND b.{column} > 0
  AND isfinite(a.{column}) AND isfinite(b.{column})
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

    def block_ratios(
        self, run_ids: Sequence[str], hash_a: str, hash_b: str, column: str = "e2e_live_s"
    ) -> list[tuple[str, str, int, float]]:
        """Every block's paired ratio a / b (both twin 0, both ok), as (run/session, question, repeat, ratio), in
        the order the blocks were measured (a block's time: its first slot's, on its session's clock).
        """
        if column not in SLOT_COLUMNS:
            raise ValueError(f"not a slot timing: {column}")
        rows = self.query(
            f"""
SELECT a.run_id || '/' || a.session_id AS session, a.question_id, a.repeat, a.{column} / b.{column} AS ratio,
  least(a.measured_at, b.measured_at) AS block_at
FROM latency_slots a JOIN latency_slots b
  ON a.run_id = b.run_id AND a.session_id = b.session_id AND a.question_id = b.question_id AND a.repeat = b.repeat
WHERE list_contains(?, a.run_id) AND a.setting_hash = ? AND a.twin = 0 AND b.setting_hash = ? AND b.twin = 0
  AND a.status = 'ok' AND b.status = 'ok' AND a.{column} > 0 AND b.{column} > 0
  AND isfinite(a.{column}) AND isfinite(b.{column})
ORDER BY block_at, a.question_id""",
            [list(run_ids), hash_a, hash_b],
        )
        return [(str(r["session"]), str(r["question_id"]), int(r["repeat"]), float(r["ratio"])) for r in rows]

    def foreign_load(self, run_ids: Sequence[str]) -> tuple[float | None, float | None, int | None]:
        """The share of the machine's cores that other processes used while the runs' slots were timed: over
        the whole phase (their CPU seconds over the slots' seconds times the cores) and at the 90th percentile
        of the slots (a burst through a tenth of the phase shows there, diluted in the mean), and the cores;
        NULL where no slot recorded it.
        """
        rows = self.query(
            "SELECT sum(foreign_cpu_s) / nullif(sum(slot_s * cores), 0) AS load, "
            "quantile_cont(foreign_cpu_s / nullif(slot_s * cores, 0), 0.9) AS p90, max(cores) AS cores "
            "FROM latency_slots WHERE list_contains(?, run_id) AND foreign_cpu_s IS NOT NULL",
            [list(run_ids)],
        )
        r = rows[0] if rows else {"load": None}
        load, p90, cores = r["load"], r.get("p90"), r.get("cores")
        if load is None or p90 is None or cores is None:
            return None, None, None
        return float(load), float(p90), int(cores)

    def offline_bill(self, run_ids: Sequence[str], setting_hash: str) -> float | None:
        """A setting's mean offline seconds per ok twin-0 slot over the runs (NULL: it read no offline work)."""
        rows = self.query(
            "SELECT avg(coalesce(offline_s, 0)) AS bill, count(offline_s) AS n FROM latency_slots "
            "WHERE list_contains(?, run_id) AND setting_hash = ? AND twin = 0 AND status = 'ok'",
            [list(run_ids), setting_hash],
        )
        return float(rows[0]["bill"]) if rows and rows[0]["n"] else None

    def failed_slots(self, run_ids: Sequence[str], setting_hash: str) -> tuple[int, list[str]]:
        """A setting's failed twin-0 slots over the runs, and the questions whose every slot failed."""
        rows = self.query(
            "SELECT question_id, count(*) FILTER (WHERE status <> 'ok') AS failed, count(*) AS n "
            "FROM latency_slots WHERE list_contains(?, run_id) AND setting_hash = ? AND twin = 0 GROUP BY question_id",
            [list(run_ids), setting_hash],
        )
        lost = sorted(str(r["question_id"]) for r in rows if r["failed"] == r["n"])
        return sum(int(r["failed"]) for r in rows), lost
