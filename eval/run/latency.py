"""The latency phase: every setting of a run timed back to back, per probe question, live.

After the grid's answers are computed (or reused), each probe question gets `probe_repeats` blocks. A block
holds one request per setting, and a second one per baseline (the A/A twin), in a seeded random order; each
request runs alone (cache reset, stable prefix warmed again) and is timed whole in its slot: retrieval,
reranking, the compressor computing this context as a first request would (its caches emptied: a
query-agnostic compressor runs its model for this request, unless `cribsheet precompress` compressed the
whole index, a recorded step whose bill is shown beside the figure) and vLLM's TTFT. No stored duration is
added to a live one. Because two settings' requests for one question sit in the same block, a change of
load between settings hits both, and their ratio stays put; the A/A twin shows that the order and position
of a request in its block bias nothing.

The phase runs every question's first block, then every question's second, and so on, so the first half of
the phase in time and the second hold the same questions: their ratios, compared per question, are the
split-half drift check. Each slot records the CPU time other processes used while it ran (`LoadMeter`).
The phase is resumable (one question's block is one transaction) and runs on one engine; on Ray each worker
measures every setting of its own share of the probe questions.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corpus.models import Hit, Question
from eval.compress.base import CompressionResult, uncached
from eval.prompt import arrange, context_block
from eval.run.citations import CITED_INSTRUCTION, cited_schema
from eval.run.generation import reset_and_warm
from eval.run.load import LoadMeter
from eval.run.wiring import Components
from eval.settings import Setting
from eval.store.rows import LatencySlotRow

Tick = Callable[[str, int, int], None]


def probe_questions(questions: Sequence[Question], n: int) -> list[Question]:
    """The probe sample: the `n` questions with the lowest sha256 of their id (the same in every process), in
    that order.
    """
    return sorted(questions, key=lambda q: hashlib.sha256(q.id.encode()).hexdigest())[:n]


def baseline_indices(settings: Sequence[Setting]) -> list[int]:
    """Indices of the uncompressed settings: the ones with an A/A twin in every block."""
    return [i for i, s in enumerate(settings) if s.compressor == "none"]


def block_order(
    n_settings: int, baselines: Sequence[int], question_id: str, repeat: int, seed: int
) -> list[tuple[int, int]]:
    """(setting index, twin) in the order one block measures them: every setting once (twin 0), every
    baseline a second time (twin 1), shuffled by a seed of (seed, question, repeat) (the same in every process).
    """
    entries = [(i, 0) for i in range(n_settings)] + [(i, 1) for i in baselines]
    random.Random(f"{seed}\x1f{question_id}\x1f{repeat}").shuffle(entries)
    return entries


def kept_order(hits: Sequence[Hit], comp: CompressionResult, layout: str) -> tuple[list[int] | None, list[int]]:
    """Which input passage each compressed text came from (None: unknown) and the prompt order of the texts."""
    kept = comp.kept if comp.kept is not None else (list(range(len(hits))) if len(comp.texts) == len(hits) else None)
    return kept, arrange(len(comp.texts), layout)


def lay_out(hits: Sequence[Hit], comp: CompressionResult, layout: str) -> tuple[str, int]:
    """The context block of a compressed context in its layout, and the number of passages it numbers."""
    kept, order = kept_order(hits, comp, layout)
    titles = [hits[kept[j]].heading for j in order] if kept is not None else [""] * len(order)
    return context_block(titles, [comp.texts[j] for j in order]), len(order)


@dataclass
class LiveRequest:
    """One setting's whole request for one question, computed and timed now."""

    comps: Components
    layout: Any
    """The run's `PromptLayout`."""
    prefix: str
    n_candidates: int
    precomputed: frozenset[tuple[str, float]] = frozenset()
    """(compressor, ratio) pairs whose compressions of the whole index snapshot a recorded precompute step made
    (`eval.run.precompute`): their requests read them. Every other compressor computes its context live."""

    def reads_precomputed(self, setting: Setting) -> bool:
        """Whether the setting's requests read a recorded precompute step's compressions."""
        return (setting.compressor, setting.target_ratio) in self.precomputed

    def measure(self, setting: Setting, question: Question, cache_hit: bool) -> dict[str, Any]:
        """The slot's timings (seconds) and token counts; raises on a failure of the request."""
        comps = self.comps
        reset_and_warm(comps.generator, self.prefix)  # not timed: every request finds only the prefix cached
        forget = getattr(comps.embedder, "forget_query", None)
        if callable(forget):  # a first request embeds its question; the sweep's answers phase left it cached
            forget(question.question)
        parts: dict[str, Any] = {}
        start = time.perf_counter()
        if setting.answer_cache is not None:
            # Embedded once, as a first request does: the retrieval below reads this embedding (the query
            # memory was cleared above), never a second computation of it.
            comps.embedder.embed_query(question.question)
            if cache_hit:  # served from the answer cache: the lookup is the whole request
                parts["e2e_live_s"] = time.perf_counter() - start
                return parts
        t0 = time.perf_counter()
        hits = comps.retriever.retrieve(question.question, self.n_candidates, setting.retrieval)
        t1 = time.perf_counter()
        ranked = comps.rerankers[setting.reranker].rerank(question.question, hits)[: setting.top_k]
        t2 = time.perf_counter()
        compressor = uncached(comps.compressors[setting.compressor], self.reads_precomputed(setting))
        comp = compressor.compress([h.text for h in ranked], question.question, setting.target_ratio)
        context, n_passages = lay_out(ranked, comp, setting.layout)
        cited = setting.output == "cited-json"
        prompt = self.layout.render(context, question.question, CITED_INSTRUCTION if cited else "")
        t3 = time.perf_counter()
        probe = comps.generator.probe(prompt, cited_schema(n_passages)) if cited else comps.generator.probe(prompt)
        if probe.ttft_s is None:
            raise RuntimeError("the engine reported no time to first token (run vLLM with disable_log_stats=False)")
        parts |= dict(
            retrieve_s=t1 - t0,
            rerank_s=t2 - t1,
            compress_s=t3 - t2,
            ttft_s=probe.ttft_s,
            prefill_s=probe.prefill_s,
            decode_s=probe.decode_s,
            prompt_tokens=probe.prompt_tokens,
            cached_tokens=probe.cached_tokens,
            offline_s=comp.offline_seconds,
            e2e_live_s=(t3 - start) + probe.ttft_s,
        )
        return parts


