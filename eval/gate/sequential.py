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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError
from eval.gate.policy import GatePolicy, SequentialPlan
from eval.metrics import DIRECTIONS

VERDICTS = ("pass", "fail", "continue", "undecided")
"""pass / fail: decided (final); continue: look again after the next batch; undecided: the budget is spent."""

PRIOR_MEAN, PRIOR_VARIANCE = 0.5, 0.25
"""The paper's regularisation: one pseudo-observation of mean 1/2 and variance 1/4 before the first."""


class SideAlphas(BaseModel):
    """The error budget of one test: the chance of a false pass and of a false fail, over all looks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pass_alpha: float = Field(gt=0.0, lt=1.0)
    """Chance the test ever passes while the truth sits at or beyond the boundary on the worse side."""
    fail_alpha: float = Field(gt=0.0, lt=1.0)
    """Chance the test ever fails while the truth sits at or beyond the boundary on the better side."""


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


def _running(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The paper's regularised running mean and variance before each value (predictable: x_1..x_{i-1})."""
    t = np.arange(1, x.shape[-1] + 1)
    mean = (PRIOR_MEAN + np.cumsum(x, axis=-1)) / (t + 1)
    var = (PRIOR_VARIANCE + np.cumsum((x - mean) ** 2, axis=-1)) / (t + 1)
    first = np.ones(x.shape[:-1] + (1,))
    mean_before = np.concatenate([first * PRIOR_MEAN, mean[..., :-1]], axis=-1)
    var_before = np.concatenate([first * PRIOR_VARIANCE, var[..., :-1]], axis=-1)
    return mean_before, var_before


def bet_sizes(x: np.ndarray, boundary: float) -> np.ndarray:
    """Predictable bet magnitudes along the last axis: the approximate GRAPA bet at `boundary` from the values
    before each one (the paper's regularised running mean and variance).
    """
    mean_before, var_before = _running(x)
    gap = mean_before - boundary
    bets: np.ndarray = np.abs(gap) / (var_before + gap * gap)
    return bets


STEADY_CAP = 0.95
"""The `steady` bet's largest truncation: a bet never stakes more than 95 % of what one value could lose."""


def steady_truncation(x: np.ndarray, truncation: float) -> np.ndarray:
    """Predictable per-step truncation of the `steady` bet: the plan's `truncation` while the values spread
    (running SD >= (1 - truncation) / 2, e.g. 0.25 at c = 1/2), rising towards `STEADY_CAP` as the running SD
    falls to 0. A bet capped at c_i / m with c_i < 1 and chosen from earlier values only keeps every capital a
    nonnegative (super)martingale, so the error rates hold as for a constant c; it is what lets a metric whose
    paired differences are small and steady decide in tens of questions (docs/sequential.md).
    """
    _, var_before = _running(x)
    caps: np.ndarray = np.clip(1 - 2 * np.sqrt(var_before), truncation, STEADY_CAP)
    return caps


MIXTURE = 14
"""Constant bets in the `mixture` bet: the truncation c/m times 2^(-k/2), k = 0..13 (down to about c/m / 90)."""


def log_wealth(
    x: np.ndarray, m: np.ndarray | float, bets: np.ndarray | None, truncation: float | np.ndarray
) -> tuple[np.ndarray, ...]:
    """Running maxima of the log capital of the up and down bets against mean `m` (x: (..., n) in [0, 1]; m
    broadcasts against x, e.g. a grid of shape (g, 1) against one path). `bets`: the adaptive bets of
    `bet_sizes`; None: the `mixture` of constant bets. `truncation`: c, or one predictable c_i per step.
    """
    m = np.asarray(m, dtype=float)
    with np.errstate(divide="ignore"):  # m = 0 or 1: that side needs no cap
        up_cap, down_cap = truncation / m, truncation / (1 - m)
    if bets is not None:
        up = np.cumsum(np.log1p(np.minimum(bets, up_cap) * (x - m)), axis=-1)
        down = np.cumsum(np.log1p(-np.minimum(bets, down_cap) * (x - m)), axis=-1)
    else:
        up = down = np.full(np.broadcast_shapes(np.shape(x), np.shape(m)), -np.inf)
        for k in range(MIXTURE):  # log of the mean capital, one constant bet at a time (bounded memory)
            fraction = 2.0 ** (-k / 2)
            with np.errstate(invalid="ignore"):  # m = 0 or 1: an infinite cap; that side's capital is not used
                up_k = np.cumsum(np.log1p(np.minimum(up_cap * fraction, 1e9) * (x - m)), axis=-1)
                down_k = np.cumsum(np.log1p(-np.minimum(down_cap * fraction, 1e9) * (x - m)), axis=-1)
            up, down = np.logaddexp(up, up_k), np.logaddexp(down, down_k)
        up, down = up - np.log(MIXTURE), down - np.log(MIXTURE)
    return np.maximum.accumulate(up, axis=-1), np.maximum.accumulate(down, axis=-1)


