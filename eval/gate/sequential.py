"""An anytime-valid sequential gate: look after every batch of questions, stop at the first decision, and keep
the error rates however often it looked.

The fixed-n gate (`statistics`) reads a bootstrap interval at one planned n; re-reading it after every new
batch and stopping at the first pass inflates its false-pass rate. Here each gated metric instead carries a
time-uniform confidence sequence (CS) for the mean paired difference, valid at every n at once: the betting
CS of Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting", Journal of the Royal
Statistical Society Series B 86(1), 2024 (arXiv:2010.09686).

For a paired difference d = candidate - baseline of a metric bounded in [0, 1], x = (d + 1) / 2 lies in
[0, 1]. For each candidate mean m two capital processes bet on x's mean lying above m (up) and below it
(down):

    K_up(m)   = prod_i (1 + min(b_i, c / m)       (x_i - m))
    K_down(m) = prod_i (1 - min(b_i, c / (1 - m)) (x_i - m))

Each is a nonnegative martingale when m is the true mean (a supermartingale for the up bet when the true mean
is below m, and for the down bet when it is above), so by Ville's inequality it ever reaches 1/a with
probability at most a. The bet b_i is predictable (from x_1..x_{i-1} only): the paper's approximate GRAPA
bet evaluated at the decision boundary m0, |mu - m0| / (v + (mu - m0)^2), with the paper's regularised
running mean mu and variance v (one pseudo-observation of mean 1/2, variance 1/4). The same bet serves every
m, so each factor is monotone in m and the CS is an interval; c = 1/2 is the paper's truncation. With
`SequentialPlan.bet = "mixture"` each capital is instead the mean of MIXTURE capitals betting constant
fractions c/m * 2^(-k/2), k = 0..13 (a mean of nonnegative martingales is one; each is monotone in m too).

The CS at n is every m that neither process has rejected at any step up to n (the running intersection):
`lower` is the largest m the up bet has rejected, `upper` the smallest the down bet has. The decision
mirrors the fixed-n rule (pass when the lower bound clears -margin, fail when the upper bound is below it):
pass once -margin is rejected from below (lower >= -margin), fail once it is rejected from above
(upper <= -margin), otherwise look again; at the question budget, undecided with the n reached.

Error budget (`alpha_split`): with a = 1 - policy.confidence, every test passes at level a/2, as the fixed-n
rule's two-sided interval does. The gate passes only when every deciding test passes, so a false pass needs
the one truly inferior metric's test to pass: at most a/2 overall, with no split (an intersection-union
test). The gate fails when any deciding test fails, so the fail side is split evenly (Bonferroni) over the
k deciding tests, a/(2k) each: a false fail overall stays at most a/2. A test at (a_pass, a_fail) is the
paper's hedged capital process with weight a_pass / (a_pass + a_fail) at level a_pass + a_fail.

Latency (`latency_looks`): the speed-up is tested on the per-question log-ratio log(baseline / candidate),
clipped to [-log B, log B] with B = `SequentialPlan.latency_bound` and mapped onto [0, 1]. Its estimand is
the geometric mean of the per-question speed-ups (the fixed-n gate's is the ratio of mean latencies, which
slow outliers dominate more). The assumption: no question is more than B times faster or slower in one
setting than in the other; a pair beyond it is clipped, counted in `SequentialLook.clipped`, and then the
stated error rates hold for the clipped speed-up, not the raw one.

The questions must arrive in an order fixed before any answer is seen (e.g. shuffled by a seeded hash of the
question id): the CS treats them as independent draws. Everything here is deterministic: the same arrays
give the same looks.

The capital processes and their bounds are in `eval.gate.betting`; here are the looks per metric and the decision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from eval.gate.betting import MIXTURE as MIXTURE
from eval.gate.betting import PRIOR_MEAN as PRIOR_MEAN
from eval.gate.betting import PRIOR_VARIANCE as PRIOR_VARIANCE
from eval.gate.betting import STEADY_CAP as STEADY_CAP
from eval.gate.betting import SideAlphas as SideAlphas
from eval.gate.betting import _running as _running
from eval.gate.betting import _unit_bounds as _unit_bounds
from eval.gate.betting import bet_sizes as bet_sizes
from eval.gate.betting import first_decisions as first_decisions
from eval.gate.betting import log_wealth as log_wealth
from eval.gate.betting import look_times as look_times
from eval.gate.betting import plan_bets as plan_bets
from eval.gate.betting import steady_truncation as steady_truncation
from eval.gate.policy import GatePolicy, SequentialPlan
from eval.metrics import DIRECTIONS

VERDICTS = ("pass", "fail", "continue", "undecided")
"""pass / fail: decided (final); continue: look again after the next batch; undecided: the budget is spent."""


class SequentialLook(BaseModel):
    """One look at one metric: the confidence sequence at n and what it says."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str
    n: int
    """Paired questions seen at this look."""
    estimate: float
    """Mean candidate - baseline difference (metric units); for latency, the geometric-mean speed-up."""
    lower: float
    """The largest value rejected from below so far (the range's end before any): the truth lies above it, at
    the sequence's confidence."""
    upper: float
    """The smallest value rejected from above so far: the truth lies below it."""
    threshold: float
    """The decision boundary in the same units: -margin (candidate - baseline; +margin for a lower-is-better
    metric), or the speed-up floor min_speedup * (1 - tolerance)."""
    verdict: str
    """pass | fail | continue | undecided (see `VERDICTS`)."""
    clipped: int = 0
    """Latency only: pairs whose speed-up lay beyond `SequentialPlan.latency_bound` and were clipped."""


