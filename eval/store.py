"""The DuckDB results store: typed row models generate the tables; columns are only ever appended."""

from __future__ import annotations

import datetime as dt
import json
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from corpus.errors import CribsheetError

SCHEMA_VERSION = 1
STORAGE_COMPATIBILITY = "v1.0.0"
"""DuckDB file format written for new stores: readable by every DuckDB CLI since 1.0, not only by the
Python package that wrote it (duckdb 2.x writes a format 1.x cannot open by default)."""


class RunRow(BaseModel):
    """One sweep: what ran, on which code, data and packages."""

    run_id: str
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    status: str
    """running | ok | failed"""
    error: str | None = None
    config_json: str
    config_hash: str
    git_commit: str | None = None
    git_dirty: bool | None = None
    package_versions: str
    """JSON object package -> version."""
    questions_path: str
    questions_sha256: str
    index_path: str
    index_version: int | None = None
    corpus_sha256: str | None = None
    n_questions: int
    n_settings: int
    stage_seconds: str | None = None
    """JSON object stage -> seconds."""
    warm_prefix_tokens: int | None = None
    warm_cached_tokens: int | None = None
    warm_cold_ttft_s: float | None = None
    warm_warm_ttft_s: float | None = None
    prefill_a: float | None = None
    """Fit of prefill seconds = a*C + b*C^2 over probe points (C = uncached prompt tokens)."""
    prefill_b: float | None = None
    prefill_fit_points: int | None = None


class SampleRow(BaseModel):
    """One question under one setting, with every metric, token count and latency part."""

    run_id: str
    setting_hash: str
    setting_name: str
    setting_json: str
    question_id: str
    question: str
    answerable: bool
    gold_answers: str
    """JSON list of gold answer strings."""
    top_k: int
    reranker: str
    compressor: str
    target_ratio: float
    retrieval: str | None = None
    """hybrid | vector | fts."""
    gold_rank: int | None = None
    """1-based rank of the first gold document among the reranked candidates (NULL: not retrieved or no gold)."""
    retrieval_recall: float | None = None
    """Share of gold documents among the top-k chunks that went into the prompt."""
    candidate_recall: float | None = None
    """Share of gold documents among all retrieved candidates (before the top-k cut)."""
    layout: str | None = None
    """ranked | edges: passage order in the prompt."""
    context_chunk_ids: str = "[]"
    """JSON list of chunk ids in prompt order."""
    context_text: str | None = None
    context_tokens_in: int | None = None
    context_tokens_out: int | None = None
    realized_ratio: float | None = None
    ratio_gap: float | None = None
    """(realized - requested) / requested compression ratio."""
    compress_seconds: float | None = None
    """Compressor seconds this request paid (0 when every passage came from the agnostic cache)."""
    compress_calls: int | None = None
    """Compressor model invocations made for this request (0: all reused)."""
    retrieve_seconds: float | None = None
    rerank_seconds: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    ttft_s: float | None = None
    """Time to first token inside the batch (includes queueing)."""
    probe_ttft_s: float | None = None
    """TTFT of this prompt run alone after a cache reset (only for the probe sample)."""
    probe_prefill_s: float | None = None
    probe_decode_s: float | None = None
    probe_cached_tokens: int | None = None
    e2e_latency_s: float | None = None
    """retrieve + rerank + compress + probe TTFT: what building and reading the crib sheet costs."""
    answer: str | None = None
    answer_contains: float | None = None
    answer_token_recall: float | None = None
    context_answer_recall: float | None = None
    status: str
    """ok | failed; a failed sample is a row with NULL metrics and an error, never a gap."""
    error: str | None = None


TABLES: dict[str, type[BaseModel]] = {"runs": RunRow, "samples": SampleRow}

