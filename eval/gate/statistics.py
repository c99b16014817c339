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
    population: str = "all"
    """Which questions were compared: answerable, unanswerable or all."""
    sd_diff: float | None = None
    """Standard deviation of the paired differences."""
    mdd: float | None = None
    """Minimal detectable difference at this n: how far from the margin a true difference must lie to be
    decided with 80 % power at the policy's confidence (normal approximation)."""
    n_to_decide: int | None = None
    """For an undecided verdict: paired questions that would decide it if the observed difference and
    variance held (None: decided already, or the observed difference sits exactly on the margin)."""


POWER = 0.8


def power_figures(diffs: np.ndarray, margin: float, higher: bool, confidence: float) -> tuple[float, float, int | None]:
    """(sd of the paired differences, minimal detectable difference at this n, questions needed to decide)."""
    from scipy.stats import norm

    n = len(diffs)
    sd = float(np.std(diffs, ddof=1)) if n > 1 else 0.0
    z = float(norm.ppf(1 - (1 - confidence) / 2) + norm.ppf(POWER))
    mdd = z * sd / np.sqrt(n) if n else float("inf")
    improvement = float(np.mean(diffs)) * (1 if higher else -1)
    distance = abs(improvement + margin)  # from the non-inferiority boundary at -margin
    needed = None if distance == 0 or sd == 0 else int(np.ceil((z * sd / distance) ** 2))
    return sd, float(mdd), needed


class LatencyResult(BaseModel):
    """Speed-up = geometric mean over probe questions of each question's paired ratio baseline / candidate
    (both requests timed in the same blocks), with its confidence interval.
    """

    metric: str
    n: int
    baseline_mean: float | None = None
    candidate_mean: float | None = None
    """Mean of each side's per-question latency (seconds; None: only the paired ratios were read)."""
    speedup: float
    ci_low: float
    ci_high: float
    min_speedup: float
    verdict: str
    estimand: str = "geometric mean of per-question paired ratios"
    aa_ratio: float | None = None
    aa_ci_low: float | None = None
    aa_ci_high: float | None = None
    """The baseline's A/A figure in the same run (its two twins per block), with its interval: a check that a
    request's order and position in its block bias nothing (it cannot see load; `foreign_load` does)."""
    aa_n: int | None = None
    foreign_load: float | None = None
    """Share of the cores other processes used while the latency phase ran (`eval.gate.load_check`)."""
    drift: float | None = None
    """First-half / second-half ratio of the paired speed-up over the phase's probe questions."""
    drift_n: int | None = None
    failed_slots: int | None = None
    """Failed twin-0 slots of either setting (counted, never silently dropped)."""
    offline_s: float | None = None
    """The candidate's mean offline bill per probed request (a recorded precompute step's compressions,
    index-time unit vectors): shown beside the speed-up, never in it."""


def bootstrap_ci(stat: Any, data: tuple[np.ndarray, ...], policy: GatePolicy) -> tuple[float, float]:
    """Two-sided CI of `stat` over paired resamples (BCa; percentile when BCa is degenerate).

    `stat(*arrays, axis)` is vectorised: it reduces along `axis`, so scipy evaluates all resamples at once.
    """
    from scipy.stats import bootstrap

    if all(np.all(d == d[0]) for d in data):
        value = float(stat(*data, axis=-1))
        return value, value
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():  # a degenerate BCa interval is expected here: we fall back to percentile
            warnings.simplefilter("ignore")
            res = bootstrap(
                data,
                stat,
                paired=True,
                vectorized=True,
                confidence_level=policy.confidence,
                n_resamples=policy.resamples,
                method=method,
                rng=np.random.default_rng(policy.seed),
            )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if np.isfinite(low) and np.isfinite(high):
            return low, high
    raise CribsheetError("bootstrap produced no finite confidence interval")


def _mean_diff(b: np.ndarray, c: np.ndarray, axis: int = -1) -> Any:
    return np.mean(c, axis=axis) - np.mean(b, axis=axis)


def judge_metric(rule: MetricRule, base: np.ndarray, cand: np.ndarray, policy: GatePolicy) -> MetricResult:
    """Non-inferiority of one metric on paired values."""
    higher = DIRECTIONS[rule.name]
    low, high = bootstrap_ci(_mean_diff, (base, cand), policy)
    # Improvement in the metric's good direction: for lower-is-better metrics flip the sign.
    imp_low, imp_high = (low, high) if higher else (-high, -low)
    if imp_low >= -rule.margin:
        verdict = "pass"
    elif imp_high < -rule.margin:
        verdict = "fail"
    else:
        verdict = "undecided"
    sd, mdd, needed = power_figures(cand - base, rule.margin, higher, policy.confidence)
    return MetricResult(
        sd_diff=sd,
        mdd=mdd,
        n_to_decide=needed if verdict == "undecided" else None,
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


def judge_latency(
    rule: LatencyRule,
    speedups: np.ndarray,
    policy: GatePolicy,
    base: np.ndarray | None = None,
    cand: np.ndarray | None = None,
) -> LatencyResult:
    """Speed-up of the candidate from per-question paired ratios baseline / candidate: the geometric mean,
    with a percentile bootstrap interval over questions (the sequential gate's estimand too).
    """
    speedup, low, high = geometric_ci(speedups, policy.confidence, policy.resamples, policy.seed)
    floor = rule.min_speedup * (1 - rule.tolerance)  # the same slack whatever speed-up is demanded
    verdict = "pass" if low >= floor else ("fail" if high < floor else "undecided")
    return LatencyResult(
        metric=rule.metric,
        n=len(speedups),
        baseline_mean=float(np.mean(base)) if base is not None and len(base) else None,
        candidate_mean=float(np.mean(cand)) if cand is not None and len(cand) else None,
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        min_speedup=rule.min_speedup,
        verdict=verdict,
    )


def aa_misses(aa: tuple[float, float, float], tolerance: float) -> bool:
    """The A/A interval (ratio, low, high) misses 1 by more than `tolerance` (relative): the machine changed
    under the measurement more than the policy lets a speed-up be read through.
    """
    _, low, high = aa
    return low > 1 + tolerance or high < 1 - tolerance


def geometric_ci(
    ratios: Any, confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """Geometric mean of per-question ratios and its percentile bootstrap interval over questions: the
    deciding latency estimand of the fixed-n gate and the sequential gate's clipped log-ratios (the checks that
    withhold a verdict read `geometric_t_interval`).
    """
    logs = np.log(np.asarray(ratios, dtype=float))
    if len(logs) == 0 or not np.all(np.isfinite(logs)):
        raise CribsheetError("a geometric mean needs positive, finite ratios")
    rng = np.random.default_rng(seed)
    means = logs[rng.integers(0, len(logs), size=(resamples, len(logs)))].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(np.exp(logs.mean())), float(np.exp(low)), float(np.exp(high))
