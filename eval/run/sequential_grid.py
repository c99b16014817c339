"""The sequential recommendation: every candidate of the grid against the shipped setting, batch by batch,
Holm's step-down over the candidates' anytime-valid p-values at every look, and one recommendation.

Each look sweeps the next batch of unused questions (drawn in the fixed order `draw_order` sets before any
answer is seen) for the shipped setting and every candidate still open, one sweep run per batch pinned to one
index snapshot. Per candidate, the sequential gate's own tests (`eval.run.sequential_gate`: confidence
sequences of each deciding metric and of the paired end-to-end speed-up, the load check over the runs that
timed it) give its own verdict and its anytime-valid p-value (`eval.gate.family.sequential_p_value`:
1 / running maximum of each test's capital at the non-inferiority boundary, the largest over its deciding
tests). Then, at every look, Holm over all k candidates' current p-values at a = (1 - confidence) / 2:

- a candidate passes when its own tests pass AND Holm passes it; it then leaves the grid (no more batches);
- a candidate fails when its own tests fail (a worse metric, too slow, over the offline budget), and leaves
  the grid keeping the p-value it stopped with (k never shrinks);
- a candidate whose own tests could not give a verdict (a busy machine, halves that disagree, a failed
  question) stops undecided, with p-value 1 for what was blocked;
- the rest continue, until every candidate is decided or the budget is spent (then undecided).

Why this holds the family-wise error rate at a however many looks are taken: every p-value Holm reads at a
look is at least 1 / sup K of its test (a running maximum of the capital only rises; a stopped candidate's
is frozen; a refused latency verdict reads 1), and Holm is monotone, so a candidate passed at any look passes
under Holm applied to the p-values 1 / sup K, valid by Ville's inequality; Holm holds under any dependence
(the candidates share the shipped setting and the questions). A candidate passed at a look stays passed in
the recommendation. docs/sequential.md states it with its references; `benchmarks/gate_grid.py` measures it.

Latency probes are spent where the decision needs them: a candidate whose latency test has failed, or has
passed with a p-value that already clears Holm's strictest step (a / k), is timed in no later batch; the
shipped setting is timed while any open candidate still needs it, and a batch in which none does times nothing.

Every look of every candidate is stored (`gate_looks`, one sequence id per candidate), each candidate's
decision as a `gate_decisions` row, the recommendation and each candidate's verdict before and after the
adjustment in `recommendations` / `family_verdicts` (procedure `holm-anytime`) under the project's run. A killed
grid run again reads the batch runs its looks stored and sweeps only what is missing.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError, InputFileError
from corpus.models import Question
from eval.gate.decision import paired_arrays
from eval.gate.family import FamilyVerdict, family_verdicts, pass_level, sequential_p_value
from eval.gate.load_check import latency_column, latency_reasons, load_check
from eval.gate.policy import GatePolicy, SequentialPlan
from eval.gate.recommend import Recommendation, recommend_from, recommendation_rows
from eval.gate.sequential import SequentialLook, gate_capitals, refuse_unbounded, sequential_decision
from eval.gate.statistics import LatencyResult, MetricResult
from eval.metrics import DIRECTIONS
from eval.run.identity import run_identity
from eval.run.provenance import faithfulness_bar
from eval.run.runner import Progress
from eval.run.sequential_gate import (
    SequentialOutcome,
    _batch_file,
    _finish,
    _latest_looks,
    _look_rows,
    _quality_failed,
    _samples,
    _Sequence,
    _speedups,
    as_decision,
    draw_order,
)
from eval.run.sequential_request import SequentialGateRequest, _sequence_id
from eval.run.sweep import read_questions, run_sweep
from eval.run.wiring import Components, index_identity
from eval.settings import CompressionSpec, GridConfig, Setting, SweepConfig
from eval.store import DuckDBStore, Record

PROCEDURE = "holm-anytime"
"""`recommendations.procedure` of a sequential recommendation: Holm over anytime-valid p-values."""


class SequentialGridRequest(BaseModel):
    """Every other setting of a sweep config's grid against `shipped`, batch by batch until decided."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sweep: SweepConfig
    """What to compute with (its grid holds `shipped` and every candidate; its question file is the pool)."""
    shipped: str
    """The setting in production today: every candidate's baseline."""
    policy_path: Path
    """The gate policy; its `diagnostics` metrics are reported, not deciding (`GatePolicy.against_shipped`)."""
    run_id: str
    """The run the recommendation is stored under (the project's sweep run)."""
    seed: int = Field(default=0, ge=0)
    """Seeds the order the questions are drawn in."""
    report_dir: Path | None = None
    """Where each candidate's looks report goes (`sequential-<candidate>.md`)."""


