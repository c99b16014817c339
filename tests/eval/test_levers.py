"""Rerank, compress, lay out, warm, probe: each lever's mechanics with real classes or registered fakes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pytest

from corpus.embed import bundled_minilm_path
from corpus.models import Hit
from eval.compress import CompressionResult, EngineLinguaCompressor, ExtractiveCompressor
from eval.compress.cache import Cached, LanceCompressionCache, MemoryCache, cache_key
from eval.prompt import PromptLayout, arrange
from eval.rerank import CrossEncoderReranker, QueryLikelihoodReranker, RerankerDeps, build_reranker
from eval.run.probes import fit_prefill
from eval.run.sweep import run_sweep
from tests.fakes import CountingEmbedder, HalvingCompressor, HashEmbedder, WordTokenizer, count_words
from tests.helpers import SweepSetup


def hit(doc: str, text: str) -> Hit:
    return Hit(chunk_id=doc, doc_id=doc, title=doc, text=text, score=0.0)


HITS = [
    hit("Paris", "Paris is the capital of France."),
    hit("Liverpool", "The Beatles formed in Liverpool."),
    hit("Nile", "The Nile flows north."),
]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A randomly initialised 2-layer BERT cross-encoder with MiniLM's tokenizer: real class, tiny weights."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("ce")
    tok = AutoTokenizer.from_pretrained(bundled_minilm_path())
    config = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def test_cross_encoder_reranks_by_the_real_model(tiny_cross_encoder: str) -> None:
    from sentence_transformers import CrossEncoder

    reranker = build_reranker(f"cross-encoder:{tiny_cross_encoder}", RerankerDeps())
    assert isinstance(reranker, CrossEncoderReranker)
    out = reranker.rerank("Where did the Beatles form?", HITS)
    expected = CrossEncoder(tiny_cross_encoder).predict(
        [("Where did the Beatles form?", f"{h.title}\n{h.text}") for h in HITS]
    )
    assert [h.doc_id for h in out] == [HITS[i].doc_id for i in np.argsort(-expected, kind="stable")]
    assert [h.score for h in out] == pytest.approx(sorted(expected.tolist(), reverse=True), abs=1e-5)


def test_dense_rerank_reuses_the_index_vectors(tmp_path: Path, tiny_corpus: Path) -> None:
    """Hits read from the index carry their stored vectors: reranking embeds the question only, same order."""
    from corpus.chunk import SentenceChunker
    from corpus.index import sync_index
    from corpus.retrieve import LanceRetriever
    from eval.rerank import DenseReranker
    from tests.helpers import load_documents

    sync_index(load_documents(tiny_corpus), SentenceChunker(), HashEmbedder(), tmp_path / "i.lancedb")
    hits = LanceRetriever(tmp_path / "i.lancedb", HashEmbedder()).retrieve("capital of France", 4, "hybrid")
    assert len(hits) >= 2 and all(h.embedding is not None and len(h.embedding) == 64 for h in hits)
    emb = CountingEmbedder()
    from_index = DenseReranker(emb).rerank("capital of France", hits)
    assert emb.documents_embedded == 0
    bare = [h.model_copy(update={"vector": None}) for h in hits]
    embedded = DenseReranker(emb).rerank("capital of France", bare)
    assert emb.documents_embedded == len(hits)
    assert [h.chunk_id for h in from_index] == [h.chunk_id for h in embedded]
    assert [h.score for h in from_index] == pytest.approx([h.score for h in embedded], abs=1e-5)
    assert "vector" not in from_index[0].model_dump()


class OverlapScorer:
    """Fake engine: a question token is likely (log p = 0) when it occurs earlier in the prompt, else -5."""

    def __init__(self) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(bundled_minilm_path())
        self.batches: list[int] = []

    def token_logprobs(self, token_ids: Sequence[Sequence[int]]) -> list[list[float | None]]:
        self.batches.append(len(token_ids))
        return [[None] + [0.0 if t in ids[:i] else -5.0 for i, t in enumerate(ids) if i > 0] for ids in token_ids]


def test_query_likelihood_scores_question_given_passage_in_one_batch() -> None:
    scorer = OverlapScorer()
    out = QueryLikelihoodReranker(scorer).rerank("where did the beatles form", HITS)
    assert out[0].doc_id == "Liverpool"
    assert scorer.batches == [3]
    with pytest.raises(Exception, match="needs the vLLM engine"):
        build_reranker("query-likelihood", RerankerDeps())


def test_extractive_compressor_keeps_question_sentences_within_budget() -> None:
    passages = [
        "The Beatles formed in Liverpool in 1960. They sold many records. Ringo joined later.",
        "Paris is the capital of France. It has the Eiffel Tower.",
    ]
    comp = ExtractiveCompressor(count_words, HashEmbedder()).compress(passages, "Where did the Beatles form?", 4.0)
    assert comp.texts[0].startswith("The Beatles formed in Liverpool")
    assert comp.tokens_out <= comp.tokens_in / 4 + 8  # one sentence may overshoot the budget
    assert comp.kept is not None and comp.kept[0] == 0 and len(comp.kept) == len(comp.texts)


def test_engine_lingua_prunes_words_to_budget_keeping_numbers() -> None:
    scorer = OverlapScorer()
    text = "the cat sat on the mat in 1999 and the cat sat again on the mat"
    comp = EngineLinguaCompressor(count_words, scorer)
    out = comp.compress([text], "ignored", 3.0)
    words = out.texts[0].split()
    assert "1999" in words and len(words) < len(text.split()) / 2
    assert out.calls == 1 and comp.compress([text], "another question", 3.0).calls == 0


def test_agnostic_compression_reused_across_settings_and_runs(tmp_path: Path, setup: SweepSetup) -> None:
    config, components = setup
    index_cache = LanceCompressionCache(config.index_path)
    first = HalvingCompressor(cache=index_cache, delay_s=0.01)
    config = config.model_copy(update={"probe_questions": 0})  # the answers phase (latency bypasses the cache)
    result = run_sweep(config, components(halving=first))
    con = duckdb.connect(result.store_path)
    texts = con.execute(
        "SELECT DISTINCT unnest(from_json(context_chunk_ids, '[\"VARCHAR\"]')) FROM samples "
        "WHERE compressor = 'halving' AND top_k = 3"
    ).fetchall()
    assert len(first.compressed) == len(set(first.compressed)) == len(texts)  # each chunk compressed once
    assert con.execute("SELECT sum(compress_calls) FROM samples WHERE compressor='halving' AND top_k=1").fetchone()[
        0
    ] + con.execute("SELECT sum(compress_calls) FROM samples WHERE compressor='halving' AND top_k=3").fetchone()[
        0
    ] == len(first.compressed)
    con.close()
    second = HalvingCompressor(cache=LanceCompressionCache(config.index_path), delay_s=0.01)  # a new process
    again = run_sweep(config, components(halving=second), reuse=False)  # recompute: the cache must serve
    con = duckdb.connect(again.store_path)
    assert second.compressed == []
    bills = con.execute(
        "SELECT run_id = ? AS rerun, top_k, question_id, compress_calls, compress_seconds, compress_cold_seconds, "
        "context_chunk_ids FROM samples WHERE compressor = 'halving' ORDER BY ALL",
        [again.run_id],
    ).fetchall()
    con.close()
    first_run = {(k, q): (paid, cold) for rerun, k, q, _, paid, cold, _ in bills if not rerun}
    for rerun, k, q, calls, paid, cold, ids in bills:
        n = len(json.loads(ids))
        # The cold cost counts every passage (each sleeps 10 ms), whichever setting or run computed it first ...
        assert cold >= 0.01 * n, (k, q, cold)
        assert cold == pytest.approx(first_run[k, q][1], rel=1e-9)
        if rerun:  # ... the paid cost is what this request spent: lookups only (one read of the index), once cached
            assert calls == 0 and paid > 0
    # top-3 after top-1 paid only for passages 2-3 in the first run, but its cold cost is the full bill.
    assert index_cache.get(cache_key(first.identity, 2.0, first.compressed[0])) is not None


def test_realized_ratio_and_gap_recorded(setup: SweepSetup) -> None:
    config, components = setup
    result = run_sweep(config, components())
    con = duckdb.connect(result.store_path)
    rows = con.execute(
        "SELECT target_ratio, realized_ratio, ratio_gap FROM samples WHERE compressor='halving'"
    ).fetchall()
    assert rows and all(r[1] is not None and abs(r[2] - (r[1] - r[0]) / r[0]) < 1e-9 for r in rows)


def test_prompt_layout_order_and_stable_prefix() -> None:
    layout = PromptLayout(WordTokenizer())
    prompt = layout.render("[1] K2: high", "How high?")
    prefix = layout.stable_prefix()
    assert prompt.startswith(prefix) and prefix.startswith("<system>")
    assert prompt.index(layout.system_prefix) < prompt.index("[1] K2: high") < prompt.index("How high?")
    assert arrange(5, "ranked") == [0, 1, 2, 3, 4]
    assert arrange(5, "edges") == [0, 2, 4, 3, 1] and arrange(2, "edges") == [0, 1]


def test_edges_layout_puts_best_passages_at_both_ends(setup: SweepSetup) -> None:
    config, components = setup
    grid = config.grid.model_copy(update={"layouts": ["ranked", "edges"], "top_ks": [3]})
    result = run_sweep(config.model_copy(update={"grid": grid}), components())
    con = duckdb.connect(result.store_path)
    pairs = con.execute("""SELECT r.context_chunk_ids, e.context_chunk_ids FROM samples r JOIN samples e
        USING (question_id, compressor) WHERE r.layout = 'ranked' AND e.layout = 'edges'""").fetchall()
    import json

    for ranked, edges in pairs:
        r = json.loads(ranked)
        assert json.loads(edges) == [r[i] for i in arrange(len(r), "edges")]


def test_fit_prefill_recovers_coefficients() -> None:
    points = [(c, 0.0008 * c + 2e-7 * c * c) for c in (250, 1000, 2000, 4000)]
    a, b = fit_prefill(points) or (0, 0)
    assert a == pytest.approx(0.0008, rel=1e-6) and b == pytest.approx(2e-7, rel=1e-6)
    assert fit_prefill([(100, 0.1)]) is None


def test_memory_cache_roundtrip() -> None:
    cache = MemoryCache()
    cache.put_many({"k": Cached("v", 0.5)})
    assert cache.get("k") == Cached("v", 0.5) and cache.get("x") is None


def test_compressor_dtype_resolution() -> None:
    import torch

    from corpus.embed import cpu_computes_bf16
    from eval.compress.lingua import compressor_dtype

    assert compressor_dtype("auto", "cpu") is (torch.bfloat16 if cpu_computes_bf16() else torch.float32)
    assert compressor_dtype("auto", "cuda:0") == "auto"  # the model's own dtype on a GPU, as llmlingua does
    assert compressor_dtype("float32", "cpu") is torch.float32
    assert compressor_dtype("float16", "cuda") is torch.float16


def test_engine_dtype_auto_is_float32_on_a_cpu_without_native_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's bfloat16 on an AVX2-only CPU is emulated (4x slower here): `auto` picks float32 there."""
    import corpus.embed
    from eval.engine.generator import VLLMConfig
    from eval.engine.precision import cpu_engine_env, vllm_dtype
    from eval.faithfulness.judge_server import ServerConfig

    assert VLLMConfig().dtype == "auto" and ServerConfig().dtype == "auto"
    for native, expected in ((False, "float32"), (True, "bfloat16")):
        monkeypatch.setattr(corpus.embed, "cpu_computes_bf16", lambda native=native: native)
        assert vllm_dtype("auto", on_cpu=lambda: True) == expected
        assert vllm_dtype("auto", on_cpu=lambda: False) == "auto"  # a GPU build: the model's own dtype
        assert vllm_dtype("bfloat16", on_cpu=lambda: True) == "bfloat16"  # asked for: kept
    env = {"VLLM_CPU_KVCACHE_SPACE": "12"}
    cpu_engine_env(env, 4)
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "12", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}  # the user's value wins