_SQL_TYPES: dict[Any, str] = {str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN", dt.datetime: "TIMESTAMP"}

LEADERBOARD_SQL = """
CREATE OR REPLACE VIEW v_leaderboard AS
SELECT run_id, setting_name, setting_hash, any_value(retrieval) AS retrieval, any_value(compressor) AS compressor,
       any_value(target_ratio) AS target_ratio, any_value(top_k) AS top_k,
       count(*) AS n, count(*) FILTER (WHERE status <> 'ok') AS n_failed,
       avg(answer_contains) AS answer_contains,
       avg(answer_token_recall) AS answer_token_recall,
       avg(context_answer_recall) AS context_answer_recall,
       avg(retrieval_recall) AS retrieval_recall,
       avg(candidate_recall) AS candidate_recall,
       avg(answer_contains) FILTER (WHERE answerable) AS answer_contains_answerable,
       quantile_cont(ttft_s, 0.5) AS ttft_p50_s,
       quantile_cont(ttft_s, 0.95) AS ttft_p95_s,
       avg(prompt_tokens) AS mean_prompt_tokens,
       avg(cached_tokens) AS mean_cached_tokens,
       sum(context_tokens_in)::DOUBLE / nullif(sum(context_tokens_out), 0) AS realized_ratio,
       avg(compress_seconds) AS mean_compress_s,
       avg(ratio_gap) AS mean_ratio_gap,
       quantile_cont(probe_ttft_s, 0.5) AS probe_ttft_p50_s,
       quantile_cont(probe_ttft_s, 0.95) AS probe_ttft_p95_s,
       quantile_cont(e2e_latency_s, 0.5) AS e2e_latency_p50_s
FROM samples GROUP BY run_id, setting_name, setting_hash
"""


def _sql_type(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = args[0]
    return _SQL_TYPES[annotation]


def columns(model: type[BaseModel]) -> list[tuple[str, str]]:
    """(name, SQL type) of a row model, in declaration order."""
    return [(name, _sql_type(f.annotation)) for name, f in model.model_fields.items()]


class ResultStore(Protocol):
    """Where runs and samples go."""

    def start_run(self, run: RunRow) -> None: ...

    def add_samples(self, rows: Sequence[SampleRow]) -> None: ...

    def finish_run(self, run_id: str, status: str, **fields: Any) -> None: ...


class DuckDBStore:
    """A DuckDB file; every write is one transaction."""

    def __init__(self, path: Path) -> None:
        import duckdb

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.con = duckdb.connect(str(self.path), config={"storage_compatibility_version": STORAGE_COMPATIBILITY})
        except duckdb.IOException as exc:
            raise CribsheetError(f"{self.path}: cannot open results store ({exc})") from None
        self._migrate()

    def _migrate(self) -> None:
        con = self.con
        con.execute("BEGIN")
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
        con.execute(LEADERBOARD_SQL)
        (current,) = con.execute("SELECT max(version) FROM schema_version").fetchone() or (None,)
        if current is None or current < SCHEMA_VERSION:
            con.execute("INSERT INTO schema_version VALUES (?, now())", [SCHEMA_VERSION])
        con.execute("COMMIT")

    def _insert(self, table: str, rows: Iterable[BaseModel]) -> None:
        names = [n for n, _ in columns(TABLES[table])]
        values = [[getattr(r, n) for n in names] for r in rows]
        if not values:
            return
        self.con.execute("BEGIN")
        try:
            self.con.executemany(
                f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", values
            )
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    def start_run(self, run: RunRow) -> None:
        self._insert("runs", [run])

    def add_samples(self, rows: Sequence[SampleRow]) -> None:
        self._insert("samples", rows)

    def finish_run(self, run_id: str, status: str, **fields: Any) -> None:
        fields = {"status": status, "finished_at": dt.datetime.now(dt.UTC), **fields}
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*fields.values(), run_id])

    def leaderboard(self, run_id: str) -> list[dict[str, Any]]:
        """Leaderboard rows of one run, best answer recall first."""
        cur = self.con.execute(
            "SELECT * FROM v_leaderboard WHERE run_id = ? ORDER BY answer_contains DESC NULLS LAST, setting_name",
            [run_id],
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def close(self) -> None:
        self.con.close()


def dumps(value: Any) -> str:
    """Compact, stable JSON for stored columns."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