@dataclass
class LatencyPhase:
    """Measures the latency of every setting of a run on its probe questions (see the module docstring)."""

    request: LiveRequest
    settings: list[Setting]
    hashes: list[str]
    """`settings`' hashes, in the same order."""
    run_id: str
    repeats: int
    seed: int
    measured_on: str | None = None
    session_id: str = ""
    tick: Tick = lambda stage, done, total: None
    meter: LoadMeter = field(default_factory=LoadMeter)

    def __post_init__(self) -> None:
        self.session_id = self.session_id or uuid.uuid4().hex[:12]

    @property
    def baselines(self) -> list[int]:
        """Indices of the settings without compression: each is measured twice per block (the A/A twin)."""
        return baseline_indices(self.settings)

    def warm_up(self, question: Question) -> None:
        """One discarded request per setting, so loading a model, a lazy index or the allocator's first growth
        is billed to no slot.
        """
        for setting in self.settings:
            try:
                self.request.measure(setting, question, cache_hit=False)
            except Exception:  # the slot that fails for real is stored as failed below
                pass

    def block(self, question: Question, repeat: int, hits: set[tuple[str, str]]) -> list[LatencySlotRow]:
        """One block of one probe question (its `repeat`-th), as slot rows."""
        rows: list[LatencySlotRow] = []
        order = block_order(len(self.settings), self.baselines, question.id, repeat, self.seed)
        for position, (i, twin) in enumerate(order):
            setting, setting_hash = self.settings[i], self.hashes[i]
            at = dt.datetime.now(dt.UTC)
            mark, began = self.meter.start(), time.perf_counter()
            try:
                parts = self.request.measure(setting, question, (setting_hash, question.id) in hits)
                status, error = "ok", None
            except Exception as exc:  # one failed request is a failed slot, never a gap
                parts, status, error = {}, "failed", f"{type(exc).__name__}: {exc}"[:2000]
            slot_s = time.perf_counter() - began
            foreign = self.meter.foreign(mark)
            rows.append(
                LatencySlotRow(
                    run_id=self.run_id,
                    session_id=self.session_id,
                    setting_hash=setting_hash,
                    setting_name=setting.name,
                    question_id=question.id,
                    repeat=repeat,
                    position=position,
                    twin=twin,
                    measured_at=at,
                    status=status,
                    error=error,
                    hardware_sha256=self.measured_on,
                    slot_s=slot_s,
                    foreign_cpu_s=foreign,
                    cores=self.meter.cores,
                    precomputed=self.request.reads_precomputed(setting) or None,
                    **parts,
                )
            )
        return rows

    def run(
        self,
        questions: Sequence[Question],
        hits: set[tuple[str, str]],
        write: Callable[[list[LatencySlotRow]], None],
        done: set[tuple[str, int]] = frozenset(),  # type: ignore[assignment]
    ) -> int:
        """Measure every (question, repeat) block not in `done`: every question's first block, then every
        question's second, ..., writing each block as it is finished; returns the blocks measured now.
        """
        todo = [(q, r) for r in range(self.repeats) for q in questions if (q.id, r) not in done]
        if todo:
            self.warm_up(todo[0][0])
        total = self.repeats * len(questions)
        for n, (question, repeat) in enumerate(todo, start=total - len(todo) + 1):
            write(self.block(question, repeat, hits))
            self.tick(f"latency ({len(self.settings)} settings x {self.repeats})", n, total)
        return len(todo)


