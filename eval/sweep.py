"""The sweep: retrieve and rerank once per question, then compress, lay out, generate and score per setting."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from corpus.errors import InputFileError
from corpus.load import read_jsonl
from corpus.models import Hit, Question
from eval.batch import generate_setting, reset_and_warm
from eval.components import Components, build_components
from eval.faithfulness import ClaimChecker
from eval.generate import WarmReport
from eval.judge import cohen_kappa
from eval.latency import fit_prefill, probe_drafts
from eval.prompt import PromptLayout, arrange, context_block
from eval.provenance import new_run_id, question_rows, run_row, setting_rows
from eval.resume import claim_run, reuse_settings
from eval.sample import CompressionPart, RetrievalPart, SampleDraft, SampleKey
from eval.scoring import judge_drafts, retrieval_scores
from eval.settings import Setting, SweepConfig, setting_json
from eval.store import DuckDBStore, dumps

T = TypeVar("T")
Progress = Callable[[str, int, int], None]
"""Callback (stage, done, total) for progress bars."""


@dataclass
class SweepResult:
    """What a finished sweep wrote."""

    run_id: str
    store_path: str
    n_samples: int
    stage_seconds: dict[str, float] = field(default_factory=dict)
    leaderboard: list[dict[str, Any]] = field(default_factory=list)
    warm: WarmReport | None = None
    resumed: bool = False
    """The run was an unfinished one, taken up again."""
    settings_kept: int = 0
    """Settings whose stored rows were kept (a resumed run's finished settings): not recomputed."""
    settings_reused: int = 0
    """Settings copied from an earlier run with the same reuse key: not recomputed."""
    settings_computed: int = 0


def load_questions(config: SweepConfig) -> list[Question]:
    """Questions from the configured JSONL file, first `limit` of them."""
    questions = [q for _, q in read_jsonl(config.questions_path, Question)]
    if not questions:
        raise InputFileError(config.questions_path, "no questions in file")
    return questions[: config.limit] if config.limit else questions


def run_sweep(
    config: SweepConfig,
    components: Components | None = None,
    progress: Progress | None = None,
    resume: bool = True,
    reuse: bool = True,
) -> SweepResult:
    """Run every setting of the grid over the question set and store one row per question × setting. An
    unfinished run over the same inputs (same fingerprint) is resumed: its finished settings are kept; a
    setting an earlier run computed over the same inputs is copied from it (`reuse`).
    """
    tick = progress or (lambda stage, done, total: None)
    stages: dict[str, float] = {}
    questions = load_questions(config)
    settings = config.grid.expand()
    t0 = time.perf_counter()
    comps = components or build_components(config, settings)
    stages["load_models"] = time.perf_counter() - t0
    try:
        store = DuckDBStore(config.store_path)
        new = new_run_id()
        row = run_row(new, config, len(questions), len(settings), comps.index_version, comps.corpus_sha256)
        claim = claim_run(store, row, setting_rows(new, config, settings), question_rows(new, questions), resume)
        for stage, seconds in claim.stage_seconds.items():
            stages[stage] = stages.get(stage, 0.0) + seconds
        run_id = claim.run_id
        if claim.resumed:
            tick(f"resuming run {run_id}: {len(claim.done)} of {len(settings)} settings kept", 1, 1)
        try:
            sweep = _Sweep(config, comps, store, run_id, questions, stages, tick)
            sweep.done, sweep.resumed = claim.done, claim.resumed
            sweep.reuse_key = row.reuse_key if reuse else None
            return sweep.run(settings)
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"[:2000]
            store.finish_run(run_id, "failed", error=error, stage_seconds=dumps(stages))
            raise
    finally:
        if components is None:  # the engine we started, we stop
            comps.close()


Ranked = dict[tuple[str, str, str], list[Hit]]
"""(retrieval mode, reranker, question id) -> reranked candidates."""


@dataclass
class _Sweep:
    """One run in progress: the loop over settings and the stages of each."""

    config: SweepConfig
    comps: Components
    store: DuckDBStore
    run_id: str
    questions: list[Question]
    stages: dict[str, float]
    tick: Progress
    candidates: dict[tuple[str, str], list[Hit]] = field(default_factory=dict)
    ranked: Ranked = field(default_factory=dict)
    retrieve_s: dict[tuple[str, str], float] = field(default_factory=dict)
    rerank_s: dict[tuple[str, str, str], float] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    """Settings already stored by an earlier attempt of this run: kept, not recomputed."""
    resumed: bool = False
    reuse_key: str | None = None
    """Reuse settings of earlier runs with this key (None: compute every setting)."""

    def timed(self, stage: str, fn: Callable[[], T]) -> T:
        """Run `fn`, adding its wall time to `stage`."""
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.stages[stage] = self.stages.get(stage, 0.0) + time.perf_counter() - t0

    def run(self, settings: list[Setting]) -> SweepResult:
        """Every setting, one transaction each; then the run's summary."""
        todo = [s for s in settings if s.config_hash() not in self.done]  # a resumed run keeps the rest
        reused = 0
        if self.reuse_key:
            todo, reused = self.timed(
                "reuse", lambda: reuse_settings(self.store, self.reuse_key or "", self.run_id, todo, self.tick)
            )
        # The grid's largest top-k sets the candidate count, for computed and kept settings alike.
        n_candidates = max(self.config.retrieve_n, *(s.top_k for s in settings))
        self.timed("retrieve", lambda: self.retrieve(todo, n_candidates) if todo else None)
        self.timed("rerank", lambda: self.rerank(todo) if todo else None)
        generator = self.comps.generator
        layout = PromptLayout(getattr(generator, "tokenizer", None))
        prefix = layout.stable_prefix()
        warm = self.timed("warm", lambda: generator.warm(prefix))
        by_hash = sorted(self.questions, key=lambda q: hashlib.sha256(q.id.encode()).hexdigest())
        probe_ids = {q.id for q in by_hash[: self.config.probe_questions]}
        checker = ClaimChecker(self.comps.embedder)  # one per sweep: its embedding cache spans the settings
        n_rows = 0
        for done, setting in enumerate(todo, start=1):
            name = setting.name
            stage = f"setting {done}/{len(todo)} {name}"
            self.tick(stage, 0, len(self.questions))  # starts the stage's clock
            drafts = self.timed(f"compress:{name}", partial(self.prepare, setting, layout))
            # Each setting starts from the same cache state (only the stable prefix warm), so a setting
            # never profits from passages that an earlier setting happened to leave in the cache.
            self.timed(f"generate:{name}", partial(generate_setting, drafts, generator, prefix))
            claims = self.timed(f"faithfulness:{name}", partial(judge_drafts, drafts, checker, self.comps.judge))
            reset_and_warm(generator, prefix)
            self.timed(f"probe:{name}", partial(probe_drafts, drafts, probe_ids, generator))
            rows = [d.row() for d in drafts]
            self.store.add_samples(rows, claims)
            n_rows += len(rows)
            failed = sum(r.status != "ok" for r in rows)
            self.tick(stage, len(rows), len(rows))
            if failed:
                self.tick(f"{stage}: failed samples", failed, failed)
        probes = self.store.probe_points(self.run_id)  # a resumed run's earlier settings count too
        fit = fit_prefill(probes)
        pairs = self.store.judge_pairs(self.run_id)
        self.store.finish_run(
            self.run_id,
            "ok",
            stage_seconds=dumps(self.stages),
            warm_prefix_tokens=warm.prefix_tokens,
            warm_cached_tokens=warm.cached_tokens,
            warm_cold_ttft_s=warm.cold_ttft_s,
            warm_warm_ttft_s=warm.warm_ttft_s,
            prefill_a=fit[0] if fit else None,
            prefill_b=fit[1] if fit else None,
            prefill_fit_points=len(probes),
            engine_precision=getattr(generator, "precision", None),
            judge_kappa=cohen_kappa(pairs) if self.comps.judge is not None else None,
            judge_claims=len(pairs) if self.comps.judge is not None else None,
        )
        return SweepResult(
            run_id=self.run_id,
            store_path=str(self.config.store_path),
            n_samples=n_rows,
            stage_seconds=self.stages,
            leaderboard=self.store.leaderboard(self.run_id),
            warm=warm,
            resumed=self.resumed,
            settings_kept=len(settings) - len(todo) - reused,
            settings_reused=reused,
            settings_computed=len(todo),
        )

    def retrieve(self, settings: list[Setting], n_candidates: int) -> None:
        """`n_candidates` per question and retrieval mode of `settings`, once."""
        modes = sorted({s.retrieval for s in settings})
        for i, q in enumerate(self.questions, start=1):
            for mode in modes:
                start = time.perf_counter()
                self.candidates[mode, q.id] = self.comps.retriever.retrieve(q.question, n_candidates, mode)
                self.retrieve_s[mode, q.id] = time.perf_counter() - start
            self.tick("retrieve", i, len(self.questions))

    def rerank(self, settings: list[Setting]) -> None:
        """Rerank once per question, mode and reranker; every setting takes a prefix of the same list."""
        pairs = sorted({(s.retrieval, s.reranker) for s in settings})
        for i, q in enumerate(self.questions, start=1):
            for mode, name in pairs:
                start = time.perf_counter()
                self.ranked[mode, name, q.id] = self.comps.rerankers[name].rerank(
                    q.question, self.candidates[mode, q.id]
                )
                self.rerank_s[mode, name, q.id] = time.perf_counter() - start
            self.tick("rerank", i, len(self.questions))

    def prepare(self, setting: Setting, layout: PromptLayout) -> list[SampleDraft]:
        """Compress and lay out every question of one setting; a failure is a failed sample, never a gap."""
        compressor = self.comps.compressors[setting.compressor]
        stored = setting_json(setting, self.config.component_specs(setting))
        drafts: list[SampleDraft] = []
        for i, q in enumerate(self.questions, start=1):
            key = (setting.retrieval, setting.reranker, q.id)
            hits = self.ranked[key][: setting.top_k]
            draft = SampleDraft(
                key=_sample_key(self.run_id, setting, stored, q),
                retrieval=RetrievalPart(
                    retrieve_seconds=self.retrieve_s[setting.retrieval, q.id],
                    rerank_seconds=self.rerank_s[key],
                    **retrieval_scores(self.ranked[key], q.gold_doc_ids, setting.top_k),
                ),
            )
            drafts.append(draft)
            try:
                comp = compressor.compress([h.text for h in hits], q.question, setting.target_ratio)
            except Exception as exc:  # one bad sample is a failed row, not a lost sweep
                draft.compression = CompressionPart(context_chunk_ids=dumps([h.chunk_id for h in hits]))
                draft.fail("compress", exc)
                continue
            kept = (
                comp.kept
                if comp.kept is not None
                else (list(range(len(hits))) if len(comp.texts) == len(hits) else None)
            )
            order = arrange(len(comp.texts), setting.layout)
            titles = [hits[kept[j]].heading for j in order] if kept is not None else [""] * len(order)
            ids = [hits[kept[j]].chunk_id for j in order] if kept is not None else [h.chunk_id for h in hits]
            context = context_block(titles, [comp.texts[j] for j in order])
            realized = comp.ratio if comp.tokens_out else None
            draft.compression = CompressionPart(
                context_chunk_ids=dumps(ids),
                context_text=context,
                context_tokens_in=comp.tokens_in,
                context_tokens_out=comp.tokens_out,
                realized_ratio=realized,
                ratio_gap=(realized - setting.target_ratio) / setting.target_ratio if realized else None,
                compress_seconds=comp.seconds,
                compress_calls=comp.calls,
                compress_cold_seconds=comp.seconds if comp.cold_seconds is None else comp.cold_seconds,
            )
            draft.prompt = layout.render(context, q.question)
            self.tick(f"compress {setting.name}", i, len(self.questions))
        compressor.flush()  # one LanceDB commit per setting, not one per passage
        return drafts


def _sample_key(run_id: str, setting: Setting, stored: str, q: Question) -> SampleKey:
    return SampleKey(
        run_id=run_id,
        setting_hash=setting.config_hash(),
        setting_name=setting.name,
        setting_json=stored,
        question_id=q.id,
        question=q.question,
        answerable=q.answerable,
        gold_answers=dumps(q.answers),
        **setting.model_dump(),  # the setting's fields as columns, as in `provenance.setting_rows`
    )