def alpha_split(policy: GatePolicy) -> dict[str, SideAlphas]:
    """Each test's error budget, keyed by metric (deciding metrics, the latency metric, advisory metrics).

    Pass side: a/2 per test, no split (the gate passes only if every deciding test does). Fail side: a/2
    split evenly over the k deciding tests (the gate fails if any does). Advisory metrics decide nothing and
    get a/2 on both sides, like the fixed-n interval.
    """
    half = (1 - policy.confidence) / 2
    deciding = [m.name for m in policy.metrics if not m.advisory]
    if policy.latency:
        deciding.append(policy.latency.metric)
    k = max(len(deciding), 1)
    split = {name: SideAlphas(pass_alpha=half, fail_alpha=half / k) for name in deciding}
    advisory = {m.name: SideAlphas(pass_alpha=half, fail_alpha=half) for m in policy.metrics if m.advisory}
    return advisory | split


def _unit_looks(
    x: np.ndarray,
    boundary: float,
    alphas: SideAlphas,
    plan: SequentialPlan,
    look: Callable[[int, float, float, str], SequentialLook],
    min_n: int = 1,
) -> list[SequentialLook]:
    """Looks of a path in [0, 1] (better is higher) up to the first decision; `look` turns (n, lower, upper,
    verdict) in unit space into a look in the metric's units. No pass before `min_n` (the policy's minimum:
    the running bounds only tighten, so a pass held back is still a pass there).
    """
    times = look_times(len(x), plan)
    if not times:
        return []
    lowers, uppers = _unit_bounds(x, boundary, alphas, plan, times)
    looks = []
    for n, lower, upper in zip(times, lowers.tolist(), uppers.tolist(), strict=True):
        passed, failed = lower >= boundary and n >= min_n, upper <= boundary
        if passed or failed:  # both: the sequence is empty, a sign of an error event; never a pass
            looks.append(look(n, lower, upper, "pass" if not failed else ("fail" if not passed else "undecided")))
            break
        looks.append(look(n, lower, upper, "undecided" if n == plan.budget else "continue"))
    return looks


