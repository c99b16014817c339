"""The recommendation part of the results store: a run's one recommendation against the shipped setting and
each candidate's verdict across the grid, written together, one recommendation per run.
"""

from __future__ import annotations

from collections.abc import Sequence

from eval.store.lifecycle import Record, StorePart
from eval.store.rows import FamilyVerdictRow, RecommendationRow


class RecommendationStore(StorePart):
    """Recommendations, mixed into `DuckDBStore`."""

    def add_recommendation(self, row: RecommendationRow, family: Sequence[FamilyVerdictRow]) -> None:
        """A run's recommendation and its candidates' verdicts, together or not at all; a run recommended
        again (the gate rerun over its rows) replaces what it held.
        """
        with self.transaction() as con:
            for table in ("recommendations", "family_verdicts"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [row.run_id])
            self._insert(con, "recommendations", [row])
            self._insert(con, "family_verdicts", family)

    def recommendation(self, run_id: str) -> Record | None:
        """The run's recommendation (`v_recommendation`'s row), None when the run has none."""
        if not self._has("v_recommendation"):
            return None
        rows = self.query("SELECT * FROM v_recommendation WHERE run_id = ?", [run_id])
        return rows[0] if rows else None

    def family_verdicts(self, run_id: str) -> list[Record]:
        """Every candidate of the run gated against the shipped setting, smallest adjusted p-value first."""
        if not self._has("family_verdicts"):
            return []
        return self.query("SELECT * FROM family_verdicts WHERE run_id = ? ORDER BY adjusted_p, candidate", [run_id])

    def _has(self, name: str) -> bool:
        """Whether the store holds this table or view: a store written before recommendations, opened
        read-only (never migrated), has neither, and its report shows none.
        """
        rows = self.query("SELECT count(*) AS n FROM information_schema.tables WHERE table_name = ?", [name])
        return bool(rows[0]["n"])
