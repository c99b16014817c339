"""The DuckDB results store: tables generated from the row models, analyst views, transactional writes."""

from __future__ import annotations

import datetime as dt
import json
import time
import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from corpus.errors import CribsheetError
from eval.rows import ClaimRow, GateDecisionRow, QuestionRow, RunRow, SampleRow, SettingRow

SCHEMA_VERSION = 2
STORAGE_COMPATIBILITY = "v1.0.0"
"""DuckDB file format written for new stores: readable by every DuckDB CLI since 1.0, not only by the
Python package that wrote it (duckdb 2.x writes a format 1.x cannot open by default)."""

TABLES: dict[str, type[BaseModel]] = {
    "runs": RunRow,
    "settings": SettingRow,
    "questions": QuestionRow,
    "samples": SampleRow,
    "claims": ClaimRow,
    "gate_decisions": GateDecisionRow,
}

_SQL_TYPES: dict[Any, str] = {str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN", dt.datetime: "TIMESTAMP"}

VIEWS = {
    "v_leaderboard": """
SELECT run_id, setting_name, setting_hash, any_value(retrieval) AS retrieval, any_value(reranker) AS reranker,
       any_value(compressor) AS compressor, any_value(target_ratio) AS target_ratio, any_value(top_k) AS top_k,
       any_value(layout) AS layout,
       count(*) AS n, count(*) FILTER (WHERE status <> 'ok') AS n_failed,
       avg(answer_contains) AS answer_contains,
       avg(answer_exact_match) AS answer_exact_match,
       avg(answer_token_f1) AS answer_token_f1,
       avg(answer_token_recall) AS answer_token_recall,
       avg(context_answer_recall) AS context_answer_recall,
       avg(faithfulness) AS faithfulness,
       avg(ragas_faithfulness) AS ragas_faithfulness,
       avg(abstained::DOUBLE) FILTER (WHERE NOT answerable) AS abstention_unanswerable,
       avg(abstained::DOUBLE) FILTER (WHERE answerable) AS abstention_answerable,
       avg(retrieval_recall) AS retrieval_recall,
       avg(candidate_recall) AS candidate_recall,
       avg(answer_contains) FILTER (WHERE answerable) AS answer_contains_answerable,
       quantile_cont(ttft_s, 0.5) AS ttft_p50_s,
       quantile_cont(ttft_s, 0.95) AS ttft_p95_s,
       avg(prompt_tokens) AS mean_prompt_tokens,
       avg(cached_tokens) AS mean_cached_tokens,
       sum(context_tokens_in)::DOUBLE / nullif(sum(context_tokens_out), 0) AS realized_ratio,
       avg(ratio_gap) AS mean_ratio_gap,
       avg(compress_seconds) AS mean_compress_s,
       quantile_cont(probe_ttft_s, 0.5) AS probe_ttft_p50_s,
       quantile_cont(probe_ttft_s, 0.95) AS probe_ttft_p95_s,
       quantile_cont(e2e_latency_s, 0.5) AS e2e_latency_p50_s
FROM samples GROUP BY run_id, setting_name, setting_hash""",
    # A setting is on the frontier when no other setting of the run is at least as good on answer
    # recall and at least as fast (TTFT p50), and strictly better on one of them.
    "v_pareto": """
SELECT a.* FROM v_leaderboard a
WHERE NOT EXISTS (
    SELECT 1 FROM v_leaderboard b
    WHERE b.run_id = a.run_id AND b.setting_hash <> a.setting_hash
      AND b.answer_contains >= a.answer_contains AND b.ttft_p50_s <= a.ttft_p50_s
      AND (b.answer_contains > a.answer_contains OR b.ttft_p50_s < a.ttft_p50_s))""",
    "v_sample_diff": """
SELECT a.run_id, a.question_id, a.question, a.answerable,
       a.setting_name AS a_setting, b.setting_name AS b_setting,
       a.answer AS a_answer, b.answer AS b_answer,
       a.answer_contains AS a_answer_contains, b.answer_contains AS b_answer_contains,
       b.answer_contains - a.answer_contains AS answer_contains_diff,
       a.faithfulness AS a_faithfulness, b.faithfulness AS b_faithfulness,
       a.context_answer_recall AS a_context_answer_recall, b.context_answer_recall AS b_context_answer_recall,
       a.prompt_tokens AS a_prompt_tokens, b.prompt_tokens AS b_prompt_tokens,
       a.ttft_s AS a_ttft_s, b.ttft_s AS b_ttft_s
FROM samples a JOIN samples b USING (run_id, question_id)
WHERE a.setting_hash <> b.setting_hash""",
}


def _sql_type(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = args[0]
    return _SQL_TYPES[annotation]


def columns(model: type[BaseModel]) -> list[tuple[str, str]]:
    """(name, SQL type) of a row model, in declaration order."""
    return [(name, _sql_type(f.annotation)) for name, f in model.model_fields.items()]


class ResultStore(Protocol):
    """Where runs, samples and their evidence go."""

    def start_run(self, run: RunRow, settings: Sequence[SettingRow], questions: Sequence[QuestionRow]) -> None: ...

    def add_samples(self, rows: Sequence[SampleRow], claims: Sequence[ClaimRow] = ()) -> None: ...

    def finish_run(self, run_id: str, status: str, **fields: Any) -> None: ...


class DuckDBStore:
    """A DuckDB file. Each write is one transaction on a short-lived connection, so analysts can read
    between writes; a second writer waits for the lock (up to `lock_timeout_s`) and then fails clearly."""

    def __init__(self, path: Path, lock_timeout_s: float = 120.0) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.transaction() as con:
            self._migrate(con)

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[Any]:
        """A connection, retried while another process holds the file's lock."""
        import duckdb

        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                con = duckdb.connect(
                    str(self.path), read_only=read_only, config={"storage_compatibility_version": STORAGE_COMPATIBILITY}
                )
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

    def start_run(
        self, run: RunRow, settings: Sequence[SettingRow] = (), questions: Sequence[QuestionRow] = ()
    ) -> None:
        with self.transaction() as con:
            self._insert(con, "runs", [run])
            self._insert(con, "settings", settings)
            self._insert(con, "questions", questions)

    def add_samples(self, rows: Sequence[SampleRow], claims: Sequence[ClaimRow] = ()) -> None:
        """One setting's rows and their claim evidence, together or not at all."""
        with self.transaction() as con:
            self._insert(con, "samples", rows)
            self._insert(con, "claims", claims)

    def add_decision(self, row: GateDecisionRow) -> None:
        with self.transaction() as con:
            self._insert(con, "gate_decisions", [row])

    def finish_run(self, run_id: str, status: str, **fields: Any) -> None:
        fields = {"status": status, "finished_at": dt.datetime.now(dt.UTC), **fields}
        with self.transaction() as con:
            con.execute(
                f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE run_id = ?", [*fields.values(), run_id]
            )

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of a read query as dicts."""
        with self.connect() as con:
            cur = con.execute(sql, list(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def leaderboard(self, run_id: str) -> list[dict[str, Any]]:
        """Leaderboard rows of one run, best answer recall first."""
        return self.query(
            "SELECT * FROM v_leaderboard WHERE run_id = ? ORDER BY answer_contains DESC NULLS LAST, setting_name",
            [run_id],
        )

    def latest_run(self) -> str | None:
        """Id of the most recently started run."""
        rows = self.query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1")
        return str(rows[0]["run_id"]) if rows else None

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

    def close(self) -> None:
        """Nothing held between writes; kept for symmetry with other stores."""


def dumps(value: Any) -> str:
    """Compact, stable JSON for stored columns."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
