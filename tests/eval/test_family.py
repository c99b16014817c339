"""Error control across the grid: Holm's step-down over the candidates' p-values, the fixed-n p-value that
inverts the gate's own interval, and the sequential gate's anytime-valid p-value 1 / running max capital."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.errors import CribsheetError
from eval.gate import GatePolicy, LatencyRule, MetricRule
from eval.gate.family import (
    CandidateResult,
    anytime_p_values,
    family_verdicts,
    fixed_p_value,
    holm_adjusted,
    latency_p_value,
    metric_p_value,
    pass_level,
    sequential_p_value,
)
from eval.gate.policy import SequentialPlan
from eval.gate.sequential import (
    SideAlphas,
    alpha_split,
    first_decisions,
    gate_capitals,
    metric_capital,
    metric_looks,
)
from eval.gate.statistics import judge_latency, judge_metric

MARGIN = 0.05


@pytest.mark.parametrize(
    ("p", "adjusted", "passed"),
    [
        # Holm (1979)'s rule on four tests at 0.05: 0.005 <= 0.05/4, 0.01 <= 0.05/3, then 0.03 > 0.05/2 stops it
        ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02], [True, False, False, True]),
        # step-down passes all four where Bonferroni (0.05/4 = 0.0125 each) passes two
        ([0.001, 0.012, 0.014, 0.03], [0.004, 0.036, 0.036, 0.036], [True, True, True, True]),
        # the first test that fails its threshold stops the procedure: 0.04 <= 0.05 is not passed
        ([0.01, 0.03, 0.04], [0.03, 0.06, 0.06], [True, False, False]),
        # one test: no adjustment
        ([0.049], [0.049], [True]),
        # adjusted values are capped at 1; ties get the same adjusted value
        ([0.5, 0.6, 0.02, 0.02], [1.0, 1.0, 0.08, 0.08], [False, False, False, False]),
    ],
)
def test_holm_step_down_on_textbook_p_values(p: list[float], adjusted: list[float], passed: list[bool]) -> None:
    got = holm_adjusted(p)
    np.testing.assert_allclose(got, adjusted)
    assert (got <= 0.05).tolist() == passed
    rows = holm_adjusted(np.array([p, p[::-1]]))  # vectorised: row by row
    np.testing.assert_allclose(rows, [adjusted, adjusted[::-1]])


def test_holm_refuses_values_outside_zero_one_and_leaves_an_empty_grid_empty() -> None:
    assert holm_adjusted([]).shape == (0,)
    with pytest.raises(CribsheetError, match=r"\[0, 1\]"):
        holm_adjusted([0.2, 1.5])


def test_only_passes_are_adjusted_and_k_counts_every_candidate() -> None:
    cands = [
        CandidateResult(name="fast", p_value=0.001, verdict="pass"),
        CandidateResult(name="close", p_value=0.02, verdict="pass"),
        CandidateResult(name="worse", p_value=0.9, verdict="fail"),
        CandidateResult(name="noisy", p_value=0.3, verdict="undecided"),
    ]
    verdicts = {v.name: v for v in family_verdicts(cands, 0.025)}
    assert verdicts["fast"].adjusted_verdict == "pass"  # 0.001 * 4 <= 0.025
    assert verdicts["close"].verdict == "pass"  # alone it passes ...
    assert verdicts["close"].adjusted_verdict == "undecided"  # ... but 0.02 * 3 > 0.025
    assert verdicts["close"].adjusted_p == pytest.approx(0.06)
    assert (verdicts["worse"].adjusted_verdict, verdicts["noisy"].adjusted_verdict) == ("fail", "undecided")
    looking = family_verdicts(cands, 0.025, held="continue")
    assert [v.adjusted_verdict for v in looking] == ["pass", "continue", "fail", "undecided"]
    # alone, a candidate is its own gate
    assert family_verdicts(cands[1:2], 0.025)[0].adjusted_verdict == "pass"
    with pytest.raises(CribsheetError, match="once each"):
        family_verdicts([cands[0], cands[0]], 0.025)


def _pairs(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if kind == "binary":
        base = (rng.random(n) < 0.5).astype(float)
        return base, np.where(rng.random(n) < 0.6, base, (rng.random(n) < 0.47).astype(float))
    if kind == "continuous":
        base = rng.beta(2, 2, n)
        return base, np.clip(base + rng.normal(-0.01, 0.1, n), 0, 1)
    if kind == "rare":  # mostly equal pairs, rare gains, rarer losses: a skewed bootstrap (BCa's acceleration)
        return (rng.random(n) < 0.02).astype(float), (rng.random(n) < 0.06).astype(float)
    base = rng.random(n)
    return base, base  # every difference 0: BCa is degenerate and the gate reads the percentile interval


@pytest.mark.parametrize("kind", ["binary", "continuous", "rare", "equal"])
@pytest.mark.parametrize("name", ["answer_token_recall", "e2e_latency_s"])
def test_the_fixed_n_p_value_passes_at_a_exactly_when_the_gates_interval_does(kind: str, name: str) -> None:
    rng = np.random.default_rng(len(kind) + len(name))
    checked = passes = 0
    for trial in range(12):
        base, cand = _pairs(kind, int(rng.choice([12, 40, 150])), rng)
        rule = MetricRule(name=name, margin=float(rng.choice([0.0, 0.02, 0.05])))
        policy = GatePolicy(resamples=400, seed=trial, latency=None, metrics=[rule])
        p = metric_p_value(rule, base, cand, policy)
        assert 0.0 <= p <= 1.0
        # one set of bootstrap draws serves every confidence: the p-value inverts each level's interval
        for confidence in (0.8, 0.9, 0.95, 0.99):
            at = policy.model_copy(update={"confidence": confidence})
            verdict = judge_metric(rule, base, cand, at).verdict
            assert (p <= pass_level(at)) == (verdict == "pass"), (trial, confidence, p, verdict)
            checked, passes = checked + 1, passes + (verdict == "pass")
    assert checked == 48 and (kind == "equal" or 0 < passes < checked)


def test_the_latency_p_value_passes_exactly_when_the_speed_up_interval_does() -> None:
    rng = np.random.default_rng(5)
    rule, seen = LatencyRule(min_speedup=1.0, tolerance=0.05), set()
    for trial in range(60):
        speedups = np.exp(rng.normal(rng.normal(0.0, 0.1), 0.25, int(rng.choice([5, 30, 120]))))
        policy = GatePolicy(resamples=500, seed=trial)
        verdict = judge_latency(rule, speedups, policy).verdict
        assert (latency_p_value(rule, speedups, policy) <= pass_level(policy)) == (verdict == "pass")
        seen.add(verdict)
    assert seen == {"pass", "fail", "undecided"}


def test_a_candidates_p_value_is_its_largest_deciding_tests_and_a_test_without_values_gives_one() -> None:
    rng = np.random.default_rng(2)
    rules = [MetricRule(name="answer_token_recall", margin=0.05), MetricRule(name="context_token_recall", margin=0.05)]
    latency = LatencyRule(min_probes=30)
    policy = GatePolicy(resamples=400, latency=latency, metrics=rules)
    pairs = {"answer_token_recall": _pairs("binary", 200, rng), "context_token_recall": _pairs("continuous", 200, rng)}
    speedups = np.exp(rng.normal(0.3, 0.2, 60))
    each = [metric_p_value(r, *pairs[r.name], policy) for r in rules] + [latency_p_value(latency, speedups, policy)]
    assert fixed_p_value(pairs, policy, speedups) == max(each)
    assert fixed_p_value(pairs, policy, speedups[:10]) == 1.0  # fewer probes than min_probes: no evidence
    advisory = policy.model_copy(
        update={"latency": None, "metrics": [rules[0], rules[1].model_copy(update={"advisory": True})]}
    )
    assert fixed_p_value(pairs, advisory) == each[0]  # an advisory metric decides nothing


def test_the_anytime_p_value_is_one_over_the_running_max_and_never_increases() -> None:
    np.testing.assert_allclose(
        anytime_p_values([0.0, 1.0, 0.5, 2.0, -1.0, -3.0]),
        [1.0, np.exp(-1), np.exp(-1), np.exp(-2), np.exp(-2), np.exp(-2)],
    )
    assert anytime_p_values([-0.5])[0] == 1.0  # capital below its start: p = 1, never above
    rng = np.random.default_rng(9)
    plan, alphas = SequentialPlan(batch=10, budget=400), SideAlphas(pass_alpha=0.025, fail_alpha=0.025)
    for shift in (0.1, 0.0, -MARGIN):
        base = rng.beta(2, 2, 400)
        cand = np.clip(base + shift + rng.normal(0, 0.2, 400), 0, 1)
        capital = metric_capital(base, cand, MARGIN, plan)
        p = anytime_p_values(capital)
        assert np.all(np.diff(p) <= 0)
        np.testing.assert_allclose(p, np.minimum(1.0, 1.0 / np.maximum.accumulate(np.exp(capital))))
        # p <= pass_alpha exactly at the look the sequential gate passes (unless it failed first)
        looks = metric_looks(base, cand, MARGIN, alphas, plan)
        for look in looks:
            assert (p[look.n - 1] <= alphas.pass_alpha) == (look.verdict == "pass"), (shift, look)
    lone = GatePolicy(latency=None, metrics=[MetricRule(name="answer_token_recall", margin=MARGIN)])
    capitals = gate_capitals({"answer_token_recall": (base, cand)}, lone, plan)
    assert sequential_p_value(capitals, lone) == p[-1]
    assert sequential_p_value({}, lone) == 1.0


def _boundary_grid(rng: np.random.Generator, trials: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`trials` grids of k candidates exactly at the boundary against one shared baseline per trial: 0/1
    outcomes, each candidate keeps the baseline's outcome on half the questions and draws its own (0.5 - 2
    margin) on the rest, so its true difference is -margin."""
    base = (rng.random((trials, n)) < 0.5).astype(float)
    own = (rng.random((trials, k, n)) < 0.5 - 2 * MARGIN).astype(float)
    return base, np.where(rng.random((trials, k, n)) < 0.5, base[:, None, :], own)


