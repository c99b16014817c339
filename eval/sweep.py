"""The sweep: retrieve and rerank once per question, then compress, lay out, generate and score per setting."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corpus.embed import Embedder, build_embedder
from corpus.load import read_jsonl
from corpus.models import Hit, Question
from corpus.retrieve import LanceRetriever, Retriever
from eval.compress import Compressor, CompressorContext, build_compressors
from eval.faithfulness import ClaimChecker
from eval.generate import Generator, VLLMGenerator, WarmReport
from eval.judge import RagasFaithfulnessJudge
from eval.latency import fit_prefill, probe_rows
from eval.prompt import PromptLayout, context_block
from eval.provenance import file_sha256, git_state, package_versions
from eval.rerank import Reranker, build_reranker
from eval.rows import QuestionRow, RunRow, SampleRow, SettingRow
from eval.scoring import judge_rows, retrieval_scores, score_answer
from eval.settings import Setting, SweepConfig
from eval.store import DuckDBStore, dumps

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
    judge: Any = None
    """Optional LLM judge with `score(question, answer, contexts)` (ragas Faithfulness)."""


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
    from eval.compress_cache import LanceCompressionCache

    embedder = build_embedder(config.embedder)
    retriever = LanceRetriever(config.index_path, embedder, version=config.index_version)
    bundled = None if config.generator.model and config.compressor.model else str(smollm2_dir())
    generator_model = config.generator.model or bundled or ""
    generator = VLLMGenerator(generator_model, config.generator)
    compressor_model = config.compressor.model or bundled
    names = sorted({s.compressor for s in settings})
    # The engine compressor scores with the generator's engine unless a separate (smaller) LM is configured.
    scorer = generator
    if "engine-lingua" in names and compressor_model not in (None, generator_model):
        scorer = VLLMGenerator(compressor_model or "", config.generator.model_copy(update={"model": compressor_model}))
    context = CompressorContext(
        count_tokens=generator.count_tokens,
        config=config.compressor,
        model=compressor_model,
        embedder=embedder,
        scorer=scorer,
        cache=LanceCompressionCache(config.index_path),
    )
    rerankers = {
        name: build_reranker(name, embedder=embedder, scorer=generator)
        for name in sorted({s.reranker for s in settings})
    }
    return Components(
        embedder=embedder,
        retriever=retriever,
        rerankers=rerankers,
        compressors=build_compressors(names, context),
        generator=generator,
        index_version=retriever.version,
        corpus_sha256=retriever.corpus_digest(),
        judge=RagasFaithfulnessJudge(config.judge) if config.judge else None,
    )


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
        ),
        [
            SettingRow(
                run_id=run_id,
                setting_hash=s.config_hash(),
                setting_name=s.name,
                setting_json=s.model_dump_json(),
                **s.model_dump(),
            )
            for s in settings
        ],
        [
            QuestionRow(
                run_id=run_id,
                question_id=q.id,
                question=q.question,
                answers=dumps(q.answers),
                gold_doc_ids=dumps(q.gold_doc_ids),
                answerable=q.answerable,
            )
            for q in questions
        ],
    )
    try:
        return _run(config, comps, store, run_id, questions, settings, stages, tick)
    except BaseException as exc:
        store.finish_run(run_id, "failed", error=f"{type(exc).__name__}: {exc}"[:2000], stage_seconds=dumps(stages))
        raise
    finally:
        if components is None:  # the engine we started, we stop
            getattr(comps.generator, "close", lambda: None)()


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
    ranked, retrieve_s, rerank_s = _retrieve_and_rerank(config, comps, questions, settings, stages, tick)
    layout = PromptLayout(getattr(comps.generator, "tokenizer", None))
    prefix = layout.stable_prefix()
    t0 = time.perf_counter()
    warm = comps.generator.warm(prefix)
    stages["warm"] = time.perf_counter() - t0
    probe_ids = {q.id for q in sorted(questions, key=lambda q: sha256_hex(q.id))[: config.probe_questions]}

    n_rows = 0
    probes: list[tuple[int, float]] = []
    checker = ClaimChecker(comps.embedder)  # one per sweep: its embedding cache spans the settings
    for setting in settings:
        t0 = time.perf_counter()
        rows, prompts = _prepare(setting, questions, ranked, retrieve_s, rerank_s, comps, layout, run_id, tick)
        _flush_caches(comps.compressors.values())
        stages[f"compress:{setting.name}"] = time.perf_counter() - t0

        # Each setting starts from the same cache state (only the stable prefix warm), so a setting
        # never profits from passages that an earlier setting happened to leave in the cache.
        t0 = time.perf_counter()
        comps.generator.reset_cache()
        comps.generator.warm(prefix)
        _generate(rows, prompts, comps.generator)
        stages[f"generate:{setting.name}"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        claims = judge_rows(rows, checker, comps.judge)
        stages[f"faithfulness:{setting.name}"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        comps.generator.reset_cache()
        comps.generator.warm(prefix)
        probes += probe_rows(rows, prompts, probe_ids, comps.generator)
        stages[f"probe:{setting.name}"] = time.perf_counter() - t0
        store.add_samples(rows, claims)
        n_rows += len(rows)
    fit = fit_prefill(probes)
    store.finish_run(
        run_id,
        "ok",
        stage_seconds=dumps(stages),
        warm_prefix_tokens=warm.prefix_tokens,
        warm_cached_tokens=warm.cached_tokens,
        warm_cold_ttft_s=warm.cold_ttft_s,
        warm_warm_ttft_s=warm.warm_ttft_s,
        prefill_a=fit[0] if fit else None,
        prefill_b=fit[1] if fit else None,
        prefill_fit_points=len(probes),
    )
    return SweepResult(
        run_id=run_id,
        store_path=str(config.store_path),
        n_samples=n_rows,
        stage_seconds=stages,
        leaderboard=store.leaderboard(run_id),
        warm=warm,
    )


Ranked = dict[tuple[str, str, str], list[Hit]]


def _retrieve_and_rerank(
    config: SweepConfig,
    comps: Components,
    questions: list[Question],
    settings: list[Setting],
    stages: dict[str, float],
    tick: Progress,
) -> tuple[Ranked, dict[tuple[str, str], float], dict[tuple[str, str, str], float]]:
    # Retrieval and reranking do not depend on top-k or compression: once per question and mode
    # (and reranker), for the largest top-k; every setting takes a prefix of the same ranked list.
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
    ranked: Ranked = {}
    rerank_s: dict[tuple[str, str, str], float] = {}
    pairs = sorted({(s.retrieval, s.reranker) for s in settings})
    for i, q in enumerate(questions, start=1):
        for mode, name in pairs:
            start = time.perf_counter()
            ranked[mode, name, q.id] = comps.rerankers[name].rerank(q.question, candidates[mode, q.id])
            rerank_s[mode, name, q.id] = time.perf_counter() - start
        tick("rerank", i, len(questions))
    stages["rerank"] = time.perf_counter() - t0
    return ranked, retrieve_s, rerank_s


def _prepare(
    setting: Setting,
    questions: list[Question],
    ranked: Ranked,
    retrieve_s: dict[tuple[str, str], float],
    rerank_s: dict[tuple[str, str, str], float],
    comps: Components,
    layout: PromptLayout,
    run_id: str,
    tick: Progress,
) -> tuple[list[SampleRow], list[str | None]]:
    """Compress and lay out every question of one setting; a failure is a failed row, never a gap."""
    compressor = comps.compressors[setting.compressor]
    rows: list[SampleRow] = []
    prompts: list[str | None] = []
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
            layout=setting.layout,
            retrieve_seconds=retrieve_s[setting.retrieval, q.id],
            rerank_seconds=rerank_s[key],
            **retrieval_scores(ranked[key], q.gold_doc_ids, setting.top_k),
            status="pending",
        )
        try:
            comp = compressor.compress([h.text for h in hits], q.question, setting.target_ratio)
        except Exception as exc:  # one bad sample is a failed row, not a lost sweep
            rows.append(
                base.model_copy(
                    update={
                        "status": "failed",
                        "error": f"compress: {exc}"[:2000],
                        "context_chunk_ids": dumps([h.chunk_id for h in hits]),
                    }
                )
            )
            prompts.append(None)
            continue
        kept = (
            comp.kept if comp.kept is not None else (list(range(len(hits))) if len(comp.texts) == len(hits) else None)
        )
        order = arrange(len(comp.texts), setting.layout)
        titles = [hits[kept[j]].title for j in order] if kept is not None else [""] * len(order)
        ids = [hits[kept[j]].chunk_id for j in order] if kept is not None else [h.chunk_id for h in hits]
        context = context_block(titles, [comp.texts[j] for j in order])
        realized = comp.ratio if comp.tokens_out else None
        rows.append(
            base.model_copy(
                update={
                    "context_chunk_ids": dumps(ids),
                    "context_text": context,
                    "context_tokens_in": comp.tokens_in,
                    "context_tokens_out": comp.tokens_out,
                    "realized_ratio": realized,
                    "ratio_gap": (realized - setting.target_ratio) / setting.target_ratio if realized else None,
                    "compress_seconds": comp.seconds,
                    "compress_calls": comp.calls,
                }
            )
        )
        prompts.append(layout.render(context, q.question))
        tick(f"compress {setting.name}", i, len(questions))
    return rows, prompts


def _flush_caches(compressors: Iterable[Compressor]) -> None:
    """Persist new query-agnostic compressions once per setting (one LanceDB commit, not one per passage)."""
    for compressor in compressors:
        flush = getattr(getattr(compressor, "cache", None), "flush", None)
        if flush is not None:
            flush()


def _generate(rows: list[SampleRow], prompts: list[str | None], generator: Generator) -> None:
    """One engine batch for the setting; scores land in `rows` in place."""
    waiting = [i for i, p in enumerate(prompts) if p is not None]
    try:
        gens = generator.generate([prompts[i] or "" for i in waiting])
        if len(gens) != len(waiting):
            raise RuntimeError(f"generator returned {len(gens)} outputs for {len(waiting)} prompts")
    except Exception as exc:
        for i in waiting:
            rows[i] = rows[i].model_copy(update={"status": "failed", "error": f"generate: {exc}"[:2000]})
        return
    for i, gen in zip(waiting, gens, strict=True):
        golds = json.loads(rows[i].gold_answers)
        rows[i] = rows[i].model_copy(
            update={
                "answer": gen.text,
                "prompt_tokens": gen.prompt_tokens,
                "cached_tokens": gen.cached_tokens,
                "ttft_s": gen.ttft_s,
                "status": "ok",
                **score_answer(gen.text, rows[i].context_text or "", golds),
            }
        )


def arrange(n: int, layout: str) -> list[int]:
    """Prompt order of n passages ranked best first: `ranked` keeps it; `edges` puts the best at both ends.

    edges for 5: [0, 2, 4, 3, 1] - the two most relevant open and close the context (lost in the middle).
    """
    if layout == "ranked":
        return list(range(n))
    return list(range(0, n, 2)) + list(reversed(range(1, n, 2)))


def sha256_hex(text: str) -> str:
    """sha256 of a string, for deterministic sampling."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
