"""The DuckDB results store: transactional writes, and the read API the gate, the CLI and the report use.

No SQL lives outside this package: readers ask for a setting, the paired samples of two settings, or a
run's metadata, and get plain values back.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from corpus.lease import IndexPin
from eval.store.latency import LatencyStore
from eval.store.lifecycle import Owner, Record, RunLifecycle, check_owner, drop_setting
from eval.store.recommendations import RecommendationStore
from eval.store.rows import ClaimRow, GateDecisionRow, GateLookRow, QuestionRow, RunRow, SampleRow, SettingRow
from eval.store.schema import SCHEMA_VERSION, STORAGE_COMPATIBILITY, TABLES, VIEWS, columns


class SettingRef(BaseModel):
    """A stored setting of one run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    setting_hash: str
    setting_name: str


class RunMeta(BaseModel):
    """What a run was computed on: enough to tell whether two runs can be compared."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    status: str
    questions_sha256: str
    corpus_sha256: str | None
    index_version: int | None
    git_commit: str | None
    git_dirty: bool | None = None
    config_hash: str | None = None
    package_versions: str | None = None
    hardware_json: str | None = None
    hardware_sha256: str | None = None
    engine_precision: str | None = None
    verifier: str | None = None
    """The model verifier behind `faithfulness_model` ("nli:MODEL, threshold T", "likelihood:CARD, threshold
    T"; None: no verifier ran)."""
    faithfulness_validity: str | None = None
    """JSON of each faithfulness metric's method and its measured validity on the run's corpus kind."""

    def validity_lines(self) -> list[str]:
        """The line per faithfulness metric naming its method and validity (none for a run from before)."""
        return [v["line"] for v in json.loads(self.faithfulness_validity or "{}").values()]


class DuckDBStore(RunLifecycle, LatencyStore, RecommendationStore):
    """A DuckDB file. Each write is one transaction on a short-lived connection, so analysts can read
    between writes; a second writer waits for the lock (up to `lock_timeout_s`) and then fails clearly.

    `read_only=True` opens an existing store for reading: nothing is created or migrated.
    """

    def __init__(self, path: Path, lock_timeout_s: float = 120.0, read_only: bool = False) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self.read_only = read_only
        if read_only:
            if not self.path.is_file():
                raise CribsheetError(f"{self.path}: no results store here")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.transaction() as con:
            self._migrate(con)

    @contextmanager
    def connect(self) -> Iterator[Any]:
        """A connection, retried while another process holds the file's lock."""
        import duckdb

        deadline = time.monotonic() + self.lock_timeout_s
        config: dict[str, str | bool | int | float | list[str]] = (
            {} if self.read_only else {"storage_compatibility_version": STORAGE_COMPATIBILITY}
        )
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=self.read_only, config=config)
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise CribsheetError(f"{self.path}: cannot open results store ({exc})") from None
                if time.monotonic() > deadline:
                    raise CribsheetError(
                        f"{self.path}: results store is in use by another process "
                        f"(waited {self.lock_timeout_s:.0f} s); try again when it finishes"
                    ) from None
                time.sleep(0.2)
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """All or nothing: commit on success, roll back on any error."""
        if self.read_only:
            raise CribsheetError(f"{self.path}: opened read-only; cannot write")
        with self.connect() as con:
            con.execute("BEGIN")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    @staticmethod
    def _migrate(con: Any) -> None:
        """Create what is missing: tables, appended columns, the samples key, views, the schema version."""
        import duckdb

        con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, applied_at TIMESTAMP)")
        for table, model in TABLES.items():
            existing = {
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
                ).fetchall()
            }
            cols = columns(model)
            if not existing:
                con.execute(f"CREATE TABLE {table} ({', '.join(f'{n} {t}' for n, t in cols)})")
            for name, sql_type in cols:
                if existing and name not in existing:
                    con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}")
        # One row per (run, setting, question), whoever writes: a second writer's duplicate is refused.
        try:
            con.execute("CREATE UNIQUE INDEX IF NOT EXISTS samples_key ON samples (run_id, setting_hash, question_id)")
        except duckdb.ConstraintException as exc:
            raise CribsheetError(
                "the store holds duplicate sample rows (same run, setting and question), written before it had a "
                f"unique key; delete the duplicates of the affected runs, then open it again ({exc})"
            ) from None
        for name, sql in VIEWS.items():
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
        (current,) = con.execute("SELECT max(version) FROM schema_version").fetchone() or (None,)
        if current is None or current < SCHEMA_VERSION:
            con.execute("INSERT INTO schema_version VALUES (?, now())", [SCHEMA_VERSION])

    @staticmethod
    def _insert(con: Any, table: str, rows: Iterable[BaseModel]) -> None:
        names = [n for n, _ in columns(TABLES[table])]
        values = [[getattr(r, n) for n in names] for r in rows]
        if values:
            con.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", values)

    # ---- writes -------------------------------------------------------------------------------------

    def start_run(
        self, run: RunRow, settings: Sequence[SettingRow] = (), questions: Sequence[QuestionRow] = ()
    ) -> None:
        """The run, its settings and its questions, together or not at all."""
        with self.transaction() as con:
            self._insert(con, "runs", [run])
            self._insert(con, "settings", settings)
            self._insert(con, "questions", questions)

    def add_samples(
        self, rows: Sequence[SampleRow], claims: Sequence[ClaimRow] = (), owner: Owner | None = None
    ) -> None:
        """One setting's rows and their claim evidence, together or not at all; they replace whatever that
        setting of that run held (a failed setting computed again), so a setting's rows are written once.
        With `owner` (pid, host), nothing is written unless that process still runs the run (`RunTakenOver`).
        """
        with self.transaction() as con:
            if owner is not None:
                for run_id in sorted({r.run_id for r in rows}):
                    check_owner(con, run_id, owner)
            for run_id, setting_hash in sorted({(r.run_id, r.setting_hash) for r in rows}):
                drop_setting(con, run_id, setting_hash)
            self._insert(con, "samples", rows)
            self._insert(con, "claims", claims)

    def add_spilled_samples(self, spill: Path, owner: Owner | None = None) -> None:
        """One setting's rows and claims from a spill file (`eval.run.spill`: the same tables, written block by
        block), moved in as `add_samples` would: in one transaction, replacing that setting's rows.
        """
        if self.read_only:
            raise CribsheetError(f"{self.path}: opened read-only; cannot write")
        with self.connect() as con:
            con.execute("SET memory_limit = '256MB'")  # the move streams; DuckDB would otherwise cache it all
            con.execute("ATTACH ? AS spill (READ_ONLY)", [str(spill)])
            try:
                keys = con.execute("SELECT DISTINCT run_id, setting_hash FROM spill.samples").fetchall()
                con.execute("BEGIN")
                try:
                    if owner is not None:
                        for run_id in sorted({k[0] for k in keys}):
                            check_owner(con, run_id, owner)
                    for run_id, setting_hash in sorted(keys):
                        drop_setting(con, run_id, setting_hash)
                    for table in ("samples", "claims"):
                        names = ", ".join(n for n, _ in columns(TABLES[table]))
                        con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM spill.{table}")
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
            finally:
                con.execute("DETACH spill")

    def add_decision(self, row: GateDecisionRow) -> None:
        """One gate decision."""
        with self.transaction() as con:
            self._insert(con, "gate_decisions", [row])

    def add_look(self, rows: Sequence[GateLookRow]) -> None:
        """Every metric of one look of a sequential gate, together or not at all; a look stored again (a
        resumed gate) replaces the one it recomputes.
        """
        with self.transaction() as con:
            for sequence_id, look in sorted({(r.sequence_id, r.look) for r in rows}):
                con.execute("DELETE FROM gate_looks WHERE sequence_id = ? AND look = ?", [sequence_id, look])
            self._insert(con, "gate_looks", rows)

    def looks(self, sequence_id: str) -> list[GateLookRow]:
        """The stored looks of a sequential gate, in order."""
        rows = self.query("SELECT * FROM gate_looks WHERE sequence_id = ? ORDER BY look, metric", [sequence_id])
        return [GateLookRow.model_validate(r) for r in rows]

    def finish_run(self, run_id: str, status: str, *, owner: Owner | None = None, **fields: Any) -> None:
        """Close a run: its status, finish time and summary fields (names checked against `RunRow`). With
        `owner` (pid, host), nothing is written unless that process still runs the run (`RunTakenOver`), so a
        process that was frozen past the takeover timeout cannot close the run its successor now runs.
        """
        unknown = sorted(set(fields) - set(RunRow.model_fields))
        if unknown:
            raise CribsheetError(f"unknown runs column(s) {unknown}")
        fields = {"status": status, "finished_at": dt.datetime.now(dt.UTC), **fields}
        with self.transaction() as con:
            if owner is not None:
                check_owner(con, run_id, owner)
            con.execute(
                f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE run_id = ?", [*fields.values(), run_id]
            )

    # ---- reads --------------------------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Record]:
        """Rows of a read query as dicts (for analysts and tests; product code uses the methods below)."""
        with self.connect() as con:
            cur = con.execute(sql, list(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def index_pins(self) -> list[IndexPin]:
        """The index snapshot each stored run read, as a claim `cribsheet reclaim` keeps (`IndexPin.of_run`)."""
        names = self.query("SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs'")
        have = {r["column_name"] for r in names}  # a store from before identities is read, not migrated
        ident = ", ".join(c if c in have else f"NULL AS {c}" for c in ("index_build_id", "index_sha256"))
        rows = self.query(f"SELECT run_id, index_path, index_version, {ident} FROM runs")
        named = [r for r in rows if r["index_version"] is not None or r["index_sha256"] is not None]
        return [IndexPin.of_run(f"{self.path}: run {r['run_id']}", r, self.path.parent) for r in named]

    def latest_run(self) -> str | None:
        """Id of the most recently started run that stored a sample (a run that failed before its first
        setting has nothing to show), a sequential gate's batch runs last (a batch holds a few questions and the
        settings still open: never what `report` or `gate --shipped` mean by the latest run); the most recent
        run when none did.
        """
        batches = (
            "EXISTS (SELECT 1 FROM gate_looks g WHERE g.run_id = r.run_id)" if self._has("gate_looks") else "false"
        )
        rows = self.query(
            f"SELECT run_id FROM runs r ORDER BY {batches} ASC, "
            "EXISTS (SELECT 1 FROM samples s WHERE s.run_id = r.run_id) DESC, started_at DESC LIMIT 1"
        )
        return str(rows[0]["run_id"]) if rows else None

    def leaderboard(self, run_id: str) -> list[Record]:
        """Leaderboard rows of one run, best answer token recall (the gate's answer metric) first."""
        return self.query(
            "SELECT * FROM v_leaderboard WHERE run_id = ? ORDER BY answer_token_recall DESC NULLS LAST, setting_name",
            [run_id],
        )

    def largest_losses(
        self,
        baseline_run: str | Sequence[str],
        baseline_hash: str,
        candidate_run: str | Sequence[str],
        candidate_hash: str,
        n: int = 5,
    ) -> list[Record]:
        """The answerable questions where the candidate lost most answer token recall against the baseline,
        each setting's answer from its own run (a cross-run decision compares two runs' answers); a run list
        (a sequential gate's batch runs) pairs each question within the run that answered it.
        """
        return self.query(
            "SELECT a.question, a.gold_answers, a.answer AS baseline_answer, b.answer AS candidate_answer, "
            "a.answer_token_recall AS baseline_recall, b.answer_token_recall AS candidate_recall, "
            "b.answer_token_recall - a.answer_token_recall AS diff, a.context_tokens_out AS baseline_context_tokens, "
            "b.context_tokens_out AS candidate_context_tokens FROM samples a JOIN samples b USING (question_id) "
            "WHERE list_contains(?, a.run_id) AND a.setting_hash = ? AND list_contains(?, b.run_id) "
            "AND b.setting_hash = ? AND a.answerable "
            "AND b.answer_token_recall < a.answer_token_recall ORDER BY diff, a.question LIMIT ?",
            [_runs(baseline_run), baseline_hash, _runs(candidate_run), candidate_hash, n],
        )

    def run_summary(self, run_id: str) -> Record:
        """What a report's header says about a run: when, on which code and machine."""
        rows = self.query(
            "SELECT run_id, started_at, finished_at, status, git_commit, git_dirty, hardware_json, "
            "engine_precision, n_questions, n_settings, questions_path, latency_session, probe_repeats, aa_ratio, "
            "aa_ci_low, aa_ci_high, aa_n, foreign_load, load_avg, latency_drift, latency_drift_setting, failed_slots, "
            "precomputes_json, faithfulness_validity FROM runs WHERE run_id = ?",
            [run_id],
        )
        if not rows:
            raise CribsheetError(f"{self.path}: no run '{run_id}'")
        return rows[0]

    def break_even(self, run_id: str) -> list[Record]:
        """Where each compressed setting of one run pays for itself (`v_break_even`), by top-k and name."""
        return self.query("SELECT * FROM v_break_even WHERE run_id = ? ORDER BY top_k, setting_name", [run_id])

    def resolve_setting(self, setting: str, run: str | None = None) -> SettingRef:
        """A setting given by name or hash, in `run` or else the latest run that has it."""
        rows = self.query(
            "SELECT s.run_id, s.setting_hash, s.setting_name FROM settings s JOIN runs r USING (run_id) "
            "WHERE (s.setting_name = ? OR s.setting_hash = ?) AND (? IS NULL OR s.run_id = ?) "
            "ORDER BY r.started_at DESC LIMIT 1",
            [setting, setting, run, run],
        )
        if not rows:
            where = f"run {run}" if run else "any run"
            known = self.query(
                "SELECT DISTINCT setting_name FROM settings WHERE (? IS NULL OR run_id = ?) ORDER BY 1", [run, run]
            )
            raise CribsheetError(
                f"setting '{setting}' not found in {where}; known: "
                f"{', '.join(r['setting_name'] for r in known[:20]) or 'none'}"
            )
        return SettingRef.model_validate(rows[0])

    def samples(self, ref: SettingRef) -> dict[str, Record]:
        """Every sample of one stored setting, by question id."""
        rows = self.query("SELECT * FROM samples WHERE run_id = ? AND setting_hash = ?", [ref.run_id, ref.setting_hash])
        return {str(r["question_id"]): r for r in rows}

    def check_readable(self) -> None:
        """Open the file and read from it: a truncated file, or one that is not DuckDB, is a one-line error."""
        self.query("SELECT 1")

    def paired_samples(
        self, baseline: SettingRef, candidate: SettingRef
    ) -> tuple[dict[str, Record], dict[str, Record]]:
        """The samples of two settings, each by question id (the caller pairs them by id)."""
        return self.samples(baseline), self.samples(candidate)

    def run_meta(self, run_id: str) -> RunMeta:
        """What one run was computed on."""
        rows = self.query(
            "SELECT run_id, status, questions_sha256, corpus_sha256, index_version, git_commit, git_dirty, "
            "config_hash, package_versions, hardware_json, hardware_sha256, engine_precision, config_json, "
            "faithfulness_validity "
            "FROM runs WHERE run_id = ?",
            [run_id],
        )
        if not rows:
            raise CribsheetError(f"{self.path}: no run '{run_id}'")
        row = dict(rows[0])
        verifier = json.loads(row.pop("config_json") or "{}").get("verifier")
        if verifier:
            row["verifier"] = verifier_label(verifier)
        return RunMeta.model_validate(row)

    def export_parquet(self, out_dir: Path) -> list[Path]:
        """Write every table as `<table>.parquet` into `out_dir`."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        with self.connect() as con:
            for table in TABLES:
                target = out_dir / f"{table}.parquet"
                con.execute(f"COPY {table} TO '{str(target).replace(chr(39), chr(39) * 2)}' (FORMAT parquet)")
                written.append(target)
        return written


def dumps(value: Any) -> str:
    """Compact, stable JSON for stored columns."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _runs(run: str | Sequence[str]) -> list[str]:
    """One run id or several, as a list."""
    return [run] if isinstance(run, str) else list(run)


def verifier_label(verifier: dict[str, Any]) -> str:
    """How a run's stored verifier config reads ("nli:MODEL, threshold 0.5", "likelihood:packaged card, threshold
    the card's").
    """
    name = verifier.get("name", "nli")
    model = verifier.get("model") or ("packaged card" if name == "likelihood" else "?")
    threshold = verifier.get("threshold")
    if threshold is None:
        threshold = "the card's" if name == "likelihood" else 0.5
    return f"{name}:{model}, threshold {threshold}"
