"""Error control across the grid: the chance that ANY candidate in truth worse than the margin passes, held
at the level one comparison is held at, however many candidates are gated, for both gates.

Each candidate of a grid is gated against the same baseline (the setting shipped today) on the same questions.
Gated one by one, each false pass is held at a = (1 - confidence) / 2, but with k candidates at the
non-inferiority boundary the chance that at least one passes grows towards 1 - (1 - a)^k (12 % at k = 5 for
a = 0.025). Here every candidate's one-sided non-inferiority test gives a p-value, and Holm's step-down
procedure over the candidates' p-values at level a passes a candidate only when it survives the adjustment:

    sort p_(1) <= ... <= p_(k); pass p_(1), p_(2), ... while p_(j) <= a / (k - j + 1); stop at the first that
    does not.

Holm controls the family-wise error rate (FWER) at a under ANY dependence between the p-values (S. Holm, "A
simple sequentially rejective multiple test procedure", Scandinavian Journal of Statistics 6(2), 1979), which
matters here: the candidates share the baseline and the questions, so their tests are correlated. With one
candidate it is the unadjusted test.

A candidate passes only when all its deciding tests (metrics and latency) pass: an intersection-union test,
so its p-value is the LARGEST of its deciding tests' p-values, with no adjustment across metrics (R. L.
Berger, "Multiparameter hypothesis testing and acceptance sampling", Technometrics 24(4), 1982).

Fixed-n p-values (`metric_p_value`, `latency_p_value`) invert the gate's own intervals, so a p-value is at
most a exactly when the interval `eval.gate.statistics` reads passes:
- a metric: p = the smallest one-sided level t at which the lower end of the BCa interval of the improvement
  (candidate - baseline, sign-flipped for a lower-is-better metric) still reaches -margin, from the same
  bootstrap draws (same seed and resamples) as `judge_metric`. With B* the sorted bootstrap improvements, q*
  the smallest quantile level at which B* (linear interpolation, as scipy reads it) reaches -margin, z0 the
  bias correction and acc the acceleration (jackknife), the BCa lower end at level t is the quantile at
  Phi(z0 + (z0 + z_t) / (1 - acc (z0 + z_t))); setting it to q* gives
  t = Phi(w - z0), w = (Phi^-1(q*) - z0) / (1 + acc (Phi^-1(q*) - z0)). Where `bootstrap_ci` falls back to
  the percentile interval (a degenerate BCa), p = q* (the bootstrap p-value P*(improvement* <= -margin),
  interpolated). A p-value is as valid as the interval it inverts: approximately, for large n.
- latency: p = q* of the percentile bootstrap of the geometric-mean speed-up (`geometric_ci`'s draws) at
  the floor min_speedup * (1 - tolerance).

Sequential p-values (`anytime_p_values`) come from the sequential gate's own e-process: K_t, the capital of
the pass-side bet at the non-inferiority boundary (`eval.gate.sequential.metric_capital`), is a nonnegative
supermartingale with K_0 = 1 whenever the candidate is at or beyond the boundary, so by Ville's inequality
P(sup_t K_t >= 1/a) <= a, and p_t = min(1, 1 / max_{s <= t} K_s) is an anytime-valid p-value: P(p_tau <= a)
<= a at any stopping time tau, however the looks were chosen. It is non-increasing in t, and p_t <= a
exactly when the gate's test passes at level a. Holm over the candidates' p_t at every look is valid too:
Holm is monotone (smaller p-values never undo a pass), so whatever passes at any look passes under Holm
applied to the p-values at the end, p_inf = 1 / sup K, which are valid by Ville; a candidate that stops
early (it failed) keeps its last p-value, which is larger than p_inf.

Beware the tempting shortcuts: an e-value procedure applied to the running maxima of e-processes (e-BH, or
averaging the candidates' running maxima) loses its guarantee, because a running maximum of an e-process is
not an e-value (V. Tavyrikov, J. J. Goeman and R. de Heide, arXiv:2501.19360). Holm on p = 1/running max
keeps it, because 1/running max IS a valid p-value. For e-value closed testing with anytime-valid
family-wise control and a polynomial-time e-Holm, see L. Hartog and L. Lei, arXiv:2501.09015.

Assumptions: each candidate's test is valid on its own (the fixed-n bootstrap asymptotically, the
sequential bets exactly, with the questions in an order fixed before any answer is seen), and k counts EVERY
candidate gated against the baseline in the grid, including any that fail or could not be decided; dropping
candidates after seeing their results voids the guarantee. Only passes are adjusted: a fail or an undecided
verdict stands as the candidate's own gate gave it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError
from eval.gate.policy import GatePolicy, LatencyRule, MetricRule
from eval.metrics import DIRECTIONS

Verdict = Literal["pass", "fail", "undecided", "continue"]


def pass_level(policy: GatePolicy) -> float:
    """The family-wise false-pass level: a = (1 - confidence) / 2, what one comparison's pass spends (the
    fixed-n interval's lower tail, the sequential gate's `alpha_split` pass side).
    """
    return (1 - policy.confidence) / 2


def holm_adjusted(p_values: Any) -> np.ndarray:
    """Holm's adjusted p-values along the last axis: candidate i passes at level a iff adjusted[i] <= a.

    adjusted_(j) = max over i <= j of min(1, (k - i + 1) p_(i)), in sorted order (vectorised: a (..., k)
    array is adjusted row by row, for simulation).
    """
    p = np.asarray(p_values, dtype=float)
    if p.shape[-1:] == (0,) or p.ndim == 0:
        return p.copy()
    if np.any(np.isnan(p)) or np.any((p < 0) | (p > 1)):
        raise CribsheetError(f"p-values must lie in [0, 1], got {p.tolist() if p.size < 20 else 'an array'}")
    k = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    stepped = np.maximum.accumulate(np.minimum(1.0, ranked * np.arange(k, 0, -1)), axis=-1)
    adjusted = np.empty_like(p)
    np.put_along_axis(adjusted, order, stepped, axis=-1)
    return adjusted


class CandidateResult(BaseModel):
    """One candidate's own gate result, already computed: what the family adjustment reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """The candidate setting."""
    p_value: float = Field(ge=0.0, le=1.0)
    """Its one-sided non-inferiority p-value: the largest over its deciding tests (`fixed_p_value`,
    `sequential_p_value`)."""
    verdict: Verdict
    """Its own, unadjusted gate verdict (`GateDecision.decision`, or `sequential_decision`)."""


