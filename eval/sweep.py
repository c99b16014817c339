"""The sweep: retrieve and rerank once per question, then compress, lay out, generate and score per setting."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corpus.embed import Embedder, build_embedder
from corpus.load import read_jsonl
from corpus.models import Hit, Question
from corpus.retrieve import LanceRetriever, Retriever
from eval.compress import CompressionResult, Compressor, build_compressors
from eval.generate import Generator, VLLMGenerator, WarmReport
from eval.metrics import METRICS
from eval.prompt import PromptLayout, context_block
from eval.provenance import file_sha256, git_state, package_versions
from eval.rerank import Reranker, build_reranker
from eval.settings import Setting, SweepConfig
from eval.store import DuckDBStore, RunRow, SampleRow, dumps

Progress = Callable[[str, int, int], None]
"""Callback (stage, done, total) for progress bars."""


@dataclass
class Components:
    """The live backends of a sweep; tests pass fakes registered the same way as real ones."""

    embedder: Embedder
    retriever: Retriever
    rerankers: dict[str, Reranker]
    compressors: dict[str, Compressor]
    generator: Generator
    index_version: int | None = None
    corpus_sha256: str | None = None


@dataclass
class SweepResult:
    """What a finished sweep wrote."""

    run_id: str
    store_path: str
    n_samples: int
    stage_seconds: dict[str, float] = field(default_factory=dict)
    leaderboard: list[dict[str, Any]] = field(default_factory=list)
    warm: WarmReport | None = None


def load_questions(config: SweepConfig) -> list[Question]:
    """Questions from the configured JSONL file, first `limit` of them."""
    questions = [q for _, q in read_jsonl(config.questions_path, Question)]
    if not questions:
        from corpus.errors import InputFileError

        raise InputFileError(config.questions_path, "no questions in file")
    return questions[: config.limit] if config.limit else questions


def build_components(config: SweepConfig, settings: Sequence[Setting]) -> Components:
    """Real backends: sentence-transformers, LanceDB, llmlingua, vLLM; the default models from packages."""
    from eval.assets import smollm2_dir

    embedder = build_embedder(config.embedder)
    retriever = LanceRetriever(config.index_path, embedder, version=config.index_version)
    lm_dir = None if config.generator.model and config.compressor.model else str(smollm2_dir())
    generator = VLLMGenerator(config.generator.model or lm_dir or "", config.generator)
    compressors = build_compressors(
        sorted({s.compressor for s in settings}),
        generator.count_tokens,
        config.compressor.model or lm_dir,
        config.compressor,
    )
    rerankers = {name: build_reranker(name, embedder=embedder) for name in sorted({s.reranker for s in settings})}
    return Components(
        embedder=embedder,
        retriever=retriever,
        rerankers=rerankers,
        compressors=compressors,
        generator=generator,
        index_version=retriever.version,
        corpus_sha256=retriever.corpus_digest(),
    )


def _score(answer: str, context: str, golds: Sequence[str]) -> dict[str, float]:
    return {name: m.fn(answer if m.on == "answer" else context, golds) for name, m in METRICS.items()}


def run_sweep(
    config: SweepConfig, components: Components | None = None, progress: Progress | None = None
) -> SweepResult:
    """Run every setting of the grid over the question set and store one row per question × setting."""
    tick = progress or (lambda stage, done, total: None)
    stages: dict[str, float] = {}
    questions = load_questions(config)
    settings = config.grid.expand()
    t0 = time.perf_counter()
    comps = components or build_components(config, settings)
    stages["load_models"] = time.perf_counter() - t0

    store = DuckDBStore(config.store_path)
    run_id = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    commit, dirty = git_state()
    store.start_run(
        RunRow(
            run_id=run_id,
            started_at=dt.datetime.now(dt.UTC),
            status="running",
            config_json=config.model_dump_json(),
            config_hash=config.config_hash(),
            git_commit=commit,
            git_dirty=dirty,
            package_versions=dumps(package_versions()),
            questions_path=str(config.questions_path),
            questions_sha256=file_sha256(config.questions_path),
            index_path=str(config.index_path),
            index_version=comps.index_version,
            corpus_sha256=comps.corpus_sha256,
            n_questions=len(questions),
            n_settings=len(settings),
        )
    )
    try:
        result = _run(config, comps, store, run_id, questions, settings, stages, tick)
    except BaseException as exc:
        store.finish_run(run_id, "failed", error=f"{type(exc).__name__}: {exc}"[:2000], stage_seconds=dumps(stages))
        store.close()
        raise
    store.close()
    return result


def _run(
    config: SweepConfig,
    comps: Components,
    store: DuckDBStore,
    run_id: str,
    questions: list[Question],
    settings: list[Setting],
    stages: dict[str, float],
    tick: Progress,
) -> SweepResult:
    # Retrieval and reranking do not depend on top-k or compression: once per question and mode
    # (and reranker); every setting takes a prefix of the same ranked list.
    n_candidates = max(config.retrieve_n, *(s.top_k for s in settings))
    modes = sorted({s.retrieval for s in settings})
    t0 = time.perf_counter()
    candidates: dict[tuple[str, str], list[Hit]] = {}
    retrieve_s: dict[tuple[str, str], float] = {}
    for i, q in enumerate(questions, start=1):
        for mode in modes:
            start = time.perf_counter()
            candidates[mode, q.id] = comps.retriever.retrieve(q.question, n_candidates, mode)
            retrieve_s[mode, q.id] = time.perf_counter() - start
        tick("retrieve", i, len(questions))
    stages["retrieve"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ranked: dict[tuple[str, str, str], list[Hit]] = {}
    rerank_s: dict[tuple[str, str, str], float] = {}
    pairs = sorted({(s.retrieval, s.reranker) for s in settings})
    for i, q in enumerate(questions, start=1):
        for mode, name in pairs:
            start = time.perf_counter()
            ranked[mode, name, q.id] = comps.rerankers[name].rerank(q.question, candidates[mode, q.id])
            rerank_s[mode, name, q.id] = time.perf_counter() - start
        tick("rerank", i, len(questions))
    stages["rerank"] = time.perf_counter() - t0

    layout = PromptLayout(getattr(comps.generator, "tokenizer", None))
    t0 = time.perf_counter()
    warm = comps.generator.warm(layout.stable_prefix())
    stages["warm"] = time.perf_counter() - t0

    n_rows = 0
    for setting in settings:
        t0 = time.perf_counter()
        compressor = comps.compressors[setting.compressor]
        rows: list[SampleRow] = []
        prompts: list[str] = []
        contexts: list[str] = []
        for i, q in enumerate(questions, start=1):
            key = (setting.retrieval, setting.reranker, q.id)
            hits = ranked[key][: setting.top_k]
            base = SampleRow(
                run_id=run_id,
                setting_hash=setting.config_hash(),
                setting_name=setting.name,
                setting_json=setting.model_dump_json(),
                question_id=q.id,
                question=q.question,
                answerable=q.answerable,
                gold_answers=dumps(q.answers),
                top_k=setting.top_k,
                reranker=setting.reranker,
                compressor=setting.compressor,
                target_ratio=setting.target_ratio,
                retrieval=setting.retrieval,
                context_chunk_ids=dumps([h.chunk_id for h in hits]),
                retrieve_seconds=retrieve_s[setting.retrieval, q.id],
                rerank_seconds=rerank_s[key],
                **retrieval_scores(ranked[key], q.gold_doc_ids, setting.top_k),
                status="pending",
            )
            try:
                comp = compressor.compress([h.text for h in hits], q.question, setting.target_ratio)
            except Exception as exc:  # one bad sample is a failed row, not a lost sweep
                rows.append(base.model_copy(update={"status": "failed", "error": f"compress: {exc}"[:2000]}))
                continue
            context = _context(hits, comp)
            rows.append(
                base.model_copy(
                    update={
                        "context_text": context,
                        "context_tokens_in": comp.tokens_in,
                        "context_tokens_out": comp.tokens_out,
                        "realized_ratio": comp.ratio if comp.tokens_out else None,
                        "compress_seconds": comp.seconds,
                    }
                )
            )
            prompts.append(layout.render(context, q.question))
            contexts.append(context)
            tick(f"compress {setting.name}", i, len(questions))
        stages[f"compress:{setting.name}"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        waiting = [i for i, r in enumerate(rows) if r.status == "pending"]
        try:
            gens = comps.generator.generate(prompts)
            if len(gens) != len(prompts):
                raise RuntimeError(f"generator returned {len(gens)} outputs for {len(prompts)} prompts")
        except Exception as exc:
            for i in waiting:
                rows[i] = rows[i].model_copy(update={"status": "failed", "error": f"generate: {exc}"[:2000]})
        else:
            for i, gen, context in zip(waiting, gens, contexts, strict=True):
                rows[i] = rows[i].model_copy(
                    update={
                        "answer": gen.text,
                        "prompt_tokens": gen.prompt_tokens,
                        "cached_tokens": gen.cached_tokens,
                        "ttft_s": gen.ttft_s,
                        "status": "ok",
                        **_score(gen.text, context, json.loads(rows[i].gold_answers)),
                    }
                )
        stages[f"generate:{setting.name}"] = time.perf_counter() - t0
        store.add_samples(rows)
        n_rows += len(rows)
    store.finish_run(
        run_id,
        "ok",
        stage_seconds=dumps(stages),
        warm_prefix_tokens=warm.prefix_tokens,
        warm_cached_tokens=warm.cached_tokens,
        warm_cold_ttft_s=warm.cold_ttft_s,
        warm_warm_ttft_s=warm.warm_ttft_s,
    )
    return SweepResult(
        run_id=run_id,
        store_path=str(config.store_path),
        n_samples=n_rows,
        stage_seconds=stages,
        leaderboard=store.leaderboard(run_id),
        warm=warm,
    )


def retrieval_scores(ranked: Sequence[Hit], gold: Sequence[str], k: int) -> dict[str, Any]:
    """Gold rank (1-based, over every candidate) and recall of gold documents at k and over all candidates.

    NULL when the question names no gold document: such a question cannot score retrieval.
    """
    if not gold:
        return {"gold_rank": None, "retrieval_recall": None, "candidate_recall": None}
    wanted = set(gold)
    docs = [h.doc_id for h in ranked]
    rank = next((i for i, d in enumerate(docs, start=1) if d in wanted), None)
    return {
        "gold_rank": rank,
        "retrieval_recall": len(wanted & set(docs[:k])) / len(wanted),
        "candidate_recall": len(wanted & set(docs)) / len(wanted),
    }


def _context(hits: Sequence[Hit], comp: CompressionResult) -> str:
    # A query-aware compressor may drop whole passages; titles then no longer line up, so leave them off.
    if len(comp.texts) == len(hits):
        return context_block([h.title for h in hits], comp.texts)
    return context_block([""] * len(comp.texts), comp.texts)
