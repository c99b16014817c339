"""Part 4 of benchmarks/gate_error_rates.py: a grid of candidates gated against one baseline, gated one by one
(today) and with Holm's step-down across the grid (eval/gate/family.py), fixed-n and sequential.

Population: the baseline and candidate outcomes part 1 and 2 use (a store's, or the stand-in's). A pool of
16 candidates is planted from the candidate's outcomes (`plant`: each with its own churn, so each has its own
per-question outcomes): 10 exactly at the non-inferiority boundary (true difference -margin), 2 clearly worse
(-2 margin), 4 clearly fine (+margin). Every candidate is compared with the same baseline on the same questions
in each trial, as a grid is: their tests are correlated through the baseline and the shared outcomes. Scenarios
pick from the pool: k = 5 and 10 all at the boundary (the worst case for a family-wise false pass), and k = 5
(2 boundary, 1 worse, 2 fine) and k = 10 (4, 2, 4) mixed.

- Family-wise false pass: the share of trials in which ANY boundary or worse candidate passes.
- Power at +margin: the share of fine candidates that pass (per candidate), and of trials in which at least one
  fine candidate passes (the grid's recommendation has something to ship).

Fixed-n: each trial draws n questions with replacement (default: the n that gives one comparison 80 % power
at +margin, normal approximation with the fine candidates' SD), and computes every candidate's p-value with
`metric_p_value` (the gate's BCa interval inverted; `--grid-resamples` draws, fewer than the policy's 10,000
for time). Per comparison: pass when p <= a = (1 - confidence) / 2 (the gate's own verdict); Holm:
`family_verdicts` at a.

Sequential: each replicate draws one path of `--budget` questions for the whole grid; every candidate runs
the sequential rule (`first_decisions`: today's verdict at its first decisive look) and its anytime-valid
p-value 1 / running max of its pass-side capital at the boundary is read at every look (`metric_capital`'s
construction, vectorised). Holm: at every look, `holm_adjusted` over the k candidates' p-values (a candidate
that failed keeps the p-value it stopped with); a candidate passes at the first look Holm passes it. Questions
used: mean n at which the first fine candidate passes (the budget on a path where none does), and at which
the last candidate of the grid is decided (the budget when one never is: always, with a boundary candidate in
the grid). The table's n column: the fixed n, or the sequential mean n to the first fine pass (the mean n to
the last decision where the scenario has no fine candidate)
The Monte Carlo standard error of each rate is sqrt(r (1 - r) / trials).
"""

from __future__ import annotations

from typing import Any

import numpy as np

KINDS = ("boundary",) * 10 + ("worse",) * 2 + ("fine",) * 4
SHIFT = {"boundary": -1.0, "worse": -2.0, "fine": 1.0}
"""The planted true difference of each kind, in margins."""
SCENARIOS = {
    "k5_boundary": list(range(5)),
    "k10_boundary": list(range(10)),
    "k5_mixed": [0, 1, 10, 12, 13],
    "k10_mixed": [0, 1, 2, 3, 10, 11, 12, 13, 14, 15],
}
"""Indices into the pool (KINDS)."""


def grid_pool(base: np.ndarray, cand: np.ndarray, margin: float, churn: float, plant: Any) -> np.ndarray:
    """The 16 planted candidates (rows), each from its own seeded stream."""
    return np.stack(
        [plant(base, cand, SHIFT[kind] * margin, churn, np.random.default_rng([4, i])) for i, kind in enumerate(KINDS)]
    )


def _rates(passed: np.ndarray, picks: list[int]) -> dict[str, float]:
    """Family-wise false pass and power from a (trials, k) pass matrix of one scenario."""
    kinds = np.array([KINDS[i] for i in picks])
    bad, fine = passed[:, kinds != "fine"], passed[:, kinds == "fine"]
    fwer = float(np.mean(bad.any(axis=1)))
    out = {"false_pass": fwer, "false_pass_se": float(np.sqrt(fwer * (1 - fwer) / len(passed)))}
    if fine.shape[1]:
        out["power_per_candidate"] = float(fine.mean())
        out["power_any_fine"] = float(fine.any(axis=1).mean())
    return out