class FamilyVerdict(BaseModel):
    """A candidate's verdict before and after the adjustment across the grid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    p_value: float
    """Unadjusted p-value (the candidate's own test)."""
    verdict: Verdict
    """Unadjusted verdict: what gating this candidate alone says."""
    adjusted_p: float
    """Holm's adjusted p-value over the grid's k candidates."""
    adjusted_verdict: Verdict
    """pass only when the unadjusted verdict is pass and adjusted_p <= the level; an unadjusted pass Holm
    holds back is `held` (undecided, or continue at a sequential look before the budget); any other verdict
    stands."""


def family_verdicts(
    candidates: Sequence[CandidateResult], level: float, held: Literal["undecided", "continue"] = "undecided"
) -> list[FamilyVerdict]:
    """Holm's step-down at `level` over every candidate of the grid (pass them all, failed and undecided ones
    included: k is the number of candidates gated, never the number that passed), in the order given.
    """
    if not 0 < level < 1:
        raise CribsheetError(f"family-wise level must lie in (0, 1), got {level}")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise CribsheetError(f"candidates must be named once each; named more than once: {twice}")
    adjusted = holm_adjusted([c.p_value for c in candidates]).tolist()
    out = []
    for cand, adj in zip(candidates, adjusted, strict=True):
        verdict = cand.verdict if cand.verdict != "pass" else ("pass" if adj <= level else held)
        out.append(
            FamilyVerdict(
                name=cand.name, p_value=cand.p_value, verdict=cand.verdict, adjusted_p=adj, adjusted_verdict=verdict
            )
        )
    return out


# The fixed-n gate's p-values.


def _threshold_level(ordered: np.ndarray, boundary: float) -> float | None:
    """The smallest level q whose linearly interpolated quantile of the sorted `ordered` reaches `boundary`
    (0: every value does; None: none does).
    """
    j = int(np.searchsorted(ordered, boundary, side="left"))
    if j == 0:
        return 0.0
    if j == len(ordered):
        return None
    h = (j - 1) + (boundary - ordered[j - 1]) / (ordered[j] - ordered[j - 1])
    return float(h / (len(ordered) - 1))


def _bca_p_value(boot: np.ndarray, theta: float, jack: np.ndarray, boundary: float, tail: float) -> float:
    """The smallest one-sided level at which the lower end of the BCa interval of `boot` reaches `boundary`
    (the percentile interval's where scipy's BCa is degenerate at `tail`, as `bootstrap_ci` falls back).
    """
    from scipy.special import ndtr, ndtri

    ordered = np.sort(boot)
    q = _threshold_level(ordered, boundary)
    if q is None:
        return 1.0
    # scipy's BCa constants (stats._resampling._bca_interval): bias from the share of draws below the estimate,
    # acceleration from the jackknife values.
    z0 = float(ndtri((np.count_nonzero(boot < theta) + np.count_nonzero(boot <= theta)) / (2 * len(boot))))
    u = jack.mean() - jack
    with np.errstate(divide="ignore", invalid="ignore"):
        acc = float(np.sum(u**3) / np.sum(u**2) ** 1.5 / 6)
        z = float(ndtri(tail))
        levels = [ndtr(z0 + (z0 + s) / (1 - acc * (z0 + s))) for s in (z, -z)]
    if np.any(np.isnan(levels)):  # scipy's BCa interval is NaN here: `bootstrap_ci` reads the percentile one
        return q
    if not np.isfinite(z0):  # every level maps to Phi(z0), 0 or 1
        return 0.0 if q <= ndtr(z0) else 1.0
    if q == 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    gap = float(ndtri(q)) - z0
    denominator = 1 + acc * gap
    if denominator <= 0:  # q lies beyond what the BCa map reaches on its monotone branch
        return 0.0 if acc > 0 else 1.0
    return float(np.clip(ndtr(gap / denominator - z0), 0.0, 1.0))


def _mean_diff(b: np.ndarray, c: np.ndarray, axis: int = -1) -> Any:
    """`eval.gate.statistics`' statistic, computed the same way so the bootstrap draws are the same numbers."""
    return np.mean(c, axis=axis) - np.mean(b, axis=axis)


def metric_p_value(rule: MetricRule, base: np.ndarray, cand: np.ndarray, policy: GatePolicy) -> float:
    """One-sided non-inferiority p-value of `judge_metric`'s test (module doc): at most (1 - confidence) / 2
    exactly when its verdict is pass.
    """
    from scipy.stats import bootstrap

    base, cand = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    sign = 1.0 if DIRECTIONS[rule.name] else -1.0
    if base.shape != cand.shape or base.ndim != 1 or len(base) < 2:
        raise CribsheetError(f"{rule.name}: paired arrays must be 1-D, equally long and hold 2 or more values")
    theta = sign * float(_mean_diff(base, cand))
    if np.all(base == base[0]) and np.all(cand == cand[0]):  # `bootstrap_ci`'s point interval
        return 0.0 if theta >= -rule.margin else 1.0
    res = bootstrap(
        (base, cand),
        _mean_diff,
        paired=True,
        vectorized=True,
        confidence_level=policy.confidence,
        n_resamples=policy.resamples,
        method="percentile",  # the draws do not depend on the method; the BCa constants are computed here
        rng=np.random.default_rng(policy.seed),
    )
    d = cand - base
    jack = sign * (d.sum() - d) / (len(d) - 1)  # leave-one-question-out mean differences
    return _bca_p_value(sign * res.bootstrap_distribution, theta, jack, -rule.margin, pass_level(policy))


def latency_p_value(rule: LatencyRule, speedups: np.ndarray, policy: GatePolicy) -> float:
    """One-sided p-value of `judge_latency`'s test (speed-up at least min_speedup * (1 - tolerance)): at most
    (1 - confidence) / 2 exactly when its interval passes (the load check and offline budget aside).
    """
    logs = np.log(np.asarray(speedups, dtype=float))
    if len(logs) == 0 or not np.all(np.isfinite(logs)):
        raise CribsheetError(f"{rule.metric}: a latency p-value needs positive, finite speed-ups")
    rng = np.random.default_rng(policy.seed)  # `geometric_ci`'s draws
    means = logs[rng.integers(0, len(logs), size=(policy.resamples, len(logs)))].mean(axis=1)
    q = _threshold_level(np.sort(means), float(np.log(rule.min_speedup * (1 - rule.tolerance))))
    return 1.0 if q is None else q


def fixed_p_value(
    pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], policy: GatePolicy, speedups: np.ndarray | None = None
) -> float:
    """A candidate's p-value under the fixed-n gate: the largest of its deciding tests' (intersection-union).

    `pairs`: (baseline, candidate) arrays per metric on the metric's population (`decision.paired_arrays`);
    `speedups`: the per-question paired speed-ups the latency verdict read (None: baseline / candidate of the
    latency metric's pairs). A deciding test with too few values for a verdict (min_questions, min_probes)
    gives 1: no evidence.
    """
    p_values = []
    for rule in policy.metrics:
        if rule.advisory:
            continue
        base, cand = pairs.get(rule.name, (np.zeros(0), np.zeros(0)))
        enough = len(base) >= max(policy.min_questions, 2)
        p_values.append(metric_p_value(rule, base, cand, policy) if enough else 1.0)
    if policy.latency:
        lat = policy.latency
        if speedups is None and lat.metric in pairs and len(pairs[lat.metric][0]):
            speedups = np.asarray(pairs[lat.metric][0], dtype=float) / np.asarray(pairs[lat.metric][1], dtype=float)
        enough = speedups is not None and len(speedups) >= lat.min_probes
        p_values.append(latency_p_value(lat, np.asarray(speedups), policy) if enough else 1.0)
    return max(p_values, default=1.0)


# The sequential gate's p-values.


def anytime_p_values(log_capital: Any) -> np.ndarray:
    """p_t = min(1, 1 / max_{s <= t} K_s) from the log capital log K_t along the last axis (raw, or already
    its running maximum as `metric_capital` gives it): non-increasing in t, valid at any stopping time.
    """
    running = np.maximum.accumulate(np.asarray(log_capital, dtype=float), axis=-1)
    p: np.ndarray = np.minimum(1.0, np.exp(-running))
    return p


def sequential_p_value(capitals: Mapping[str, np.ndarray], policy: GatePolicy) -> float:
    """A candidate's anytime-valid p-value now: the largest over its deciding tests of 1 / running max of
    the test's capital (`sequential.gate_capitals`) at the last question in hand; a test without values
    gives 1.
    """
    deciding = [m.name for m in policy.metrics if not m.advisory]
    if policy.latency:
        deciding.append(policy.latency.metric)
    p_values = [
        float(anytime_p_values(capitals[name])[-1]) if name in capitals and len(capitals[name]) else 1.0
        for name in deciding
    ]
    return max(p_values, default=1.0)