def test_vector_cache_embeds_each_text_once_and_starts_over_when_full() -> None:
    from corpus.embed import VectorCache

    emb = CountingEmbedder()
    cache = VectorCache(emb, max_items=3)
    first = cache(["a b", "c d", "a b"])
    assert emb.documents_embedded == 2 and first.shape == (3, 64)
    assert np.allclose(cache(["c d"])[0], first[1]) and emb.documents_embedded == 2
    cache(["e f", "g h"])  # 2 cached + 2 new > 3: starts over with the new ones
    cache(["a b"])
    assert emb.documents_embedded == 5


class _Merging(HalvingCompressor):
    """Merges every passage into one text without saying which went in (kept=None)."""

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        text = " ".join(passages)
        return CompressionResult(texts=[text], tokens_in=count_words(text), tokens_out=count_words(text), seconds=0.0)


def test_chunk_ids_of_merged_passages_are_null_not_the_compressors_input(setup: SweepSetup) -> None:
    """Which chunks a merged text came from is unknown: NULL, never the input ids posing as the prompt's."""
    config, components = setup
    result = run_sweep(config, components(halving=_Merging()))
    con = duckdb.connect(result.store_path)
    rows = con.execute(
        "SELECT top_k, context_chunk_ids FROM samples WHERE compressor = 'halving' AND status = 'ok'"
    ).fetchall()
    con.close()
    assert {k for k, _ in rows} == {1, 3}
    # top-1: one passage in, one text out: its source is certain.
    assert all(len(json.loads(ids)) == 1 for k, ids in rows if k == 1)
    # top-3: three passages merged into one text: unknown.
    assert all(ids is None for k, ids in rows if k == 3)
