"""The sequential gate: a confidence sequence valid at every n at once, decisions that stop early when the
answer is clear, and the same looks from the same inputs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from corpus.errors import CribsheetError
from eval.gate import GatePolicy, LatencyRule, MetricRule
from eval.gate.sequential import (
    SequentialPlan,
    SideAlphas,
    alpha_split,
    confidence_sequence,
    first_decisions,
    gate_looks,
    latency_looks,
    metric_looks,
    sequential_decision,
)

ALPHAS = SideAlphas(pass_alpha=0.025, fail_alpha=0.025)
PLAN = SequentialPlan(batch=10, budget=2000)
Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def contained(p_base: float, p_cand: float, agree: float) -> Draw:
    """0/1 outcomes (answer contained or not); the candidate copies the baseline with chance `agree`, else
    draws its own: true mean difference (1 - agree) * (p_cand - p_base)."""

    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        base = (rng.random(n) < p_base).astype(float)
        own = (rng.random(n) < p_cand).astype(float)
        return base, np.where(rng.random(n) < agree, base, own)

    return draw


def recall(a_cand: float) -> Draw:
    """Continuous recalls: baseline Beta(2, 2), candidate Beta(a, 2): true difference a / (a + 2) - 1/2."""

    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.beta(2, 2, n), rng.beta(a_cand, 2, n)

    return draw


@pytest.mark.parametrize(
    ("draw", "truth", "margin", "bet", "runs"),
    [
        (contained(0.6, 0.2, 0.5), -0.2, 0.03, "adaptive", 500),  # far below the boundary the bets are tuned to
        (recall(2.0), 0.0, 0.0, "adaptive", 500),  # on it
        (recall(3.0), 0.1, 0.03, "adaptive", 500),  # above it
        (recall(3.0), 0.1, 0.03, "mixture", 150),  # the mixture of constant bets (slower to compute)
    ],
)
def test_the_sequence_covers_the_true_mean_at_every_n_at_once(
    draw: Draw, truth: float, margin: float, bet: str, runs: int
) -> None:
    """Seeded runs of 400 pairs, a look after every pair: the share of runs whose sequence held the true
    mean at all 400 looks at once is at least 1 - alpha (alpha 0.05 here, split 0.025 a side)."""
    plan = SequentialPlan(batch=1, budget=400, grid=200 if bet == "adaptive" else 50, bet=bet)  # type: ignore[arg-type]
    covered = 0
    for seed in range(runs):
        base, cand = draw(np.random.default_rng(seed), 400)
        n, lower, upper = confidence_sequence(base, cand, margin, ALPHAS, plan)
        assert n.tolist() == list(range(1, 401))
        covered += bool(np.all((lower < truth) & (truth < upper)))
    assert covered / runs >= 0.95


def test_a_clear_winner_passes_well_before_the_budget() -> None:
    base, cand = contained(0.5, 0.9, 0.5)(np.random.default_rng(1), PLAN.budget)  # +0.2 against a 0.03 margin
    looks = metric_looks(base, cand, 0.03, ALPHAS, PLAN, "answer_contains")
    assert looks[-1].verdict == "pass" and looks[-1].n <= 300
    assert all(look.verdict == "continue" for look in looks[:-1])
    assert looks[-1].lower >= -0.03 - 1e-9 and looks[-1].lower < looks[-1].estimate < looks[-1].upper  # on the grid
    assert [look.n for look in looks] == list(range(10, looks[-1].n + 1, 10))


def test_a_clear_loser_fails_and_a_near_tie_runs_to_the_budget_undecided() -> None:
    base, cand = contained(0.6, 0.2, 0.5)(np.random.default_rng(2), PLAN.budget)  # -0.2
    looks = metric_looks(base, cand, 0.03, ALPHAS, PLAN)
    assert looks[-1].verdict == "fail" and looks[-1].n <= 300 and looks[-1].upper <= -0.03
    plan = SequentialPlan(batch=50, budget=430)  # the last look is at the budget, off the batch grid
    base, cand = contained(0.5, 0.5, 0.5)(np.random.default_rng(3), 1000)
    looks = metric_looks(base, cand, 0.03, ALPHAS, plan)
    assert looks[-1].verdict == "undecided" and looks[-1].n == 430
    assert [look.n for look in looks][-2:] == [400, 430]


def test_the_same_inputs_give_the_same_looks() -> None:
    base, cand = contained(0.5, 0.55, 0.4)(np.random.default_rng(4), 1500)
    first = metric_looks(base, cand, 0.03, ALPHAS, PLAN)
    again = metric_looks(base.copy(), cand.copy(), 0.03, ALPHAS, PLAN)
    assert [look.model_dump() for look in first] == [look.model_dump() for look in again]


@pytest.mark.parametrize("bet", ["adaptive", "mixture", "steady"])
def test_the_vectorised_rule_decides_as_the_looks_do(bet: str) -> None:
    """`first_decisions` (the benchmark's) gives each path the verdict and n of its last look."""
    rng = np.random.default_rng(5)
    paths = [contained(0.5, p, 0.5)(rng, 600) for p in (0.3, 0.45, 0.5, 0.56, 0.7) for _ in range(4)]
    plan = SequentialPlan(batch=10, budget=600, grid=100, bet=bet)  # type: ignore[arg-type]
    verdicts, n = first_decisions(np.array([c - b for b, c in paths]), 0.03, ALPHAS, plan)
    expected = [metric_looks(b, c, 0.03, ALPHAS, plan)[-1] for b, c in paths]
    assert verdicts.tolist() == [look.verdict for look in expected]
    assert n.tolist() == [look.n for look in expected]
    assert {"pass", "fail"} <= set(verdicts.tolist())


@pytest.mark.parametrize("bet", ["adaptive", "mixture", "steady"])
def test_false_passes_at_the_boundary_stay_under_alpha(bet: str) -> None:
    """2,000 paths whose true difference is exactly -margin, looked at every 10 pairs up to 1,000."""
    rng = np.random.default_rng(6)
    d = rng.choice([-1.0, 0.0, 1.0], size=(2000, 1000), p=[0.25 + 0.015, 0.5, 0.25 - 0.015])  # mean -0.03
    verdicts, _ = first_decisions(d, 0.03, ALPHAS, SequentialPlan(budget=1000, bet=bet))  # type: ignore[arg-type]
    assert np.mean(verdicts == "pass") <= 0.025


def test_the_mixture_passes_more_near_ties_within_a_large_budget_and_fewer_clear_winners_within_a_small_one() -> None:
    """The trade-off docs/sequential.md measures, on synthetic paths: the mixture of constant bets has more
    power over thousands of questions, the adaptive bet decides a small sample sooner."""
    rng = np.random.default_rng(8)
    near = rng.choice([-1.0, 0.0, 1.0], size=(400, 3000), p=[0.25, 0.5, 0.25])  # a tie against a 0.03 margin
    clear = rng.choice([-1.0, 0.0, 1.0], size=(4000, 50), p=[0.15, 0.5, 0.35])  # +0.2 against a 0.10 margin

    def passed(d: np.ndarray, margin: float, bet: str) -> float:
        plan = SequentialPlan(budget=d.shape[1], bet=bet)  # type: ignore[arg-type]
        return float(np.mean(first_decisions(d, margin, ALPHAS, plan)[0] == "pass"))

    assert passed(near, 0.03, "mixture") > passed(near, 0.03, "adaptive")
    assert passed(clear, 0.10, "adaptive") > passed(clear, 0.10, "mixture")


def test_edge_cases_one_pair_equal_differences_and_the_extremes() -> None:
    one = metric_looks(np.array([0.5]), np.array([0.5]), 0.03, ALPHAS, SequentialPlan(batch=1))
    assert len(one) == 1 and one[0].n == 1 and one[0].verdict == "continue"
    assert metric_looks(np.array([0.5]), np.array([0.5]), 0.03, ALPHAS, PLAN) == []  # no full batch yet
    same = np.full(2000, 0.7)
    tie = metric_looks(same, same, 0.03, ALPHAS, PLAN)  # every difference 0: inside the margin, so it passes
    assert tie[-1].verdict == "pass" and tie[-1].estimate == 0.0
    tie_at_boundary = metric_looks(same, same, 0.0, ALPHAS, SequentialPlan(budget=500))  # 0 is the boundary
    assert tie_at_boundary[-1].verdict == "undecided" and tie_at_boundary[-1].lower < 0 < tie_at_boundary[-1].upper
    best = metric_looks(np.zeros(100), np.ones(100), 0.03, ALPHAS, PLAN)
    worst = metric_looks(np.ones(100), np.zeros(100), 0.03, ALPHAS, PLAN)
    assert (best[-1].verdict, best[-1].estimate) == ("pass", 1.0) and best[-1].n <= 20
    assert (worst[-1].verdict, worst[-1].estimate) == ("fail", -1.0) and worst[-1].n <= 20
    assert -1.0 <= worst[-1].lower <= worst[-1].upper <= -0.03


def test_values_outside_the_unit_interval_or_unpaired_are_refused() -> None:
    with pytest.raises(CribsheetError, match=r"answer_token_recall: values must lie in \[0, 1\]"):
        metric_looks(np.array([0.5, 1.5]), np.array([0.5, 0.5]), 0.03, ALPHAS, PLAN, "answer_token_recall")
    with pytest.raises(CribsheetError, match="equally long"):
        metric_looks(np.array([0.5]), np.array([0.5, 0.5]), 0.03, ALPHAS, PLAN)
    with pytest.raises(CribsheetError, match="finite"):
        metric_looks(np.array([np.nan]), np.array([0.5]), 0.03, ALPHAS, PLAN)


def test_a_lower_is_better_metric_is_judged_on_its_improvement() -> None:
    base, cand = contained(0.5, 0.1, 0.5)(np.random.default_rng(7), 1000)  # candidate's values 0.2 lower
    looks = metric_looks(base, cand, 0.03, ALPHAS, PLAN, higher_is_better=False)
    assert looks[-1].verdict == "pass" and looks[-1].threshold == 0.03
    assert looks[-1].upper <= 0.03 and looks[-1].estimate < 0


def test_latency_passes_a_real_speed_up_fails_a_slow_down_and_counts_clipped_pairs() -> None:
    rng = np.random.default_rng(8)
    base = rng.lognormal(0.0, 0.3, 600)
    faster = latency_looks(base, base / 1.5 * rng.lognormal(0, 0.2, 600), 0.95, ALPHAS, PLAN)
    assert faster[-1].verdict == "pass" and faster[-1].lower >= 0.95 and 1.3 < faster[-1].estimate < 1.7
    slower = latency_looks(base, base * 1.3 * rng.lognormal(0, 0.2, 600), 0.95, ALPHAS, PLAN)
    assert slower[-1].verdict == "fail" and slower[-1].upper <= 0.95
    cand = base / 1.5
    cand[:5] = base[:5] * 100  # five questions 100x slower: beyond the 20x bound, clipped and counted
    clipped = latency_looks(base, cand, 0.95, ALPHAS, PLAN)
    assert clipped[0].clipped == 5
    with pytest.raises(CribsheetError, match="outside the assumed per-question bound"):
        latency_looks(base, base, 30.0, ALPHAS, PLAN)
    with pytest.raises(CribsheetError, match="positive"):
        latency_looks(np.zeros(10), np.ones(10), 0.95, ALPHAS, PLAN)


POLICY = GatePolicy(
    confidence=0.95,
    metrics=[
        MetricRule(name="answer_token_recall", margin=0.03),
        MetricRule(name="context_token_recall", margin=0.05),
        MetricRule(name="faithfulness", margin=0.05, advisory=True),
    ],
    latency=LatencyRule(metric="e2e_cold_s", min_speedup=1.0, tolerance=0.05),
)


def test_the_pass_side_is_not_split_and_the_fail_side_is_split_over_the_deciding_tests() -> None:
    split = alpha_split(POLICY)
    assert set(split) == {"answer_token_recall", "context_token_recall", "faithfulness", "e2e_cold_s"}
    for name in ("answer_token_recall", "context_token_recall", "e2e_cold_s"):
        assert split[name].pass_alpha == pytest.approx(0.025) and split[name].fail_alpha == pytest.approx(0.025 / 3)
    assert (split["faithfulness"].pass_alpha, split["faithfulness"].fail_alpha) == pytest.approx((0.025, 0.025))


def test_the_gate_passes_when_every_deciding_test_passes_and_fails_when_one_fails() -> None:
    rng = np.random.default_rng(9)
    good = contained(0.5, 0.9, 0.5)(rng, 1000)
    lat = rng.lognormal(0, 0.3, 1000)
    pairs = {"answer_token_recall": good, "context_token_recall": good, "e2e_cold_s": (lat, lat / 2)}
    looks = gate_looks(pairs, POLICY, PLAN)
    assert "faithfulness" not in looks  # advisory and not given
    assert sequential_decision(looks, POLICY) == "pass"
    slow = gate_looks(pairs | {"e2e_cold_s": (lat, lat * 2)}, POLICY, PLAN)
    assert sequential_decision(slow, POLICY) == "fail"
    early = gate_looks({name: (b[:20], c[:20]) for name, (b, c) in pairs.items()}, POLICY, PLAN)
    assert sequential_decision(early, POLICY) == "continue"
    # A deciding metric without values has no looks yet: the gate goes on (undecided at its budget, as the
    # fixed-n gate), whatever the others say.
    silent = gate_looks({"answer_token_recall": good, "e2e_cold_s": (lat, lat / 2)}, POLICY, PLAN)
    assert "context_token_recall" not in silent and sequential_decision(silent, POLICY) == "continue"


def test_the_steady_bet_decides_a_metric_that_barely_moves_in_tens_of_questions() -> None:
    """95 % of pairs equal, the rest within +-0.2 (as good): the steady bet passes a 0.05 margin within 120
    questions where the fixed-truncation bet needs about 150; with 5 % of pairs losing everything (the mean
    exactly at -margin, the case that punishes a bet grown bold on steady pairs) it passes at most alpha."""
    rng = np.random.default_rng(11)
    steady = np.where(rng.random((2000, 400)) < 0.95, 0.0, rng.uniform(-0.2, 0.2, (2000, 400)))
    fast = SequentialPlan(batch=1, budget=400, bet="steady")
    slow = SequentialPlan(batch=1, budget=400, bet="adaptive")
    verdict, n = first_decisions(steady, 0.05, ALPHAS, fast)
    assert np.mean(verdict == "pass") == 1.0 and np.quantile(n, 0.9) <= 120
    verdict, n_adaptive = first_decisions(steady, 0.05, ALPHAS, slow)
    assert np.mean(n_adaptive) > 1.3 * np.mean(n)
    lossy = np.where(rng.random((4000, 1000)) < 0.05, -1.0, 0.0)
    verdict, _ = first_decisions(lossy, 0.05, ALPHAS, SequentialPlan(batch=1, budget=1000, bet="steady"))
    assert np.mean(verdict == "pass") <= 0.025


def test_no_pass_before_the_policys_minimum_and_a_clipped_latency_pair_refuses_a_pass() -> None:
    zeros = np.zeros(300)
    plan = SequentialPlan(batch=1, budget=300)
    early = metric_looks(zeros, zeros, 0.05, ALPHAS, plan)
    assert early[-1].verdict == "pass" and early[-1].n < 120
    held = metric_looks(zeros, zeros, 0.05, ALPHAS, plan, min_n=120)
    assert held[-1].verdict == "pass" and held[-1].n == 120
    assert all(look.verdict == "continue" for look in held[:-1])
    rng = np.random.default_rng(9)
    base = rng.lognormal(0.0, 0.1, 300)
    cand = base / 3
    assert latency_looks(base, cand, 0.95, ALPHAS, plan, min_n=30)[-1].n == 30  # clear, but held to 30
    cand[0] = base[0] * 100  # one pair beyond the 20x bound: the stated error rates no longer hold
    clipped = latency_looks(base, cand, 0.95, ALPHAS, plan)
    assert clipped[-1].clipped == 1 and clipped[-1].verdict == "undecided"
    policy = POLICY.model_copy(update={"min_questions": 50})
    looks = gate_looks({"answer_token_recall": (zeros, zeros), "context_token_recall": (zeros, zeros),
                        "e2e_cold_s": (base, base / 3)}, policy, plan)  # fmt: skip
    assert looks["answer_token_recall"][-1].n >= 50 and looks["e2e_cold_s"][-1].n >= policy.latency.min_probes  # type: ignore[union-attr]
