"""One recommendation per run: every other setting of the grid gated against the setting shipped today (the
project's `shipped:`), Holm's adjustment across them, and which one to ship.

The question a release engineer asks is "may this replace what ships, and if several may, which?". Each
candidate is gated against `shipped` with the run's policy, except that the metrics the policy lists as
`diagnostics` are reported, not deciding (`GatePolicy.against_shipped`): fewer passages hold fewer of the
reference's words by construction, so an input measure such as context_token_recall would fail a smaller
top-k whose answers are as good. Each candidate's one-sided p-value (`family.fixed_p_value`, from the same
rows, policy and paired speed-ups its decision read) enters Holm's step-down over all k candidates, failed
and undecided ones included (`family.family_verdicts`), so the chance of passing ANY candidate that is in
truth worse than a margin is held at (1 - confidence) / 2 over the whole grid.

The recommendation: among the candidates that pass after the adjustment, the one with the highest paired
end-to-end speed-up against `shipped` ("ship"); none passes and one could not decide (a pass Holm holds
back counts as undecided): "undecided"; else "keep" shipping `shipped`. The chosen candidate's figures are
those of the fastest of several that passed, so they are optimistic (the winner's curse); the line says so.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from eval.gate.decision import GateDecision, paired_arrays
from eval.gate.family import CandidateResult, FamilyVerdict, family_verdicts, fixed_p_value, pass_level
from eval.gate.policy import GatePolicy, GateRequest
from eval.gate.run import paired_latency, run_gate
from eval.gate.statistics import MetricResult
from eval.store import DuckDBStore, SettingRef
from eval.store.rows import FamilyVerdictRow, RecommendationRow

PROCEDURE = "holm"
"""How the family-wise error rate is held across the grid (`eval.gate.family`)."""

RECOMMENDATION_EXIT = {"ship": 0, "keep": 0, "undecided": 2}
"""`cribsheet run`'s exit code when the project names `shipped:`."""


class Recommendation(BaseModel):
    """A run's one answer to "what should ship?", with every candidate's verdict behind it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    shipped: str
    """The setting in production today: every candidate's baseline."""
    verdict: Literal["ship", "keep", "undecided"]
    recommended: str | None = None
    """The candidate to ship (None: keep, or undecided)."""
    level: float
    """The family-wise false-pass level, (1 - confidence) / 2."""
    decisions: list[GateDecision] = Field(default_factory=list)
    """Each candidate against `shipped`, unadjusted, in the grid's order."""
    family: list[FamilyVerdict] = Field(default_factory=list)
    """Each candidate's verdict and p-value before and after Holm's adjustment, in the same order."""
    reasons: list[str] = Field(default_factory=list)
    procedure: str = PROCEDURE
    """`holm` (fixed-n p-values of one sweep) or `holm-anytime` (anytime-valid p-values, batch by batch)."""
    n_questions: int | None = None
    """Sequential: questions drawn when the grid stopped (None: the fixed-n sweep's questions)."""
    fixed_n_questions: int | None = None
    """Sequential: paired questions a fixed-n design with 80 % power would need, from the differences seen (the
    largest over the candidates' deciding metrics; None: unknown)."""
    created_at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))

    @property
    def exit_code(self) -> int:
        """0 when the grid decided (ship or keep), 2 when it could not."""
        return RECOMMENDATION_EXIT[self.verdict]

    @property
    def chosen(self) -> GateDecision | None:
        """The recommended candidate's decision against `shipped`."""
        return next((d for d in self.decisions if d.candidate == self.recommended), None)

    def line(self) -> str:
        """The one line `cribsheet run` ends with."""
        k = len(self.family)
        family = f"Holm across {k} candidate{'s' if k != 1 else ''}, family-wise level {self.level:.1%}"
        if self.procedure == "holm-anytime":
            family = f"anytime-valid {family}, sequential: {self.n_questions} questions drawn" + (
                f"; a fixed-n design would need ~{self.fixed_n_questions}" if self.fixed_n_questions else ""
            )
        if self.verdict == "ship":
            d = self.chosen
            assert d is not None
            passed = sum(f.adjusted_verdict == "pass" for f in self.family)
            figures = _figures(d, anytime=self.procedure == "holm-anytime")
            which = "the fastest" if d.latency is not None else "the first in the grid's order (no speed-up to rank)"
            return (
                f"recommendation: ship {self.recommended} instead of {self.shipped}"
                + (f" ({figures})" if figures else "")
                + f"; {which} of {passed} that passed ({family}): figures after selection are optimistic "
                "(winner's curse)"
            )
        if self.verdict == "keep":
            return f"recommendation: keep shipping {self.shipped}: no candidate passed against it ({family})"
        held = [f.name for f in self.family if f.verdict == "pass" and f.adjusted_verdict != "pass"]
        open_ = [f.name for f in self.family if f.verdict == "undecided"]
        parts = []
        if held:
            parts.append(f"{', '.join(held)} passed alone but not across the grid")
        if open_:
            more = _questions_to_decide([d for d in self.decisions if d.candidate in open_])
            parts.append(f"{len(open_)} could not decide" + (f" (~{more} paired questions would decide one)"
                                                            if more else ""))  # fmt: skip
        return f"recommendation: undecided against {self.shipped}: {'; '.join(parts)} ({family})"