@dataclass
class _Candidate:
    """One candidate's state across the looks."""

    setting: Setting
    sequence_id: str
    runs: list[str] = field(default_factory=list)
    """Batch runs that swept it."""
    timed: list[str] = field(default_factory=list)
    """Batch runs whose latency phase timed it."""
    state: str = "continue"
    """continue | pass | fail | undecided: where the grid stands on it (pass: after Holm)."""
    own: str = "continue"
    """Its own sequential verdict, before the adjustment."""
    p_value: float = 1.0
    adjusted_p: float = 1.0
    """Holm's adjusted p-value at the look the candidate was decided at (or the last look)."""
    latency_p: float = 1.0
    blocked: list[str] = field(default_factory=list)
    looks: dict[str, list[SequentialLook]] = field(default_factory=dict)
    samples: tuple[dict[str, Record], dict[str, Record], list[str], list[str]] = ({}, {}, [], [])
    speedups: dict[str, float] = field(default_factory=dict)


class GridOutcome(BaseModel):
    """What the sequential recommendation decided, and on what."""

    recommendation: Recommendation
    outcomes: dict[str, SequentialOutcome]
    """Each candidate's looks and decision (its `gate_decisions` row), by name."""
    runs: list[str]
    """The batch runs, in order."""
    n_questions: int
    """Questions drawn when the grid stopped (the shipped setting answered every one)."""


def cover_grid(settings: Sequence[Setting]) -> GridConfig:
    """The smallest grid of the config's form holding `settings`: each (compressor, ratio) at exactly the
    top-ks it has among them; the other axes their union (a setting outside `settings` is swept only when the
    settings differ in more than compression and top-k, where no product grid holds them alone).
    """
    specs: dict[tuple[str, float], set[int]] = {}
    for s in settings:
        specs.setdefault((s.compressor, s.target_ratio), set()).add(s.top_k)

    def union(attr: str) -> list:  # type: ignore[type-arg]
        return list(dict.fromkeys(getattr(s, attr) for s in settings))

    return GridConfig(
        compressions=[CompressionSpec(compressor=c, target_ratio=r, top_ks=sorted(ks)) for (c, r), ks in specs.items()],
        top_ks=sorted({s.top_k for s in settings}),
        rerankers=union("reranker"),
        retrievals=union("retrieval"),
        layouts=union("layout"),
        outputs=union("output"),
        answer_caches=union("answer_cache"),
    )


def run_sequential_grid(
    request: SequentialGridRequest,
    components: Components | None = None,
    progress: Progress | None = None,
    store: DuckDBStore | None = None,
) -> GridOutcome:
    """Sweep batch after batch until every candidate is decided against `shipped` (module doc), store every
    look and decision, and the recommendation under `request.run_id`.
    """
    policy = GatePolicy.load(request.policy_path).against_shipped()
    refuse_unbounded(policy)
    refusal = faithfulness_bar(request.sweep, policy)  # a deciding faithfulness metric needs a valid method
    if refusal:
        raise CribsheetError(f"policy {request.policy_path}: {refusal}")
    plan = policy.sequential or SequentialPlan()
    settings = {s.name: s for s in request.sweep.grid.expand()}
    if request.shipped not in settings:
        raise CribsheetError(f"shipped: {request.shipped} is not in the grid; known: {', '.join(sorted(settings))}")
    shipped = settings[request.shipped]
    others = sorted((s for s in settings.values() if s.name != shipped.name), key=lambda s: (s.top_k, s.name))
    if not others:
        raise CribsheetError(f"the grid holds no setting besides {shipped.name}: nothing to gate against it")
    read, read_sha256 = read_questions(request.sweep.model_copy(update={"limit": None}))
    pool = draw_order(read, request.seed)
    budget = min(plan.budget, len(pool))
    index = index_identity(request.sweep)
    config = request.sweep.model_copy(update={"index_version": index.version, "limit": None})
    run = run_identity(config, index)
    if run.questions_sha256 != read_sha256:
        raise InputFileError(config.questions_path, "changed while the gate started; run again once it is written")
    drawn = pool[:budget]
    ids = [_sequence_id(config, run, shipped, s, policy, plan, request.seed, drawn) for s in others]
    grid_id = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
    candidates = [
        _Candidate(s, hashlib.sha256(f"{grid_id}:{config.setting_hash(s)}".encode()).hexdigest()) for s in others
    ]
    store = store or DuckDBStore(config.store_path)
    stored: dict[int, str] = {}
    failed_looks: set[int] = set()
    for c in candidates:
        for look in store.looks(c.sequence_id):
            if look.n_failed:
                failed_looks.add(look.look)
            else:
                stored[look.look] = look.run_id
    # A look at which any candidate had a failed question is swept again, as the single gate does.
    stored = {look: run_id for look, run_id in stored.items() if look not in failed_looks}
    owned = components is None
    if owned:  # one engine for every batch
        from eval.run.wiring import build_components

        components = build_components(config, [shipped, *others])
    grid = _Grid(request, policy, plan, config, drawn, grid_id, store, shipped, candidates)
    try:
        return grid.run(stored, components, progress)
    finally:
        if owned and components is not None:
            components.close()


