"""The whole path on real components (sentence-transformers, LanceDB, llmlingua, vLLM, DuckDB, Prefect)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from corpus.index import IndexConfig
from corpus.sources import SourceConfig
from eval.settings import SweepConfig
from flows.pipeline import index_flow, sweep_flow
from tests.helpers import bundled_slice

pytestmark = pytest.mark.slow

N_DOCS, N_QUESTIONS = 200, 10


@pytest.fixture(scope="module")
def stored(bundled_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    work = tmp_path_factory.mktemp("e2e")
    bundled_slice(bundled_dir, work, N_DOCS, N_QUESTIONS - 2, 2)

    index_flow(IndexConfig(source=SourceConfig(path=work / "corpus.jsonl"), index_path=work / "index.lancedb"))
    config = SweepConfig(
        index_path=work / "index.lancedb",
        questions_path=work / "questions.jsonl",
        store_path=work / "results.duckdb",
        probe_questions=4,  # the latency truth on a few questions per setting is enough to test the path
    )
    result = sweep_flow(config)
    return work / "results.duckdb", result.run_id


def test_one_ok_row_per_question_and_setting(stored: tuple[Path, str]) -> None:
    path, run_id = stored
    con = duckdb.connect(str(path), read_only=True)
    n, distinct, ok = con.execute(
        "SELECT count(*), count(DISTINCT (question_id, setting_hash)), "
        "count(*) FILTER (WHERE status='ok') FROM samples WHERE run_id=?",
        [run_id],
    ).fetchone()
    assert n == distinct == ok == N_QUESTIONS * 6
    assert con.execute("SELECT count(*) FROM v_leaderboard WHERE run_id=?", [run_id]).fetchone()[0] == 6


def test_metrics_in_unit_interval_and_latency_present(stored: tuple[Path, str]) -> None:
    con = duckdb.connect(str(stored[0]), read_only=True)
    row = con.execute("""
        SELECT min(least(answer_contains, answer_token_recall, context_answer_recall)),
               max(greatest(answer_contains, answer_token_recall, context_answer_recall)),
               count(*) FILTER (WHERE ttft_s IS NULL OR ttft_s <= 0),
               count(*) FILTER (WHERE isnan(answer_token_recall))
        FROM samples""").fetchone()
    assert row[0] >= 0.0 and row[1] <= 1.0
    assert row[2] == 0 and row[3] == 0
    # The uncompressed top-8 crib sheet holds the answer for most answerable questions: the real generator
    # must get some of them (a broken prompt or generator scores 0 everywhere).
    right = con.execute(
        "SELECT sum(answer_token_recall) FROM samples WHERE compressor = 'none' AND top_k = 8 AND answerable"
    ).fetchone()[0]
    assert right > 0  # a 135M model gets few exactly right; "8,848.86 meters" for "8,848.86 m" still counts


def test_warmed_prefix_is_served_from_cache(stored: tuple[Path, str]) -> None:
    con = duckdb.connect(str(stored[0]), read_only=True)
    prefix, cached = con.execute("SELECT warm_prefix_tokens, warm_cached_tokens FROM runs").fetchone()
    assert 0 < cached <= prefix
    assert con.execute("SELECT min(cached_tokens) FROM samples").fetchone()[0] >= cached


def test_four_x_settings_realize_between_2_5_and_6(stored: tuple[Path, str]) -> None:
    con = duckdb.connect(str(stored[0]), read_only=True)
    ratios = dict(
        con.execute("SELECT setting_name, realized_ratio FROM v_leaderboard WHERE target_ratio = 4").fetchall()
    )
    assert len(ratios) == 4
    assert all(2.5 <= r <= 6.0 for r in ratios.values()), ratios
    none = con.execute(
        "SELECT min(realized_ratio), max(realized_ratio) FROM samples WHERE compressor='none'"
    ).fetchone()
    assert none == (1.0, 1.0)


def test_run_is_traceable(stored: tuple[Path, str]) -> None:
    con = duckdb.connect(str(stored[0]), read_only=True)
    status, versions, config_hash, corpus_sha, precision = con.execute(
        "SELECT status, package_versions, config_hash, corpus_sha256, engine_precision FROM runs"
    ).fetchone()
    assert status == "ok"
    assert precision in {"bfloat16", "float16", "float32"}  # what vLLM ran at, not what was asked for
    assert {"torch", "transformers", "llmlingua", "lancedb", "duckdb", "prefect"} <= set(json.loads(versions))
    assert len(config_hash) == 16 and len(corpus_sha) == 64
    hashes = con.execute("SELECT DISTINCT setting_hash, setting_json FROM samples").fetchall()
    from eval.settings import parse_setting_json

    for h, stored in hashes:
        setting, components = parse_setting_json(stored)
        assert setting.config_hash() == h
        # Each component's spec (name + config) is stored, so a row can rebuild what produced it.
        assert set(components) == {"embedder", "reranker", "compressor", "generator"}
        assert components["compressor"].name == setting.compressor
        assert components["generator"].config["block_size"] == 32


def _doc_queries() -> list[str]:
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "results.md").read_text()
    return re.findall(r"```sql\n(.*?)```", text, re.S)


def test_the_documented_queries_run_on_a_real_store(stored: tuple[Path, str]) -> None:
    queries = _doc_queries()
    assert len(queries) == 8
    con = duckdb.connect(str(stored[0]), read_only=True)
    results, names = [], []
    for q in queries:
        cur = con.execute(q)
        names.append([d[0] for d in cur.description])
        results.append(cur.fetchall())
    assert results[0] and results[1] and results[4]  # frontier, per-compressor loss, latency bill are never empty
    assert names[0] == ["setting_name", "answer_token_recall", "faithfulness", "e2e_cold_p50_s", "realized_ratio"]
    assert names[4][-2:] == ["e2e_cold_s", "e2e_paid_s"] and all(r[-2] is not None for r in results[4])
    assert names[3] == ["setting_name", "claim", "best_span", "lexical", "numbers_ok", "names_ok"]
    assert names[5][-4:] == ["measured", "break_even_tokens", "two_x_tokens", "speedup_16k"]
    assert names[6] == ["run_id", "settings", "worst_ratio"] and names[7][3] == "decision"