def _figures(d: GateDecision, anytime: bool = False) -> str:
    """The chosen candidate's speed-up and answer metric against `shipped`, with their intervals (`anytime`:
    the sequential gate's confidence-sequence bounds at the look that decided, so labelled).
    """
    out = []
    bounds = "anytime bounds " if anytime else ""
    if d.latency is not None:
        lat = d.latency
        out.append(f"{lat.speedup:.2f}x as fast end to end [{bounds}{lat.ci_low:.2f}, {lat.ci_high:.2f}]")
    answer = answer_result(d)
    if answer is not None:
        out.append(f"{answer.name} {answer.diff:+.3f} [{bounds}{answer.ci_low:+.3f}, {answer.ci_high:+.3f}]")
    return ", ".join(out)


def answer_result(d: GateDecision) -> MetricResult | None:
    """The answer metric reported beside the speed-up: the first deciding metric named answer_*, else the
    first deciding one.
    """
    deciding = [m for m in d.metrics if not m.advisory]
    return next((m for m in deciding if m.name.startswith("answer")), deciding[0] if deciding else None)


def _questions_to_decide(decisions: Sequence[GateDecision]) -> int | None:
    """The fewest paired questions that would decide one of these undecided candidates (None: unknown)."""
    needs = []
    for d in decisions:
        known = [m.n_to_decide for m in d.metrics if not m.advisory and m.n_to_decide is not None]
        if known:
            needs.append(max(known))  # every undecided metric must be decided
    return min(needs) if needs else None


def recommend(
    run_id: str,
    shipped: str,
    decisions: Sequence[GateDecision],
    p_values: Mapping[str, float],
    policy: GatePolicy,
) -> Recommendation:
    """The recommendation from each candidate's decision against `shipped` and its p-value: Holm over all of
    them at `pass_level(policy)`, then the fastest that passes (module doc).
    """
    level = pass_level(policy)
    verdicts = {d.candidate: d.decision for d in decisions}
    return recommend_from(run_id, shipped, decisions, _holm(decisions, p_values, verdicts, level), level)


def _holm(
    decisions: Sequence[GateDecision], p_values: Mapping[str, float], verdicts: Mapping[str, str], level: float
) -> list[FamilyVerdict]:
    """Holm's step-down over every candidate's p-value, in the decisions' order."""
    return family_verdicts(
        [
            CandidateResult(name=d.candidate, p_value=p_values[d.candidate], verdict=verdicts[d.candidate])  # type: ignore[arg-type]
            for d in decisions
        ],
        level,
    )


def recommend_from(
    run_id: str, shipped: str, decisions: Sequence[GateDecision], family: Sequence[FamilyVerdict], level: float
) -> Recommendation:
    """The recommendation from each candidate's decision and its verdicts before and after the adjustment:
    the fastest that passed after it ("ship"), else "undecided" when one could not decide, else "keep".
    """
    family = list(family)
    by_name = {d.candidate: d for d in decisions}
    passed = [f.name for f in family if f.adjusted_verdict == "pass"]
    reasons = [
        f"{f.name}: {f.verdict} alone (p {f.p_value:.4f}), {f.adjusted_verdict} across the grid "
        f"(Holm-adjusted p {f.adjusted_p:.4f}, level {level:.4f})"
        for f in family
    ]
    if passed:
        fastest = max(passed, key=lambda name: _speedup(by_name[name]))
        return Recommendation(run_id=run_id, shipped=shipped, verdict="ship", recommended=fastest, level=level,
                              decisions=list(decisions), family=family, reasons=reasons)  # fmt: skip
    verdict: Literal["keep", "undecided"] = (
        "undecided" if any(f.adjusted_verdict == "undecided" for f in family) else "keep"
    )
    return Recommendation(run_id=run_id, shipped=shipped, verdict=verdict, level=level, decisions=list(decisions),
                          family=family, reasons=reasons)  # fmt: skip