def fixed_grid(
    base: np.ndarray, pool: np.ndarray, policy: Any, rule: Any, n: int, trials: int, resamples: int
) -> dict[str, Any]:
    """Per-comparison and Holm verdicts of the fixed-n gate over the pool, `trials` draws of n questions."""
    from eval.gate.family import CandidateResult, family_verdicts, metric_p_value, pass_level

    level = pass_level(policy)
    fixed = policy.model_copy(update={"latency": None, "resamples": resamples, "metrics": [rule]})
    rng = np.random.default_rng([4, 100])
    p = np.empty((trials, len(pool)))
    for t in range(trials):
        idx = rng.integers(0, len(base), n)
        seeded = fixed.model_copy(update={"seed": t})
        p[t] = [metric_p_value(rule, base[idx], planted[idx], seeded) for planted in pool]
    out: dict[str, Any] = {"n": n, "trials": trials, "resamples": resamples, "level": level}
    for name, picks in SCENARIOS.items():
        alone = p[:, picks] <= level
        holm = np.array(
            [
                [
                    v.adjusted_verdict == "pass"
                    for v in family_verdicts(
                        [
                            CandidateResult(
                                name=f"c{i}", p_value=row[i], verdict="pass" if row[i] <= level else "undecided"
                            )
                            for i in picks
                        ],
                        level,
                    )
                ]
                for row in p
            ]
        )
        out[name] = {"per_comparison": _rates(alone, picks), "holm": _rates(holm, picks)}
    return out


def sequential_grid(
    base: np.ndarray, pool: np.ndarray, policy: Any, metric: str, plan: Any, replicates: int
) -> dict[str, Any]:
    """Per-comparison and Holm verdicts of the sequential gate over the pool, `replicates` shared paths."""
    from eval.gate.betting import log_wealth, look_times, plan_bets
    from eval.gate.family import anytime_p_values, holm_adjusted, pass_level
    from eval.gate.sequential import alpha_split, first_decisions

    margin = next(r.margin for r in policy.metrics if r.name == metric)
    alphas, level = alpha_split(policy)[metric], pass_level(policy)
    times = np.array(look_times(plan.budget, plan))
    rng = np.random.default_rng([4, 200])
    alone: dict[str, list[np.ndarray]] = {name: [] for name in SCENARIOS}
    holm: dict[str, list[np.ndarray]] = {name: [] for name in SCENARIOS}
    used: dict[str, dict[str, list[np.ndarray]]] = {
        name: {f"{proc}_{what}": [] for proc in ("alone", "holm") for what in ("all", "fine")} for name in SCENARIOS
    }
    boundary = (1 - margin) / 2
    for start in range(0, replicates, 250):
        paths = min(250, replicates - start)
        idx = rng.integers(0, len(base), (paths, plan.budget))
        verdicts, stops, pvals = [], [], []
        for planted in pool:
            diffs = planted[idx] - base[idx]
            verdict, n = first_decisions(diffs, margin, alphas, plan)
            x = (diffs + 1) / 2
            up, _ = log_wealth(x, boundary, *plan_bets(x, boundary, plan))
            p = anytime_p_values(up[:, times - 1])
            stop = np.searchsorted(times, n)  # look index of the candidate's own decision
            frozen = (verdict != "pass")[:, None] & (np.arange(len(times))[None, :] > stop[:, None])
            p = np.where(frozen, np.take_along_axis(p, stop[:, None], axis=1), p)  # stopped: keeps its p-value
            verdicts.append(verdict)
            stops.append(n)
            pvals.append(p)
        v, n_own, pv = np.stack(verdicts, axis=1), np.stack(stops, axis=1), np.stack(pvals, axis=2)
        for name, picks in SCENARIOS.items():
            own_pass = v[:, picks] == "pass"
            # Holm at every look; only a candidate its own rule passes can pass (family_verdicts' rule)
            rejected = (holm_adjusted(pv[:, :, picks]) <= level) & own_pass[:, None, :]
            ever = rejected.any(axis=1)
            first = np.where(ever, times[rejected.argmax(axis=1)], plan.budget)
            decided = {
                "alone": np.where(np.isin(v[:, picks], ["pass", "fail"]), n_own[:, picks], plan.budget),
                "holm": np.where(v[:, picks] == "fail", n_own[:, picks], first),
            }
            passed_at = {"alone": np.where(own_pass, n_own[:, picks], plan.budget), "holm": first}
            fine = np.array([KINDS[i] == "fine" for i in picks])
            for proc in ("alone", "holm"):
                used[name][f"{proc}_all"].append(decided[proc].max(axis=1))
                if fine.any():
                    used[name][f"{proc}_fine"].append(passed_at[proc][:, fine].min(axis=1))
            alone[name].append(own_pass)
            holm[name].append(ever)
    out: dict[str, Any] = {"replicates": replicates, "batch": plan.batch, "budget": plan.budget, "level": level}
    for name, picks in SCENARIOS.items():
        out[name] = {}
        for proc, key in (("alone", "per_comparison"), ("holm", "holm")):
            cell = _rates(np.concatenate((alone if proc == "alone" else holm)[name]), picks)
            cell["mean_n_all_decided"] = float(np.mean(np.concatenate(used[name][f"{proc}_all"])))
            if used[name][f"{proc}_fine"]:  # a path where no fine candidate passes counts the budget
                cell["mean_n_first_fine_pass"] = float(np.mean(np.concatenate(used[name][f"{proc}_fine"])))
            out[name][key] = cell
    return out


