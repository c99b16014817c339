"""The betting math under the sequential gate (`eval.gate.sequential`): each test's error budget, the
predictable bet sizes and their truncation, the running log capital of the up and down bets, the look times, and
the confidence bounds and first decisions that capital gives.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from eval.gate.policy import SequentialPlan

PRIOR_MEAN, PRIOR_VARIANCE = 0.5, 0.25
"""The paper's regularisation: one pseudo-observation of mean 1/2 and variance 1/4 before the first."""


class SideAlphas(BaseModel):
    """The error budget of one test: the chance of a false pass and of a false fail, over all looks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pass_alpha: float = Field(gt=0.0, lt=1.0)
    """Chance the test ever passes while the truth sits at or beyond the boundary on the worse side."""
    fail_alpha: float = Field(gt=0.0, lt=1.0)
    """Chance the test ever fails while the truth sits at or beyond the boundary on the better side."""


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