def plan_bets(x: np.ndarray, boundary: float, plan: SequentialPlan) -> tuple[np.ndarray | None, float | np.ndarray]:
    """The bets and truncation `log_wealth` takes under `plan`: adaptive bets (under the plan's truncation,
    or, `steady`, under the variance-adaptive one), or None for the mixture.
    """
    if plan.bet == "mixture":
        return None, plan.truncation
    truncation = steady_truncation(x, plan.truncation) if plan.bet == "steady" else plan.truncation
    return bet_sizes(x, boundary), truncation


def look_times(n: int, plan: SequentialPlan) -> list[int]:
    """The n of each look with n paired questions in hand: every `batch`, the last one at the budget."""
    last = min(n, plan.budget)
    times = list(range(plan.batch, last + 1, plan.batch))
    if last == plan.budget and (not times or times[-1] != last):
        times.append(last)
    return times


def first_decisions(
    diffs: np.ndarray, margin: float, alphas: SideAlphas, plan: SequentialPlan
) -> tuple[np.ndarray, np.ndarray]:
    """Many paths at once (diffs: (paths, n) paired differences of a higher-is-better metric, in [-1, 1]): each
    path's verdict at its first decisive look (pass / fail, else undecided at the budget or continue) and the
    n it stopped at. Exactly the rule of `metric_looks`, vectorised for simulation: by the capitals'
    monotonicity in m it needs the boundary's capital only.
    """
    x, boundary = (np.asarray(diffs, dtype=float) + 1) / 2, (1 - margin) / 2
    times = np.array(look_times(x.shape[-1], plan), dtype=int)
    if len(times) == 0:
        return np.full(x.shape[0], "continue"), np.zeros(x.shape[0], dtype=int)
    x = x[:, : times[-1]]
    up, down = log_wealth(x, boundary, *plan_bets(x, boundary, plan))
    passed = up[:, times - 1] >= np.log(1 / alphas.pass_alpha)
    failed = down[:, times - 1] >= np.log(1 / alphas.fail_alpha)
    decided = passed | failed
    first = np.where(decided.any(axis=1), decided.argmax(axis=1), len(times) - 1)
    rows = np.arange(x.shape[0])
    p, f = passed[rows, first], failed[rows, first]
    end = "undecided" if times[-1] == plan.budget else "continue"
    verdict = np.where(p & ~f, "pass", np.where(f & ~p, "fail", np.where(p & f, "undecided", end)))
    return verdict, times[first]


def _unit_bounds(
    x: np.ndarray, boundary: float, alphas: SideAlphas, plan: SequentialPlan, times: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The CS of a path in [0, 1] at each of `times` (lower, upper), on a grid that holds the boundary: the
    largest value the up bet has rejected (0 when none yet) and the smallest the down bet has (1 when none).
    """
    x = x[: times[-1]]
    grid = np.union1d(np.linspace(0.0, 1.0, plan.grid + 1), [boundary])
    bets, truncation = plan_bets(x, boundary, plan)
    cols = np.array(times) - 1
    up_hit = np.zeros((len(grid), len(times)), dtype=bool)
    down_hit = np.zeros_like(up_hit)
    for start in range(0, len(grid), 256):  # bounded memory: 256 grid rows at a time
        block = grid[start : start + 256, None]
        up, down = log_wealth(x, block, bets, truncation)
        up_hit[start : start + 256] = up[:, cols] >= np.log(1 / alphas.pass_alpha)
        down_hit[start : start + 256] = down[:, cols] >= np.log(1 / alphas.fail_alpha)
    # Each capital is monotone in m, so the rejected values are a prefix (up) and a suffix (down) of the grid.
    lower = np.where(up_hit.any(axis=0), np.where(up_hit, grid[:, None], 0.0).max(axis=0), 0.0)
    upper = np.where(down_hit.any(axis=0), np.where(down_hit, grid[:, None], 1.0).min(axis=0), 1.0)
    return lower, upper


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
    base, cand = _checked(base, cand, metric)
    if np.any(base <= 0) or np.any(cand <= 0):
        raise CribsheetError(f"{metric}: latencies must be positive (drop questions without a measurement first)")
    span = float(np.log(plan.latency_bound))
    if not -span < np.log(floor) < span:
        raise CribsheetError(
            f"{metric}: speed-up floor {floor:g} lies outside the assumed per-question bound "
            f"[1/{plan.latency_bound:g}, {plan.latency_bound:g}]; raise SequentialPlan.latency_bound"
        )
    raw = np.log(base / cand)
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