@dataclass
class NoiseFloor:
    """The run's A/A figure: each baseline's first twin over its second, per probe question, pooled."""

    ratio: float
    ci_low: float
    ci_high: float
    n: int


def noise_floor(store: Any, run_id: str, baseline_hashes: Sequence[str], confidence: float = 0.95) -> NoiseFloor | None:
    """The A/A ratio of a run with its Student t interval over probe questions (the gate's unit): per question,
    the geometric mean of its baselines' twin ratios, then the geometric mean over questions. None when no
    baseline was measured twice.
    """
    import math

    from eval.store.load_figures import geometric_t_interval

    per_question: dict[str, list[float]] = {}
    for h in baseline_hashes:
        for q, r in store.slot_pairs(run_id, h, 0, run_id, h, 1).items():
            per_question.setdefault(q, []).append(math.log(r))
    ratios = [math.exp(sum(v) / len(v)) for v in per_question.values()]
    if len(ratios) < 2:
        return None
    ratio, low, high = geometric_t_interval(ratios, confidence)
    return NoiseFloor(ratio, low, high, len(ratios))


def measure_run(
    store: Any,
    phase: LatencyPhase,
    questions: Sequence[Question],
    owner: tuple[int, str] | None = None,
) -> tuple[int, NoiseFloor | None]:
    """The latency phase of one run in this process: the blocks not yet stored, then each probe question's
    latency summarised into its sample rows and the run's A/A twins. Returns (blocks measured now,
    the A/A figure).
    """
    done = store.measured_blocks(phase.run_id, phase.hashes)
    hits = store.cache_hit_pairs(phase.run_id)
    measured = phase.run(questions, hits, lambda rows: store.add_slots(rows, owner), done)
    store.summarise_latency(phase.run_id, owner)
    return measured, noise_floor(store, phase.run_id, [phase.hashes[i] for i in phase.baselines])
