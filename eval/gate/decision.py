"""The gate's decision: is the candidate no worse than the baseline, and as fast as it promises?

Three-way answer: pass (0), fail (1), could not decide (2: errors, too few questions, mismatched inputs,
or a confidence interval too wide to tell at this margin).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from eval.gate.load_check import LoadCheck, latency_reasons
from eval.gate.policy import GatePolicy
from eval.gate.statistics import LatencyResult, MetricResult, judge_latency, judge_metric
from eval.metrics import POPULATIONS
from eval.store import Record

PASS, FAIL, UNDECIDED = 0, 1, 2
EXIT_CODES = {"pass": PASS, "fail": FAIL, "undecided": UNDECIDED}


class Labels(BaseModel):
    """What the decision is about: the two settings and their runs."""

    baseline: str
    candidate: str
    baseline_run: str
    candidate_run: str


class GateDecision(BaseModel):
    """The gate's answer with every number behind it."""

    decision: str
    """pass | fail | undecided"""
    exit_code: int
    reasons: list[str]
    baseline: str
    candidate: str
    baseline_run: str
    candidate_run: str
    n_questions: int
    metrics: list[MetricResult] = Field(default_factory=list)
    latency: LatencyResult | None = None
    policy: GatePolicy
    created_at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))
    notes: list[str] = Field(default_factory=list)
    """What else differs between the two runs, and comparisons the gate refused (e.g. latency across hardware)."""

    @classmethod
    def make(
        cls,
        decision: str,
        reasons: list[str],
        labels: Labels,
        policy: GatePolicy,
        n_questions: int = 0,
        metrics: list[MetricResult] | None = None,
        latency: LatencyResult | None = None,
    ) -> GateDecision:
        """The one constructor: the exit code follows from the decision."""
        return cls(
            decision=decision,
            exit_code=EXIT_CODES[decision],
            reasons=reasons,
            n_questions=n_questions,
            metrics=metrics or [],
            latency=latency,
            policy=policy,
            **labels.model_dump(),
        )


def _paired(base: dict[str, Record], cand: dict[str, Record], ids: list[str], metric: str) -> list[tuple[Any, Any]]:
    return [
        (base[q][metric], cand[q][metric])
        for q in ids
        if base[q].get(metric) is not None and cand[q].get(metric) is not None
    ]