def _false_passes(p: np.ndarray, verdicts: np.ndarray, level: float) -> tuple[float, float]:
    """Family-wise false-pass rate of gating one by one and of Holm: every candidate is at the boundary."""
    alone = float(np.mean((verdicts == "pass").any(axis=1)))
    holm = np.mean(
        [
            any(
                v.adjusted_verdict == "pass"
                for v in family_verdicts(
                    [
                        CandidateResult(name=f"c{i}", p_value=pi, verdict=vi)
                        for i, (pi, vi) in enumerate(zip(row, verdict_row, strict=True))
                    ],
                    level,
                )
            )
            for row, verdict_row in zip(p, verdicts, strict=True)
        ]
    )
    return alone, float(holm)


def test_holm_holds_the_family_wise_false_pass_of_the_sequential_grid_where_gating_one_by_one_does_not() -> None:
    """5 candidates exactly at the boundary, 400 seeded trials, the sequential gate at a = 0.05: gated one by
    one, some candidate passes in about 1 - (1 - a')^5 of the trials (a' the one-candidate false-pass rate);
    Holm over the anytime-valid p-values keeps it at most a. Each candidate's p-value is read at the budget
    without stopping it at a fail (never larger than the frozen one the gate keeps): the check is conservative.
    """
    trials, k, policy = (
        400,
        5,
        GatePolicy(confidence=0.9, latency=None, metrics=[MetricRule(name="answer_contains", margin=MARGIN)]),
    )
    level, plan = pass_level(policy), SequentialPlan(batch=10, budget=600)
    base, cands = _boundary_grid(np.random.default_rng(58), trials, k, plan.budget)
    alphas = alpha_split(policy)["answer_contains"]
    verdicts = np.stack([first_decisions(cands[:, i] - base, MARGIN, alphas, plan)[0] for i in range(k)], axis=1)
    p = np.array(
        [
            [anytime_p_values(metric_capital(base[t], cands[t, i], MARGIN, plan))[-1] for i in range(k)]
            for t in range(trials)
        ]
    )
    alone, holm = _false_passes(p, verdicts, level)
    se = np.sqrt(level * (1 - level) / trials)  # Monte Carlo standard error of a rate at the level
    assert alone > level + 2 * se, alone  # one by one: the grid's false passes exceed a
    assert holm <= level + 2 * se, holm  # Holm: within a (and Monte Carlo error)


def test_holm_brings_the_fixed_n_grids_false_passes_back_to_about_one_comparisons() -> None:
    """The same grid under the fixed-n gate (the bootstrap p-value, n = 100, 400 draws): one by one, some
    candidate passes in well over a of the trials; with Holm about a, up to the bootstrap's own excess at
    small n (docs/sequential.md)."""
    trials, k, rule = 400, 5, MetricRule(name="answer_contains", margin=MARGIN)
    policy = GatePolicy(confidence=0.9, resamples=400, latency=None, metrics=[rule])
    level = pass_level(policy)
    base, cands = _boundary_grid(np.random.default_rng(58), trials, k, 100)
    p = np.array(
        [
            [metric_p_value(rule, base[t], cands[t, i], policy.model_copy(update={"seed": t})) for i in range(k)]
            for t in range(trials)
        ]
    )
    alone, holm = _false_passes(p, np.where(p <= level, "pass", "undecided"), level)
    se = np.sqrt(level * (1 - level) / trials)
    assert alone > level + 4 * se, alone
    assert holm <= level + 3 * se and holm < alone / 2, (holm, alone)
