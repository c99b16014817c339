"""One setting's rows: retrieve and rerank (once per question, mode and reranker), compress, lay out,
generate, judge and probe. The same object runs in the sweep's own process and inside each Ray worker, so a
sharded sweep computes exactly what a single-process one does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from corpus.models import Question
from corpus.retrieve import RetrievalMode
from eval.answer_cache.guard import question_guard
from eval.answer_cache.lookup import CacheHit, CacheLookups, cache_hits
from eval.engine.generator import WarmReport
from eval.faithfulness.checker import ClaimChecker
from eval.faithfulness.verifier import AnswerVerifier
from eval.prompt import PromptLayout
from eval.run.cached_answers import serve_hits
from eval.run.citations import CITED_INSTRUCTION
from eval.run.draft import CompressionPart, RetrievalPart, SampleDraft, SampleKey
from eval.run.generation import generate_setting
from eval.run.latency import kept_order, lay_out
from eval.run.provenance import hardware_digest
from eval.run.scoring import judge_drafts, retrieval_scores
from eval.run.wiring import Components
from eval.settings import Setting, SweepConfig, setting_json
from eval.store import dumps
from eval.store.rows import ClaimRow, SampleRow
from eval.store.scratch import RankedLists, RowSpill

T = TypeVar("T")
Progress = Callable[[str, int, int], None]
"""Callback (stage, done, total) for progress bars."""


BLOCK_QUESTIONS = 1000
"""Questions of a setting computed (compressed, generated in one engine batch, judged) and set aside together:
a setting with more goes to a spill file block by block (`eval.store.scratch`), so a sweep's memory does not grow
with its question count."""


@dataclass
class SettingOutput:
    """What one setting produced: its rows and claim evidence (in `rows` and `claims`, or block by block in
    `spill` for a setting of more than `BLOCK_QUESTIONS` questions), and the stage times it took.
    """

    setting: Setting
    rows: list[SampleRow]
    claims: list[ClaimRow]
    stages: dict[str, float] = field(default_factory=dict)
    spill: RowSpill | None = None

    def counts(self) -> tuple[int, int, str | None]:
        """(rows, failed rows, the first failed row's error)."""
        if self.spill is not None:
            return self.spill.n_rows, self.spill.n_failed, self.spill.first_error
        failed = [r for r in self.rows if r.status != "ok"]
        return len(self.rows), len(failed), failed[0].error if failed else None


@dataclass
class SettingRunner:
    """Computes settings one at a time over a fixed question list, with a fixed candidate count."""

    config: SweepConfig
    comps: Components
    run_id: str
    questions: list[Question]
    n_candidates: int
    tick: Progress = field(default=lambda stage, done, total: None)
    stages: dict[str, float] = field(default_factory=dict)
    ranked: RankedLists = field(default_factory=lambda: RankedLists())
    """(retrieval mode, reranker, question id) -> reranked candidates, on disk (memory flat in the questions)."""
    retrieved: set[str] = field(default_factory=set)
    """Retrieval modes whose candidates this runner has fetched (a second reranker fetches them again)."""
    prefix: str = ""
    layout: PromptLayout | None = None
    checker: ClaimChecker | None = None
    measured_on: str | None = None
    """sha256 of this process's machine (on Ray: the worker's), stamped on every row it computes."""
    warm_report: WarmReport | None = None
    """What `warm()` reported (kept for the run row)."""
    spill_rows: bool = True
    """Set a large setting's rows aside in a local spill file (False on a Ray worker: its rows travel back)."""

    def machine(self) -> tuple[str | None, str | None]:
        """(hardware sha256, engine precision) of the process computing the rows."""
        return self.measured_on, getattr(self.comps.generator, "precision", None)

    def timed(self, stage: str, fn: Callable[[], T]) -> T:
        """Run `fn`, adding its wall time to `stage`."""
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.stages[stage] = self.stages.get(stage, 0.0) + time.perf_counter() - t0

    def warm(self) -> WarmReport:
        """Cache the stable prompt prefix in the engine (every setting starts from this state)."""
        self.layout = PromptLayout(getattr(self.comps.generator, "tokenizer", None))
        self.prefix = self.layout.stable_prefix()
        self.checker = ClaimChecker(self.comps.embedder)  # one per runner: its embedding cache spans settings
        self.measured_on = hardware_digest()[1]
        return self.timed("warm", lambda: self.comps.generator.warm(self.prefix))

    def compute(self, setting: Setting, index: int = 1, total: int = 1) -> SettingOutput:
        """Every question of `setting`: rows and claims, not yet stored."""
        if self.layout is None or self.checker is None:
            raise RuntimeError("SettingRunner.warm() must run before compute()")
        before = dict(self.stages)
        self.rank(setting.retrieval, setting.reranker)
        stage = f"setting {index}/{total} {setting.name}"
        self.tick(stage, 0, len(self.questions))  # starts the stage's clock
        name = setting.name
        cache = self.timed(f"answer_cache:{name}", partial(self.cache_hits, setting.answer_cache))
        n = len(self.questions)
        # A cache hit is served from an earlier question's answer, which must be in its block: one block then.
        size = max(1, n if cache.hits or not self.spill_rows else BLOCK_QUESTIONS)
        spill = RowSpill() if size < n else None
        rows: list[SampleRow] = []
        claims: list[ClaimRow] = []
        try:
            for start in range(0, max(n, 1), size):
                block_rows, block_claims = self.block(setting, cache, start, self.questions[start : start + size])
                if spill is not None:
                    spill.add(block_rows, block_claims)
                else:
                    rows, claims = rows + block_rows, claims + block_claims
                if start + size < n:
                    self.tick(stage, start + size, n)
        except BaseException:
            if spill is not None:
                spill.close()
                spill.remove()
            raise
        # Latency is not measured here, setting by setting: the latency phase times every setting of the run
        # back to back per probe question (`eval.run.latency`), after the answers.
        self.tick(stage, n, n)  # the setting is done: its line, its bar full
        spent = {k: v - before.get(k, 0.0) for k, v in self.stages.items() if v != before.get(k, 0.0)}
        return SettingOutput(setting, rows, claims, spent, spill)

    def block(
        self, setting: Setting, cache: CacheLookups, start: int, questions: list[Question]
    ) -> tuple[list[SampleRow], list[ClaimRow]]:
        """One block of a setting's questions: compressed, generated in one engine batch, judged."""
        assert self.layout is not None and self.checker is not None  # warm() ran (checked by compute)
        name, generator = setting.name, self.comps.generator
        drafts = self.timed(
            f"compress:{name}", partial(self.prepare, setting, self.layout, cache.hits, questions, start)
        )
        # Each setting starts from the same cache state (only the stable prefix warm), so a setting never
        # profits from passages that an earlier setting happened to leave in the cache.
        cited = setting.output == "cited-json"
        # its own stage: the batch's requests finish one by one, and a stage whose count is full is closed
        batch = partial(self.tick, f"generate {name}")
        self.timed(f"generate:{name}", partial(generate_setting, drafts, generator, self.prefix, cited, batch))
        serve_hits(drafts, cache)
        # The likelihood verifier scores an answer under the plain prompt its card was fitted on; a cited-json
        # answer was written under another (the JSON instruction) and its text is extracted: left NULL.
        verifier = self.comps.verifier
        if cited and isinstance(verifier, AnswerVerifier):
            verifier = None
        claims = self.timed(
            f"faithfulness:{name}",
            partial(judge_drafts, drafts, self.checker, self.comps.judge, verifier),
        )
        return [d.row() for d in drafts], claims

    def cache_hits(self, threshold: float | None) -> CacheLookups:
        """Questions the semantic answer cache serves at `threshold` (none when the cache is off). The lookup
        embeds each question afresh (in front of retrieval it would be the first to), not from the
        embedder's recent-query memory.
        """
        if threshold is None:
            return CacheLookups({}, {})
        embedder = self.comps.embedder
        embed = getattr(embedder, "embed_query_uncached", embedder.embed_query)
        ids, texts = [q.id for q in self.questions], [q.question for q in self.questions]
        return cache_hits(ids, lambda i: embed(texts[i]), threshold, texts, question_guard(embedder.embed_query))

    def rank(self, mode: RetrievalMode, name: str) -> None:
        """`n_candidates` per question for retrieval `mode`, reranked by `name`: once per runner, mode and
        reranker; every setting takes a prefix of the same list. A question's candidates live only while it
        is reranked (their stored vectors are what the reranker reads), and the ranked list goes to disk
        without them: a sweep's memory does not grow with its question count.
        """
        if self.questions and self.ranked.has((mode, name, self.questions[0].id)):
            return
        stage = f"retrieve again ({name})" if mode in self.retrieved else "retrieve"
        self.retrieved.add(mode)
        for i, q in enumerate(self.questions, start=1):
            start = time.perf_counter()
            candidates = self.comps.retriever.retrieve(q.question, self.n_candidates, mode)
            retrieve_s = time.perf_counter() - start
            start = time.perf_counter()
            ranked = self.comps.rerankers[name].rerank(q.question, candidates)
            rerank_s = time.perf_counter() - start
            self.ranked.put((mode, name, q.id), ranked, retrieve_s, rerank_s)
            self.stages["retrieve"] = self.stages.get("retrieve", 0.0) + retrieve_s
            self.stages["rerank"] = self.stages.get("rerank", 0.0) + rerank_s
            self.tick(f"{stage} and rerank ({mode}, {name})", i, len(self.questions))
        self.ranked.commit()

    def prepare(
        self,
        setting: Setting,
        layout: PromptLayout,
        served: dict[str, CacheHit] | None = None,
        questions: list[Question] | None = None,
        offset: int = 0,
    ) -> list[SampleDraft]:
        """Compress and lay out `questions` (default: every question; `offset`: where they start, for the
        progress) of one setting (answer cache hits skip it); a failure is a failed sample, never a gap.
        """
        questions = self.questions if questions is None else questions
        compressor = self.comps.compressors[setting.compressor]
        stored = setting_json(setting, self.config.component_specs(setting))
        drafts: list[SampleDraft] = []
        instruction = CITED_INSTRUCTION if setting.output == "cited-json" else ""
        setting_hash, machine = self.config.setting_hash(setting), self.machine()
        for i, q in enumerate(questions, start=offset + 1):
            sample = _sample_key(self.run_id, setting, setting_hash, stored, q, machine)
            if served and q.id in served:  # answered from the cache: no retrieval, compression or prompt
                drafts.append(SampleDraft(key=sample, retrieval=RetrievalPart(), gold_docs=list(q.gold_doc_ids)))
                continue
            key = (setting.retrieval, setting.reranker, q.id)
            ranked, retrieve_s, rerank_s = self.ranked.get(key)
            hits = ranked[: setting.top_k]
            draft = SampleDraft(
                key=sample,
                retrieval=RetrievalPart(
                    retrieve_seconds=retrieve_s,
                    rerank_seconds=rerank_s,
                    **retrieval_scores(ranked, q.gold_doc_ids, setting.top_k),
                ),
            )
            drafts.append(draft)
            try:
                comp = compressor.compress([h.text for h in hits], q.question, setting.target_ratio)
            except Exception as exc:  # one bad sample is a failed row, not a lost sweep
                draft.compression = CompressionPart(context_chunk_ids=dumps([h.chunk_id for h in hits]))
                draft.fail("compress", exc)
                continue
            kept, order = kept_order(hits, comp, setting.layout)
            ids = [hits[kept[j]].chunk_id for j in order] if kept is not None else None  # NULL: unknown
            context, _ = lay_out(hits, comp, setting.layout)
            # A compressor that merged passages without saying which: the prompt's passages are still numbered
            # (a citation of one is valid), but their documents are unknown (no citation precision).
            draft.passage_docs = [hits[kept[j]].doc_id if kept is not None else None for j in order]
            draft.n_passages = len(order)
            draft.gold_docs = list(q.gold_doc_ids)
            realized = comp.ratio if comp.tokens_out else None
            draft.compression = CompressionPart(
                context_chunk_ids=dumps(ids) if ids is not None else None,
                context_text=context,
                context_tokens_in=comp.tokens_in,
                context_tokens_out=comp.tokens_out,
                realized_ratio=realized,
                ratio_gap=(realized - setting.target_ratio) / setting.target_ratio if realized else None,
                compress_seconds=comp.seconds,
                compress_calls=comp.calls,
                compress_cold_seconds=comp.seconds if comp.cold_seconds is None else comp.cold_seconds,
            )
            draft.prompt = layout.render(context, q.question, instruction)
            self.tick(f"compress {setting.name}", i, len(self.questions))
        compressor.flush()  # one LanceDB commit per block of questions, not one per passage
        return drafts


def _sample_key(
    run_id: str, setting: Setting, setting_hash: str, stored: str, q: Question, machine: tuple[str | None, str | None]
) -> SampleKey:
    return SampleKey(
        run_id=run_id,
        setting_hash=setting_hash,
        setting_name=setting.name,
        setting_json=stored,
        question_id=q.id,
        question=q.question,
        answerable=q.answerable,
        gold_answers=dumps(q.answers),
        hardware_sha256=machine[0],
        engine_precision=machine[1],
        **setting.model_dump(),  # the setting's fields as columns, as in `provenance.setting_rows`
    )