def _speedup(d: GateDecision) -> float:
    """A candidate's paired end-to-end speed-up against `shipped` (no latency verdict: ranks last)."""
    return d.latency.speedup if d.latency is not None else float("-inf")


def _speedup_or_none(d: GateDecision) -> float | None:
    return d.latency.speedup if d.latency is not None else None


def candidate_p_value(
    store: DuckDBStore, base: SettingRef, cand: SettingRef, policy: GatePolicy, latency_decided: bool = True
) -> float:
    """A candidate's fixed-n p-value against `base`, from the rows, paired speed-ups and policy its decision
    read (`run_gate`: the questions in id order, the latency phase's per-question ratios of one run). With
    `latency_decided` False (the gate gave no latency verdict: a busy machine, halves that disagree, a biased
    A/A, too few probes) the latency test gives 1: evidence the load check refused must not rank a candidate
    first and relax Holm's steps for the others.
    """
    base_rows, cand_rows = store.paired_samples(base, cand)
    ids = sorted(set(base_rows) & set(cand_rows))
    pairs = paired_arrays(base_rows, cand_rows, ids, policy)
    speedups = None
    if policy.latency and not latency_decided:
        speedups = np.zeros(0)
    elif policy.latency:
        ratios, _, _ = paired_latency(store, base, cand, policy)
        if ratios is not None:
            speedups = np.array([ratios[q] for q in ids if q in ratios], dtype=float)
    return fixed_p_value(pairs, policy, speedups)


def gate_against_shipped(store: DuckDBStore, run_id: str, policy_path: Path, shipped: str) -> Recommendation:
    """Gate every other setting of the run against `shipped` (a decision row each, the policy's diagnostics
    advisory), adjust across them, store the recommendation and each candidate's verdicts, return them.
    """
    policy = GatePolicy.load(policy_path).against_shipped()
    shipped_ref = store.resolve_setting(shipped, run_id)
    decisions: list[GateDecision] = []
    p_values: dict[str, float] = {}
    rows = sorted(store.leaderboard(run_id), key=lambda r: (r["top_k"], r["setting_name"]))
    for r in rows:
        if r["setting_hash"] == shipped_ref.setting_hash:
            continue
        request = GateRequest(
            store_path=store.path, baseline=shipped, candidate=r["setting_name"], policy_path=policy_path, run=run_id
        )
        decision = run_gate(request, policy=policy, store=store)
        cand_ref = SettingRef(run_id=run_id, setting_hash=r["setting_hash"], setting_name=r["setting_name"])
        decisions.append(decision)
        decided = decision.latency is not None and decision.latency.verdict in ("pass", "fail")
        p_values[decision.candidate] = candidate_p_value(store, shipped_ref, cand_ref, decision.policy, decided)
    rec = recommend(run_id, shipped, decisions, p_values, policy)
    store.add_recommendation(*recommendation_rows(rec))
    return rec


def recommendation_rows(rec: Recommendation) -> tuple[RecommendationRow, list[FamilyVerdictRow]]:
    """The `recommendations` row and the `family_verdicts` rows of a recommendation."""
    d = rec.chosen
    lat = d.latency if d is not None else None
    answer = answer_result(d) if d is not None else None
    row = RecommendationRow(
        run_id=rec.run_id,
        shipped=rec.shipped,
        recommended=rec.recommended,
        verdict=rec.verdict,
        speedup=lat.speedup if lat else None,
        speedup_ci_low=lat.ci_low if lat else None,
        speedup_ci_high=lat.ci_high if lat else None,
        answer_metric=answer.name if answer else None,
        answer_diff=answer.diff if answer else None,
        answer_ci_low=answer.ci_low if answer else None,
        answer_ci_high=answer.ci_high if answer else None,
        k=len(rec.family),
        procedure=rec.procedure,
        n_questions=rec.n_questions,
        fixed_n_questions=rec.fixed_n_questions,
        level=rec.level,
        created_at=rec.created_at,
        reasons=json.dumps([rec.line(), *rec.reasons]),
    )
    by_name = {x.candidate: x for x in rec.decisions}
    family = [
        FamilyVerdictRow(
            run_id=rec.run_id,
            candidate=f.name,
            shipped=rec.shipped,
            p_value=f.p_value,
            adjusted_p=f.adjusted_p,
            verdict=f.verdict,
            adjusted_verdict=f.adjusted_verdict,
            speedup=_speedup_or_none(by_name[f.name]),
            created_at=rec.created_at,
        )
        for f in rec.family
    ]
    return row, family
