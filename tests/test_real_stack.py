"""The small real-stack check of `make test`: one session vLLM engine (the bundled SmolLM2), real MiniLM,
LanceDB, DuckDB and Prefect over a handful of bundled questions, plus the engine paths no sweep of the fast
tier touches (prompt log-probabilities, engine-lingua, the query-likelihood reranker, the prefix cache).
The full end-to-end sweep, LLMLingua included, is in the slow tier (`make test-slow`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

from corpus.index import IndexConfig, IndexOptions
from corpus.models import Hit
from corpus.sources import SourceConfig
from eval.engine.generator import GeneratorConfig
from eval.prompt import PromptLayout, context_block
from eval.settings import CompressionSpec, GridConfig, SweepConfig
from tests.helpers import bundled_slice

N_DOCS, N_ANSWERABLE, N_UNANSWERABLE = 40, 3, 1
N_QUESTIONS = N_ANSWERABLE + N_UNANSWERABLE + 1  # and the first question asked again: its probe shares everything
SETTINGS = 3  # none, pruned 4x, engine-lingua 4x at top-3

PARIS = "Paris is the capital and largest city of France. The Eiffel Tower was completed in 1889 on the Seine."
K2 = "K2 is the second-highest mountain on Earth, at 8,611 metres. It lies in the Karakoram range."


@pytest.fixture(scope="module")
def swept(bundled_dir: Path, minilm: Any, engine: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from eval.run.sweep import run_sweep
    from eval.run.wiring import build_components
    from flows.pipeline import index_flow

    work = tmp_path_factory.mktemp("real")
    bundled_slice(bundled_dir, work, N_DOCS, N_ANSWERABLE, N_UNANSWERABLE)
    lines = (work / "questions.jsonl").read_text().splitlines()
    again = json.loads(lines[0]) | {"id": json.loads(lines[0])["id"] + "-again"}
    (work / "questions.jsonl").write_text("\n".join([*lines, json.dumps(again)]) + "\n")

    index = work / "index.lancedb"
    source = SourceConfig(path=work / "corpus.jsonl")
    index_flow(IndexConfig(source=source, index_path=index, options=IndexOptions(sentence_vectors=True)))  # Prefect
    config = SweepConfig(
        index_path=index,
        questions_path=work / "questions.jsonl",
        store_path=work / "results.duckdb",
        generator=GeneratorConfig(max_model_len=2048, kv_cache_gib=1, max_tokens=16),
        probe_questions=N_QUESTIONS,
        grid=GridConfig(
            compressions=[
                CompressionSpec(),
                CompressionSpec(compressor="pruned", target_ratio=4),
                CompressionSpec(compressor="engine-lingua", target_ratio=4),
            ],
            top_ks=[3],
        ),
    )
    settings = config.grid.expand()
    result = run_sweep(config, build_components(config, settings, embedder=minilm, generator=engine))
    return work / "results.duckdb", result.run_id


def test_real_sweep_stores_one_ok_row_per_question_and_setting(swept: tuple[Path, str]) -> None:
    path, run_id = swept
    with duckdb.connect(str(path), read_only=True) as con:
        n, ok, distinct = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'ok'), count(DISTINCT (question_id, setting_hash)) "
            "FROM samples WHERE run_id = ?",
            [run_id],
        ).fetchone()
        assert n == ok == distinct == N_QUESTIONS * SETTINGS
        ratios = dict(
            con.execute(
                "SELECT compressor, avg(realized_ratio) FROM samples WHERE run_id = ? GROUP BY compressor", [run_id]
            ).fetchall()
        )
        assert ratios["none"] == pytest.approx(1.0)
        assert ratios["pruned"] > 2.0 and ratios["engine-lingua"] > 2.0  # both really compressed
        # Every sample was probed alone after a reset and a warm-up: it found exactly the warmed prefix cached,
        # the question asked twice included (without a reset before each probe, its whole prompt is cached).
        warm = con.execute("SELECT warm_cached_tokens FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
        probed = con.execute(
            "SELECT DISTINCT probe_cached_tokens FROM samples WHERE run_id = ? AND probe_ttft_s IS NOT NULL", [run_id]
        ).fetchall()
        assert warm and warm > 0 and probed == [(warm,)]


def test_prompt_logprobs_prefer_the_true_continuation(engine: Any) -> None:
    tok = engine.tokenizer
    true, false = (tok.encode(f"The capital of France is {w}.") for w in ("Paris", "Banana"))
    scored = engine.token_logprobs([true, false])
    assert [len(s) for s in scored] == [len(true), len(false)]
    assert all(s[0] is None and all(x is not None and x <= 0 for x in s[1:]) for s in scored)
    assert sum(scored[0][1:]) > sum(scored[1][1:])


def test_query_likelihood_reranker_puts_the_answering_passage_first(engine: Any, minilm: Any) -> None:
    from eval.rerank import RERANKERS, RerankerDeps

    reranker = RERANKERS.build(RERANKERS.spec("query-likelihood"), RerankerDeps(embedder=minilm, scorer=engine))
    hits = [Hit(chunk_id=c, doc_id=c, title=c, text=t, score=0.0) for c, t in (("K2", K2), ("Paris", PARIS))]
    assert [h.doc_id for h in reranker.rerank("What is the capital of France?", hits)] == ["Paris", "K2"]
    assert [h.doc_id for h in reranker.rerank("How high is K2?", hits)] == ["K2", "Paris"]


def test_engine_lingua_prunes_words_to_about_the_ratio(engine: Any) -> None:
    from eval.compress import COMPRESSORS, CompressorDeps
    from eval.compress.cache import MemoryCache

    deps = CompressorDeps(count_tokens=engine.count_tokens, scorer=engine, scorer_model="smollm2", cache=MemoryCache())
    lingua = COMPRESSORS.build(COMPRESSORS.spec("engine-lingua"), deps)
    passages = [PARIS + " " + K2, K2]
    result = lingua.compress(passages, "How high is K2?", 4.0)
    assert len(result.texts) == 2 and result.tokens_in > result.tokens_out > 0
    assert result.ratio > 2.0
    words = set(re.findall(r"\w+", " ".join(passages)))
    assert set(re.findall(r"\w+", " ".join(result.texts))) <= words  # pruned, never rewritten
    again = lingua.compress(passages, "Something else entirely?", 4.0)
    assert again.texts == result.texts and again.calls == 0  # query-agnostic: the cached compression


def test_reset_cache_forgets_and_warm_caches_exactly_the_stable_prefix(engine: Any) -> None:
    layout = PromptLayout(engine.tokenizer)
    prompt = layout.render(context_block(["Paris"], [PARIS]), "When was the Eiffel Tower completed?")
    engine.reset_cache()
    assert engine.probe(prompt).cached_tokens == 0
    warm = engine.warm(layout.stable_prefix())
    assert 0 < warm.cached_tokens <= warm.prefix_tokens
    engine.reset_cache()
    engine.warm(layout.stable_prefix())
    assert engine.probe(prompt).cached_tokens == warm.cached_tokens