def paired_arrays(
    base: dict[str, Record], cand: dict[str, Record], ids: list[str], policy: GatePolicy
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(baseline, candidate) arrays of every policy metric and the latency metric, over the questions `ids`
    in their order (each metric on its population; a question without a value in both is left out; a latency
    needs both values positive): what the sequential gate reads.
    """
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for rule in policy.metrics:
        pairs = _paired(base, cand, _population(base, ids, POPULATIONS.get(rule.name, "all")), rule.name)
        if pairs:
            out[rule.name] = tuple(np.array(x, dtype=float) for x in zip(*pairs, strict=True))  # type: ignore[assignment]
    if policy.latency:
        pairs = [(x, y) for x, y in _paired(base, cand, ids, policy.latency.metric) if x > 0 and y > 0]
        empty = (np.zeros(0), np.zeros(0))
        out[policy.latency.metric] = (
            tuple(np.array(x, dtype=float) for x in zip(*pairs, strict=True)) if pairs else empty  # type: ignore[assignment]
        )
    return out


def _latency(
    base: dict[str, Record],
    cand: dict[str, Record],
    ids: list[str],
    policy: GatePolicy,
    speedups: dict[str, float] | None,
    aa: tuple[float, float, float, int] | None,
    reasons: list[str],
    check: LoadCheck | None = None,
) -> LatencyResult | None:
    """The latency verdict (None: too few pairs), adding its reason to `reasons` unless it passed. `check`:
    the latency phase's load figures (foreign load, split-half drift, failed slots, A/A twins, offline bill),
    judged by `latency_reasons`, the rule the sequential gate applies too; `aa` fills the check's A/A.
    """
    lat = policy.latency
    assert lat is not None
    if aa is not None:
        check = (check or LoadCheck()).model_copy(update={"aa": aa})
    blocked, failed = latency_reasons(check, lat) if check is not None else ([], [])
    pairs = [(x, y) for x, y in _paired(base, cand, ids, lat.metric) if x > 0 and y > 0]
    if speedups is None:
        speedups = {
            q: base[q][lat.metric] / cand[q][lat.metric] for q in ids if _positive(base[q], cand[q], lat.metric)
        }
    ratios = np.array([speedups[q] for q in ids if q in speedups], dtype=float)
    if len(ratios) < lat.min_probes:
        reasons.extend(blocked)
        if not check or not check.lost_questions:
            lost = f"; {check.failed_slots} slots failed" if check and check.failed_slots else ""
            reasons.append(
                f"{lat.metric}: only {len(ratios)} questions with a latency paired in one block of one run; the "
                f"policy needs {lat.min_probes}{lost} (sweep with --probe-questions {lat.min_probes} or more)"
            )
        return None
    b, c = (np.array(x, dtype=float) for x in zip(*pairs, strict=True)) if pairs else (None, None)
    latency = judge_latency(lat, ratios, policy, b, c)
    if check is not None:
        latency = latency.model_copy(
            update=dict(
                foreign_load=check.foreign_load,
                drift=check.drift,
                drift_n=check.drift_n,
                failed_slots=check.failed_slots,
                offline_s=check.offline_s,
            )
            | (dict(aa_ratio=check.aa[0], aa_ci_low=check.aa[1], aa_ci_high=check.aa[2], aa_n=check.aa[3])
               if check.aa else {})
        )  # fmt: skip
    if blocked:
        reasons.extend(blocked)
        return latency.model_copy(update={"verdict": "undecided"})
    if failed:
        reasons.extend(failed)
        return latency.model_copy(update={"verdict": "fail"})
    if latency.verdict != "pass":
        reasons.append(
            f"{lat.metric}: speed-up {latency.speedup:.2f}x, CI [{latency.ci_low:.2f}, "
            f"{latency.ci_high:.2f}], needs {lat.min_speedup:.2f}x ({latency.verdict})"
        )
    return latency


def _positive(b: Record, c: Record, metric: str) -> bool:
    x, y = b.get(metric), c.get(metric)
    return x is not None and y is not None and x > 0 and y > 0


def _population(samples: dict[str, Record], ids: list[str], population: str) -> list[str]:
    """The question ids a metric is compared on (see `eval.metrics.POPULATIONS`)."""
    if population == "all":
        return ids
    wanted = population == "answerable"
    return [q for q in ids if bool(samples[q].get("answerable", True)) == wanted]


def decide(
    base: dict[str, Record],
    cand: dict[str, Record],
    policy: GatePolicy,
    labels: Labels,
    speedups: dict[str, float] | None = None,
    aa: tuple[float, float, float, int] | None = None,
    check: LoadCheck | None = None,
) -> GateDecision:
    """Decision over two settings' samples keyed by question id (each a dict of column -> value).

    Latency is decided on per-question paired ratios baseline / candidate: `speedups` (by question id, from
    the latency phase's slots of one run and session: `DuckDBStore.slot_pairs`), or else each question's
    ratio of the two rows' latency columns. `aa` is the baseline's A/A twins in the same run (ratio, CI
    low, CI high, n): an interval that misses 1 by more than the policy's tolerance gives no latency verdict.
    `check` (the latency phase's foreign load, split-half drift and failed slots) gives none either when the
    machine was busy, the halves disagree, or a probe question's every slot failed.
    """
    if set(base) != set(cand):
        only_b, only_c = sorted(set(base) - set(cand)), sorted(set(cand) - set(base))
        reason = (
            f"question sets differ: {len(only_b)} only in baseline (e.g. {only_b[:3]}), "
            f"{len(only_c)} only in candidate (e.g. {only_c[:3]})"
        )
        return GateDecision.make("undecided", [reason], labels, policy)
    ids = sorted(base)
    failed = [q for q in ids if base[q]["status"] != "ok" or cand[q]["status"] != "ok"]
    if failed:
        reason = f"{len(failed)} question(s) failed in a setting (e.g. {failed[:3]}); rerun before gating"
        return GateDecision.make("undecided", [reason], labels, policy, len(ids))
    if len(ids) < policy.min_questions:
        reason = f"only {len(ids)} paired questions; the policy needs at least {policy.min_questions}"
        return GateDecision.make("undecided", [reason], labels, policy, len(ids))
    results, reasons = [], []
    for rule in policy.metrics:
        population = POPULATIONS.get(rule.name, "all")
        pairs = _paired(base, cand, _population(base, ids, population), rule.name)
        if len(pairs) < policy.min_questions:
            if not rule.advisory:
                reasons.append(
                    f"{rule.name}: only {len(pairs)} {'' if population == 'all' else population + ' '}"
                    "questions with a value in both settings"
                )
            continue
        b, c = (np.array(x, dtype=float) for x in zip(*pairs, strict=True))
        result = judge_metric(rule, b, c, policy).model_copy(update={"population": population})
        results.append(result)
        if not rule.advisory and result.verdict != "pass":
            more = f"; ~{result.n_to_decide} paired questions would decide it" if result.n_to_decide else ""
            reasons.append(
                f"{rule.name}: {result.verdict} (diff {result.diff:+.3f}, CI [{result.ci_low:+.3f}, "
                f"{result.ci_high:+.3f}], margin {rule.margin:.3f}, detectable at this n {result.mdd:.3f}{more})"
            )
    latency = None
    if policy.latency:
        latency = _latency(base, cand, ids, policy, speedups, aa, reasons, check)
    verdicts = [r.verdict for r in results if not r.advisory] + ([latency.verdict] if latency else [])
    decision = "fail" if "fail" in verdicts else ("undecided" if reasons else "pass")
    return GateDecision.make(
        decision, reasons or ["every gated metric passed"], labels, policy, len(ids), results, latency
    )