def _checked(base: np.ndarray, cand: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    base, cand = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if base.shape != cand.shape or base.ndim != 1:
        raise CribsheetError(f"{metric}: paired arrays must be 1-D and equally long, got {base.shape} and {cand.shape}")
    if not (np.all(np.isfinite(base)) and np.all(np.isfinite(cand))):
        raise CribsheetError(f"{metric}: paired values must be finite (drop questions without a value first)")
    return base, cand


def _metric_unit(
    base: np.ndarray, cand: np.ndarray, margin: float, metric: str, higher_is_better: bool
) -> tuple[np.ndarray, float]:
    """The path in [0, 1] (the improvement (d + 1) / 2, better is higher) and its boundary."""
    base, cand = _checked(base, cand, metric)
    if np.any((base < 0) | (base > 1) | (cand < 0) | (cand > 1)):
        raise CribsheetError(f"{metric}: values must lie in [0, 1] for the sequential gate (bounded metrics only)")
    improvement = (cand - base) if higher_is_better else (base - cand)
    return (improvement + 1) / 2, (1 - margin) / 2


def _difference_bounds(low: float, high: float, higher_is_better: bool) -> tuple[float, float]:
    """Unit-space bounds of the improvement as bounds of candidate - baseline."""
    imp_low, imp_high = 2 * low - 1, 2 * high - 1
    return (imp_low, imp_high) if higher_is_better else (-imp_high, -imp_low)


def metric_looks(
    base: np.ndarray,
    cand: np.ndarray,
    margin: float,
    alphas: SideAlphas,
    plan: SequentialPlan,
    metric: str = "metric",
    higher_is_better: bool = True,
    min_n: int = 1,
) -> list[SequentialLook]:
    """Non-inferiority looks of a [0, 1] metric on paired values in the order the questions were drawn; the
    list ends at the first decision, at the budget, or at the last full batch in hand (no pass before `min_n`).
    """
    x, boundary = _metric_unit(base, cand, margin, metric, higher_is_better)
    cumulative = np.cumsum(np.asarray(cand, dtype=float) - np.asarray(base, dtype=float))

    def look(n: int, low: float, high: float, verdict: str) -> SequentialLook:
        lower, upper = _difference_bounds(low, high, higher_is_better)
        threshold = -margin if higher_is_better else margin
        estimate = float(cumulative[n - 1] / n)
        return SequentialLook(
            metric=metric, n=n, estimate=estimate, lower=lower, upper=upper, threshold=threshold, verdict=verdict
        )

    return _unit_looks(x, boundary, alphas, plan, look, min_n)


def confidence_sequence(
    base: np.ndarray,
    cand: np.ndarray,
    margin: float,
    alphas: SideAlphas,
    plan: SequentialPlan,
    higher_is_better: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, lower, upper) of candidate - baseline at every look, without stopping at a decision (the bets are
    tuned to the boundary -margin, as the gate's are): for reports and for checking coverage.
    """
    x, boundary = _metric_unit(base, cand, margin, "metric", higher_is_better)
    times = look_times(len(x), plan)
    if not times:
        return np.zeros(0, dtype=int), np.zeros(0), np.zeros(0)
    lowers, uppers = _unit_bounds(x, boundary, alphas, plan, times)
    pairs = [_difference_bounds(lo, hi, higher_is_better) for lo, hi in zip(lowers, uppers, strict=True)]
    return np.array(times), np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def _latency_logs(
    base: np.ndarray, cand: np.ndarray, floor: float, plan: SequentialPlan, metric: str
) -> tuple[np.ndarray, float]:
    """Per-question log speed-ups log(baseline / candidate), unclipped, and the clipping span log B."""
    base, cand = _checked(base, cand, metric)
    if np.any(base <= 0) or np.any(cand <= 0):
        raise CribsheetError(f"{metric}: latencies must be positive (drop questions without a measurement first)")
    span = float(np.log(plan.latency_bound))
    if not -span < np.log(floor) < span:
        raise CribsheetError(
            f"{metric}: speed-up floor {floor:g} lies outside the assumed per-question bound "
            f"[1/{plan.latency_bound:g}, {plan.latency_bound:g}]; raise SequentialPlan.latency_bound"
        )
    return np.log(base / cand), span


def latency_looks(
    base: np.ndarray,
    cand: np.ndarray,
    floor: float,
    alphas: SideAlphas,
    plan: SequentialPlan,
    metric: str = "e2e_cold_s",
    min_n: int = 1,
) -> list[SequentialLook]:
    """Speed-up looks (baseline / candidate latency, per question, positive seconds; or per-question paired
    ratios against ones): pass once the speed-up's lower bound reaches `floor` (not before `min_n` questions,
    and never with a clipped pair: the stated error rates would not hold), fail once its upper bound is at or
    below it.
    """
    raw, span = _latency_logs(base, cand, floor, plan, metric)
    ratio = np.clip(raw, -span, span)
    beyond = np.cumsum(np.abs(raw) > span)
    cumulative = np.cumsum(ratio)

    def speedup(unit: float) -> float:
        return float(np.exp(2 * span * unit - span))

    def look(n: int, low: float, high: float, verdict: str) -> SequentialLook:
        clipped = int(beyond[n - 1])
        return SequentialLook(
            metric=metric,
            n=n,
            estimate=float(np.exp(cumulative[n - 1] / n)),
            lower=speedup(low),
            upper=speedup(high),
            threshold=floor,
            verdict="undecided" if verdict == "pass" and clipped else verdict,
            clipped=clipped,
        )

    boundary = (float(np.log(floor)) + span) / (2 * span)
    return _unit_looks((ratio + span) / (2 * span), boundary, alphas, plan, look, min_n)


def gate_looks(
    pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], policy: GatePolicy, plan: SequentialPlan
) -> dict[str, list[SequentialLook]]:
    """Every policy metric's looks, from (baseline, candidate) arrays keyed by metric name, each in the order
    its questions were drawn; an advisory metric without values is left out.
    """
    alphas = alpha_split(policy)
    looks: dict[str, list[SequentialLook]] = {}
    for rule in policy.metrics:
        if rule.name not in pairs:  # no values yet: no look, so the gate continues (undecided at the budget)
            continue
        base, cand = pairs[rule.name]
        higher = DIRECTIONS.get(rule.name, True)
        min_n = policy.min_questions
        looks[rule.name] = metric_looks(base, cand, rule.margin, alphas[rule.name], plan, rule.name, higher, min_n)
    if policy.latency:
        lat = policy.latency
        if lat.metric not in pairs:
            return looks
        base, cand = pairs[lat.metric]
        floor = lat.min_speedup * (1 - lat.tolerance)  # the fixed-n gate's floor
        looks[lat.metric] = latency_looks(base, cand, floor, alphas[lat.metric], plan, lat.metric, lat.min_probes)
    return looks


def metric_capital(
    base: np.ndarray, cand: np.ndarray, margin: float, plan: SequentialPlan, higher_is_better: bool = True
) -> np.ndarray:
    """Log capital of the pass-side (up) bet at the non-inferiority boundary after each paired question, as
    its running maximum: the e-process behind `metric_looks`' pass (the test passes at level a once it
    reaches log(1/a)), read whole, without stopping at a decision. 1 / exp(this) is an anytime-valid
    p-value (`eval.gate.family`).
    """
    x, boundary = _metric_unit(base, cand, margin, "metric", higher_is_better)
    up, _ = log_wealth(x, boundary, *plan_bets(x, boundary, plan))
    return np.asarray(up)


def latency_capital(
    base: np.ndarray, cand: np.ndarray, floor: float, plan: SequentialPlan, metric: str = "e2e_cold_s"
) -> np.ndarray:
    """`metric_capital` of the speed-up test of `latency_looks` (clipped log-ratios, the speed-up floor)."""
    raw, span = _latency_logs(base, cand, floor, plan, metric)
    x = (np.clip(raw, -span, span) + span) / (2 * span)
    boundary = (float(np.log(floor)) + span) / (2 * span)
    up, _ = log_wealth(x, boundary, *plan_bets(x, boundary, plan))
    return np.asarray(up)


def gate_capitals(
    pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], policy: GatePolicy, plan: SequentialPlan
) -> dict[str, np.ndarray]:
    """Each deciding test's `metric_capital` / `latency_capital`, keyed as `gate_looks` keys its looks; a test
    without values is left out (no evidence: its p-value is 1).
    """
    capitals: dict[str, np.ndarray] = {}
    for rule in policy.metrics:
        if not rule.advisory and rule.name in pairs and len(pairs[rule.name][0]):
            base, cand = pairs[rule.name]
            capitals[rule.name] = metric_capital(base, cand, rule.margin, plan, DIRECTIONS.get(rule.name, True))
    lat = policy.latency
    if lat and lat.metric in pairs and len(pairs[lat.metric][0]):
        base, cand = pairs[lat.metric]
        floor = lat.min_speedup * (1 - lat.tolerance)
        capitals[lat.metric] = latency_capital(base, cand, floor, plan, lat.metric)
    return capitals


UNBOUNDED = frozenset(
    {"ttft_s", "probe_ttft_s", "e2e_latency_s", "e2e_cold_s", "e2e_paid_s", "prompt_tokens", "compress_seconds"}
    | {"compress_cold_seconds"}
)
"""Stored columns outside [0, 1]: the betting sequence cannot test them as metrics (latency has its own test)."""


def refuse_unbounded(policy: GatePolicy) -> None:
    """A policy metric the sequential gate cannot test, refused before anything is swept."""
    bad = [m.name for m in policy.metrics if m.name in UNBOUNDED]
    if bad:
        raise CribsheetError(
            f"{', '.join(bad)}: not bounded in [0, 1], so the sequential gate cannot test it as a metric; gate "
            "latency with the policy's `latency:` rule, or use the fixed-n gate"
        )


def sequential_decision(looks: Mapping[str, list[SequentialLook]], policy: GatePolicy) -> str:
    """The gate's answer from each deciding test's latest look: fail if any failed, pass if all passed,
    undecided if any spent its budget undecided, otherwise continue.
    """
    deciding = [m.name for m in policy.metrics if not m.advisory]
    if policy.latency:
        deciding.append(policy.latency.metric)
    latest = [looks[name][-1].verdict if looks.get(name) else "continue" for name in deciding]
    if "fail" in latest:
        return "fail"
    if latest and all(v == "pass" for v in latest):
        return "pass"
    return "undecided" if "undecided" in latest else "continue"