def grid_part(base: np.ndarray, cand: np.ndarray, policy: Any, metric: str, args: Any, helpers: Any) -> dict[str, Any]:
    """Part 4: print the table and return the report (`helpers`: gate_error_rates' `plant` and `wilson_high`)."""
    from scipy.stats import norm

    from eval.gate.family import pass_level
    from eval.gate.policy import SequentialPlan

    plant, wilson_high = helpers
    rule = next(r for r in policy.metrics if r.name == metric).model_copy(update={"advisory": False})
    margin, level = rule.margin, pass_level(policy)
    pool = grid_pool(base, cand, margin, args.churn, plant)
    sd = float(np.mean([np.std(pool[i] - base) for i, k in enumerate(KINDS) if k == "fine"]))
    n = args.grid_n or int(np.ceil(((norm.ppf(1 - level) + norm.ppf(0.8)) * sd / (2 * margin)) ** 2))
    plan = SequentialPlan(batch=args.batch, budget=args.budget, bet=args.bet)
    print(
        f"\ngrid: a pool of 16 candidates planted from the candidate's outcomes (10 at -margin, 2 at -2 margin, "
        f"4 at +margin); level a = {level:.4f} per comparison and family-wise. Fixed-n: {args.grid_trials} trials "
        f"of n = {n} ({args.grid_resamples} bootstrap draws); sequential: {args.grid_replicates} paths, a look "
        f"every {args.batch} up to {args.budget}, bet {args.bet}"
    )
    report = {
        "fixed_n": fixed_grid(base, pool, policy, rule, n, args.grid_trials, args.grid_resamples),
        "sequential": sequential_grid(base, pool, policy, metric, plan, args.grid_replicates),
    }
    head = f"  {'scenario':<13} {'gate':<10} {'procedure':<15} {'FW false pass':>15} {'95% upper':>9}"
    print(head + f" {'power/cand':>10} {'any fine':>8} {'n':>7}")
    goals: dict[str, Any] = {}
    for gate, trials in (("fixed_n", args.grid_trials), ("sequential", args.grid_replicates)):
        for name in SCENARIOS:
            cell = report[gate][name]
            for proc in ("per_comparison", "holm"):
                r = cell[proc]
                r["false_pass_upper95"] = wilson_high(r["false_pass"], trials)
                power = (
                    f"{r['power_per_candidate']:10.3f} {r['power_any_fine']:8.3f}"
                    if "power_any_fine" in r
                    else " " * 19
                )
                first = r.get("mean_n_first_fine_pass", r.get("mean_n_all_decided"))
                mean_n = f"{first:7.0f}" if first is not None else f"{n:7d}"
                print(
                    f"  {name:<13} {gate:<10} {proc.replace('_', '-'):<15} "
                    f"{r['false_pass']:8.3f} ± {r['false_pass_se']:.3f} {r['false_pass_upper95']:9.3f} {power} {mean_n}"
                )
            alone, holm = cell["per_comparison"], cell["holm"]
            cell["per_comparison_over_holm_false_pass_ratio"] = (
                alone["false_pass"] / holm["false_pass"] if holm["false_pass"] else None
            )
            if "power_per_candidate" in holm and alone["power_per_candidate"]:
                cell["holm_over_per_comparison_power_ratio"] = (
                    holm["power_per_candidate"] / alone["power_per_candidate"]
                )
            goals[f"{gate}_{name}_holm_false_pass_met"] = holm["false_pass_upper95"] <= 0.05
            goals[f"{gate}_{name}_per_comparison_false_pass_over_level"] = alone["false_pass"] > level
    for name in SCENARIOS:  # questions until the first fine candidate passes, against the fixed n
        seq = report["sequential"][name]
        for proc in ("per_comparison", "holm"):
            if "mean_n_first_fine_pass" in seq[proc]:
                seq[f"{proc}_first_fine_pass_over_fixed_n_ratio"] = seq[proc]["mean_n_first_fine_pass"] / n
    report["goals"] = goals
    missed = [k for k, ok in goals.items() if k.endswith("_met") and not ok]
    print(
        "  goal: family-wise false pass <= 0.05 with Holm (95% upper bound), every scenario and gate: "
        + ("met" if not missed else f"MISSED in {', '.join(missed)}")
    )
    return report