@dataclass(frozen=True)
class _Grid:
    """One sequential grid: what it computes with, the questions it draws from, where it stores."""

    request: SequentialGridRequest
    policy: GatePolicy
    plan: SequentialPlan
    config: SweepConfig
    drawn: list[Question]
    grid_id: str
    store: DuckDBStore
    shipped: Setting
    candidates: list[_Candidate]

    @property
    def level(self) -> float:
        return pass_level(self.policy)

    def run(self, stored: dict[int, str], components: Components | None, progress: Progress | None) -> GridOutcome:
        """The loop over batches: sweep the next one for the open candidates unless stored, look, adjust."""
        tick = progress or (lambda stage, done, total: None)
        config, plan, store = self.config, self.plan, self.store
        folder = config.store_path.parent / "sequential" / self.grid_id[:16]
        runs: list[str] = []
        last = math.ceil(len(self.drawn) / plan.batch)
        n_drawn = 0
        for look in range(1, last + 1):
            open_ = [c for c in self.candidates if c.state == "continue"]
            if not open_:
                break
            batch = self.drawn[(look - 1) * plan.batch : look * plan.batch]
            timed = [c for c in open_ if self._needs_timing(c)]
            run_id = stored.get(look)
            if run_id is None or store.run_meta(run_id).status != "ok":
                stage = f"sequential recommendation: batch {look} ({len(batch)} questions, {len(open_)} open)"
                tick(stage, 0, 1)
                batch_config = config.model_copy(
                    update={
                        "grid": cover_grid([self.shipped, *(c.setting for c in open_)]),
                        "questions_path": _batch_file(folder, look, batch),
                        "probe_questions": min(len(batch), plan.probes or len(batch)) if timed else 0,
                    }
                )
                names = {self.shipped.name, *(c.setting.name for c in timed)}
                run_id = run_sweep(batch_config, components, progress, timed=names).run_id
                tick(stage, 1, 1)
            runs.append(run_id)
            n_drawn = min(len(self.drawn), look * plan.batch)
            for c in open_:
                c.runs.append(run_id)
                if c in timed:
                    c.timed.append(run_id)
                self._look(c, [q.id for q in self.drawn[:n_drawn]])
            self._adjust(final=look == last)
            latency = self.policy.latency.metric if self.policy.latency else None
            for c in open_:
                store.add_look(_look_rows(c.sequence_id, look, run_id, c.looks, c.state, len(c.samples[3]), latency))
            decided = sum(c.state != "continue" for c in self.candidates)
            tick(f"sequential recommendation: look {look}, {n_drawn} questions: {decided} decided", 1, 1)
        for c in self.candidates:  # the budget spent (or no batch left): what is still open is undecided
            if c.state == "continue":
                c.state = "undecided"
        return self._finish(runs, n_drawn)

    def _needs_timing(self, c: _Candidate) -> bool:
        """Whether a later batch must time `c`: the policy gates latency, and its test has neither failed nor
        passed with a p-value that already clears Holm's strictest step (a / k).
        """
        lat = self.policy.latency
        if lat is None:
            return False
        seq = c.looks.get(lat.metric)
        verdict = seq[-1].verdict if seq else "continue"
        if verdict == "fail" and not c.blocked:
            return False
        # A pass needs the test's own verdict (min_probes reached, no clipped pair) as well as the p-value: a
        # p-value under a / k with too few probes would freeze a latency test that can never pass.
        return not (verdict == "pass" and not c.blocked and c.latency_p <= self.level / len(self.candidates))

    def _look(self, c: _Candidate, drawn: list[str]) -> None:
        """The candidate's own tests over every question and timed probe so far: its looks, own verdict,
        anytime-valid p-value (1 for a latency test the load check blocks).
        """
        policy, plan = self.policy, self.plan
        hb, hc = self.config.setting_hash(self.shipped), self.config.setting_hash(c.setting)
        base, cand, ids, failed = _samples(self.store, c.runs, drawn, self.shipped.name, c.setting.name)
        column = latency_column(policy.latency.metric) if policy.latency else "e2e_live_s"
        speedups = _speedups(self.store, c.timed, hb, hc, column) if policy.latency else {}
        looks = _latest_looks(base, cand, ids, policy, plan, speedups)
        own = sequential_decision(looks, policy)
        blocked: list[str] = []
        if policy.latency and c.timed:
            reasons, failing = latency_reasons(load_check(self.store, c.timed, hb, hc, column, policy), policy.latency)
            blocked = reasons + failing
            if failing:
                own = "fail"
            elif reasons and own != "continue":
                own = "fail" if _quality_failed(looks, policy) else "undecided"
        if failed:
            own = "undecided"
        pairs = {k: v for k, v in paired_arrays(base, cand, ids, policy).items() if len(v[0])}
        if policy.latency and speedups:
            ratios = np.array([speedups[q] for q in ids if q in speedups], dtype=float)
            pairs[policy.latency.metric] = (ratios, np.ones_like(ratios))
        capitals = gate_capitals(pairs, policy, plan)
        p = sequential_p_value(capitals, policy)
        latency_p = 1.0
        if policy.latency and policy.latency.metric in capitals:
            only = policy.model_copy(update={"metrics": []})
            latency_p = sequential_p_value({policy.latency.metric: capitals[policy.latency.metric]}, only)
        if blocked:  # a latency verdict the load check refuses is no evidence
            p, latency_p = 1.0, 1.0
        c.looks, c.own, c.p_value, c.latency_p, c.blocked = looks, own, p, latency_p, blocked
        c.samples, c.speedups = (base, cand, ids, failed), speedups

    def _adjust(self, final: bool) -> None:
        """Holm over every candidate's p-value now: the open ones whose own tests pass and Holm passes are
        passed; an own fail or undecided stops the candidate; at the last look the rest are undecided.
        """
        from eval.gate.family import CandidateResult

        open_verdict = {"continue": "continue", "pass": "pass", "fail": "fail", "undecided": "undecided"}
        family = family_verdicts(
            [
                CandidateResult(
                    name=c.setting.name,
                    p_value=c.p_value,
                    verdict=open_verdict[c.own] if c.state == "continue" else c.state,  # type: ignore[arg-type]
                )
                for c in self.candidates
            ],
            self.level,
            held="continue",
        )
        for c, f in zip(self.candidates, family, strict=True):
            if c.state != "continue":
                continue
            c.adjusted_p = f.adjusted_p  # a passed candidate keeps the adjusted p-value it passed at
            if f.adjusted_verdict in ("pass", "fail", "undecided"):
                c.state = f.adjusted_verdict
            elif final:
                c.state = "undecided"

    def _finish(self, runs: list[str], n_drawn: int) -> GridOutcome:
        """Each candidate's decision row and report, the recommendation and the family's verdicts."""
        request, policy = self.request, self.policy
        outcomes: dict[str, SequentialOutcome] = {}
        decisions = []
        for c in self.candidates:
            name = c.setting.name
            report = request.report_dir / f"sequential-{name}.md" if request.report_dir else None
            pair = SequentialGateRequest(
                sweep=self.config, baseline=self.shipped.name, candidate=name, policy_path=request.policy_path,
                plan=self.plan, seed=request.seed, report_path=report,
            )  # fmt: skip
            gate = _Sequence(pair, policy, self.plan, self.config, self.drawn, c.sequence_id, self.store,
                             self.shipped, c.setting)  # fmt: skip
            base, cand, ids, failed = c.samples
            extra = [f"{len(failed)} question(s) failed in a setting (e.g. {failed[:3]}); rerun before gating"]
            extra = (extra if failed else []) + c.blocked
            if c.own == "pass" and c.state != "pass":
                extra.append(
                    f"passed alone (p {c.p_value:.4f}) but not across the grid: Holm-adjusted p {c.adjusted_p:.4f} "
                    f"above the family-wise level {self.level:.4f} over {len(self.candidates)} candidates"
                )
            outcome = _finish(gate, c.state, c.runs, base, cand, ids, extra)
            outcomes[name] = outcome
            decision = as_decision(outcome, policy, self.shipped.name, name)
            decisions.append(decision.model_copy(update={"metrics": self._metrics(c), "latency": self._latency(c)}))
        # The family as the looks left it: a candidate Holm passed at some look stays passed (each p-value it
        # was compared with was at least 1 / sup K, a valid p-value, and Holm is monotone), whatever later
        # looks did to the others' p-values (a latency verdict refused later is 1).
        rec = recommend_from(request.run_id, self.shipped.name, decisions, self._family(), self.level)
        chosen = rec.recommended or min(
            (c.setting.name for c in self.candidates if c.state == "undecided"),
            key=lambda name: _fixed_n(outcomes[name]) or 10**9,
            default=None,
        )
        rec = rec.model_copy(
            update={
                "procedure": PROCEDURE,
                "n_questions": n_drawn,
                "fixed_n_questions": _fixed_n(outcomes[chosen]) if chosen else None,
            }
        )
        self.store.add_recommendation(*recommendation_rows(rec))
        return GridOutcome(recommendation=rec, outcomes=outcomes, runs=runs, n_questions=n_drawn)

    def _family(self) -> list[FamilyVerdict]:
        """Each candidate's verdicts as the looks left them: its own (before the adjustment) and its state (after
        it), with the Holm-adjusted p-value of the look that decided it.
        """
        return [
            FamilyVerdict(
                name=c.setting.name,
                p_value=c.p_value,
                verdict=c.own if c.own != "continue" else "undecided",  # type: ignore[arg-type]
                adjusted_p=c.adjusted_p,
                adjusted_verdict=c.state if c.state != "continue" else "undecided",  # type: ignore[arg-type]
            )
            for c in self.candidates
        ]

    def _metrics(self, c: _Candidate) -> list[MetricResult]:
        """Each policy metric's latest look as a `MetricResult` (its bounds: the anytime confidence sequence)."""
        base, cand, ids, _ = c.samples
        pairs = paired_arrays(base, cand, ids, self.policy)
        out = []
        for rule in self.policy.metrics:
            seq = c.looks.get(rule.name)
            if not seq or rule.name not in pairs:
                continue
            last = seq[-1]
            b, k = pairs[rule.name][0][: last.n], pairs[rule.name][1][: last.n]  # the pairs the look read
            verdict = last.verdict if last.verdict != "continue" else "undecided"
            out.append(
                MetricResult(
                    name=rule.name,
                    higher_is_better=DIRECTIONS.get(rule.name, True),
                    n=last.n,
                    baseline_mean=float(np.mean(b)),
                    candidate_mean=float(np.mean(k)),
                    diff=last.estimate,
                    ci_low=last.lower,
                    ci_high=last.upper,
                    margin=rule.margin,
                    advisory=rule.advisory,
                    verdict=verdict,
                )  # fmt: skip
            )
        return out

    def _latency(self, c: _Candidate) -> LatencyResult | None:
        """The latency test's latest look as a `LatencyResult` (None: no latency rule, or never timed)."""
        lat = self.policy.latency
        seq = c.looks.get(lat.metric) if lat else None
        if lat is None or not seq:
            return None
        last = seq[-1]
        return LatencyResult(
            metric=lat.metric, n=last.n, speedup=last.estimate, ci_low=last.lower, ci_high=last.upper,
            min_speedup=lat.min_speedup, verdict=last.verdict if last.verdict != "continue" else "undecided",
            estimand="geometric mean of per-question paired ratios (anytime confidence sequence)",
        )  # fmt: skip


def _fixed_n(outcome: SequentialOutcome) -> int | None:
    """Paired questions a fixed-n design with 80 % power would need for this candidate: the largest over its
    deciding metrics (None: unknown).
    """
    needs = [n for n in outcome.fixed_n.values() if n]
    return max(needs) if needs else None


__all__ = ["PROCEDURE", "GridOutcome", "SequentialGridRequest", "cover_grid", "run_sequential_grid"]
