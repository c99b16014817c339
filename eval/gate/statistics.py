"""Paired bootstrap confidence intervals and the per-metric verdicts built on them."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from pydantic import BaseModel

from corpus.errors import CribsheetError
from eval.gate.policy import GatePolicy, LatencyRule, MetricRule
from eval.metrics import DIRECTIONS


class MetricResult(BaseModel):
    """Everything behind one metric's verdict."""

    name: str
    higher_is_better: bool
    n: int
    baseline_mean: float
    candidate_mean: float
    diff: float
    """candidate - baseline, in the metric's own units."""
    ci_low: float
    ci_high: float
    margin: float
    advisory: bool
    verdict: str
    """pass | fail | undecided"""


class LatencyResult(BaseModel):
    """Speed-up = baseline mean / candidate mean, with its confidence interval."""

    metric: str
    n: int
    baseline_mean: float
    candidate_mean: float
    speedup: float
    ci_low: float
    ci_high: float
    min_speedup: float
    verdict: str


def bootstrap_ci(stat: Any, data: tuple[np.ndarray, ...], policy: GatePolicy) -> tuple[float, float]:
    """Two-sided CI of `stat` over paired resamples (BCa; percentile when BCa is degenerate)."""
    from scipy.stats import bootstrap

    if all(np.all(d == d[0]) for d in data):
        value = float(stat(*data))
        return value, value
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():  # a degenerate BCa interval is expected here: we fall back to percentile
            warnings.simplefilter("ignore")
            res = bootstrap(
                data,
                stat,
                paired=True,
                vectorized=False,
                confidence_level=policy.confidence,
                n_resamples=policy.resamples,
                method=method,
                rng=np.random.default_rng(policy.seed),
            )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if np.isfinite(low) and np.isfinite(high):
            return low, high
    raise CribsheetError("bootstrap produced no finite confidence interval")


def judge_metric(rule: MetricRule, base: np.ndarray, cand: np.ndarray, policy: GatePolicy) -> MetricResult:
    """Non-inferiority of one metric on paired values."""
    higher = DIRECTIONS[rule.name]
    low, high = bootstrap_ci(lambda b, c: float(np.mean(c) - np.mean(b)), (base, cand), policy)
    # Improvement in the metric's good direction: for lower-is-better metrics flip the sign.
    imp_low, imp_high = (low, high) if higher else (-high, -low)
    if imp_low >= -rule.margin:
        verdict = "pass"
    elif imp_high < -rule.margin:
        verdict = "fail"
    else:
        verdict = "undecided"
    return MetricResult(
        name=rule.name,
        higher_is_better=higher,
        n=len(base),
        baseline_mean=float(np.mean(base)),
        candidate_mean=float(np.mean(cand)),
        diff=float(np.mean(cand) - np.mean(base)),
        ci_low=low,
        ci_high=high,
        margin=rule.margin,
        advisory=rule.advisory,
        verdict=verdict,
    )


def judge_latency(rule: LatencyRule, base: np.ndarray, cand: np.ndarray, policy: GatePolicy) -> LatencyResult:
    """Speed-up of the candidate, paired per question."""
    low, high = bootstrap_ci(lambda b, c: float(np.mean(b) / np.mean(c)), (base, cand), policy)
    floor = rule.min_speedup * (1 - rule.tolerance) if rule.min_speedup == 1.0 else rule.min_speedup
    verdict = "pass" if low >= floor else ("fail" if high < floor else "undecided")
    return LatencyResult(
        metric=rule.metric,
        n=len(base),
        baseline_mean=float(np.mean(base)),
        candidate_mean=float(np.mean(cand)),
        speedup=float(np.mean(base) / np.mean(cand)),
        ci_low=low,
        ci_high=high,
        min_speedup=rule.min_speedup,
        verdict=verdict,
    )
