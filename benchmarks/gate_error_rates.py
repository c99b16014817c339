"""Error rates and power of the release gate, fixed-n and sequential, by simulation on a sweep's paired outcomes.

Population: the paired per-question values (baseline, candidate) of one gated metric (default: the first
deciding metric of policies/gate.yaml) from a stored sweep, answerable questions only. For each planted
true difference d, the candidate's population values are moved, both ways, until mean(candidate) -
mean(baseline) is exactly d:
- churn: `--churn` of the candidate's mass moves down (outcomes set to 0) and as much moves up (set to 1),
  so the per-question outcomes change while the mean does not (noise, not copies);
- then the net change that reaches d, in random questions.

Part 1, the fixed-n gate: each trial resamples n questions with replacement from the population and runs the
real gate (`decide`, the policy's margin and confidence, a per-trial bootstrap seed). Reported at n = the
bundled set's answerable count and n = the generated set's size:
- false pass: pass rate at d = -margin (the non-inferiority boundary; the gate should pass <= 2.5 %);
- false fail: fail rate on equal distributions with noise (baseline vs the baseline with churn);
- power: pass rate at d = 0 and d = +margin;
- the whole scan from -2*margin to +margin.
About 0.2 s per decision at n = 2,900 on 2 CPU cores (BCa bootstrap): the default 200 trials take several
minutes; `--skip-fixed-scan` leaves this part out.

Part 2, looking again (docs/sequential.md): at d = -margin, -margin/2, 0 and +margin, `--replicates` paths of
questions drawn with replacement, looked at every `--batch` questions up to `--budget`:
- sequential: the anytime-valid gate of eval/gate/sequential.py (the exact rule, vectorised), its error
  budget split as the policy's deciding tests split it;
- naive: the fixed-n interval re-checked after every batch from the policy's min_questions on, stopping at
  the first pass or fail (a normal-approximation interval, mean +- z * sd / sqrt(n), in place of the
  bootstrap, which would take hours here; at these n the two agree closely);
- fixed-n: the one planned n with the sequential rule's power at that d (normal approximation,
  n = ((z_{1-a/2} + z_power) * sd / (d + margin))^2, the true sd given to it; a measured power of 1 counts as
  1 - 1/replicates), and the pass rate measured at that n.
Questions used: n at the first decision; a path still undecided at the budget counts the budget.

Part 3, a metric that barely moves (`low_variance`): 95 % of paired differences equal; each bet's questions
to decide and its false pass at the boundary (5 % of pairs losing everything). Not built from any sweep.

Part 4, a grid (benchmarks/gate_grid.py, docs/sequential.md "Error control across the grid"): k = 5 and 10
candidates against one baseline, some at the boundary, some clearly worse, some clearly fine, planted from the
same outcomes; the family-wise false pass (any boundary or worse candidate passing) and the power at +margin of
per-comparison gating (today) and of Holm's step-down (eval/gate/family.py), fixed-n and sequential.
`--grid-only` runs this part alone; `--skip-grid` leaves it out.

No store (this checkout has none unless a sweep ran): `--stand-in` uses a stand-in population with the
published character of the bundled 135M generator's outcomes (2,900 questions; token recall 0 for 45 %, 1
for 40 %, uniform in between for 15 %; the candidate keeps the baseline's outcome for 45 % of questions and
draws its own otherwise: paired differences with SD near 0.5, as README's gate section reports).
The last line is one JSON object. Usage:
  .venv/bin/python benchmarks/gate_error_rates.py --store runs/generated/results.duckdb \
      --baseline none-k8-hybrid-dense --candidate llmlingua-4x-k8-hybrid-dense [--trials 200]
  .venv/bin/python benchmarks/gate_error_rates.py --stand-in --skip-fixed-scan
  .venv/bin/python benchmarks/gate_error_rates.py --stand-in --grid-only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def move(values: np.ndarray, up: float, down: float, rng: np.random.Generator) -> np.ndarray:
    """`values` (in [0, 1]) with `down` units of mass removed (outcomes set to 0) and `up` units added (set to
    1), each in random questions; a question moves at most once, the last one of each direction partially.
    """
    out = values.astype(float).copy()
    order = rng.permutation(len(out))
    moved = np.zeros(len(out), dtype=bool)
    for amount, target in ((down, 0.0), (up, 1.0)):
        left = amount
        for i in order:
            if left <= 1e-12:
                break
            room = abs(target - out[i])
            if moved[i] or room == 0:
                continue
            step = min(room, left)
            out[i] += step if target == 1.0 else -step
            moved[i] = True
            left -= step
        if left > 1e-9:
            raise ValueError(f"cannot move {amount:.2f} units {'up' if target else 'down'} in {len(out)} questions")
    return out


def plant(base: np.ndarray, cand: np.ndarray, d: float, churn: float, rng: np.random.Generator) -> np.ndarray:
    """The candidate moved both ways so that its population mean is exactly mean(base) + d."""
    n = len(base)
    noisy = move(cand, churn * cand.sum(), churn * cand.sum(), rng)
    net = d * n - (noisy.sum() - base.sum())
    return move(noisy, max(net, 0.0), max(-net, 0.0), rng)


def simulate(
    base: np.ndarray, cand: np.ndarray, n: int, trials: int, policy: Any, metric: str, rng: np.random.Generator
) -> dict[str, float]:
    """Pass/fail/undecided rates of the gate over `trials` resamples of n pairs from the population."""
    from eval.gate import Labels, decide

    counts = {"pass": 0, "fail": 0, "undecided": 0}
    labels = Labels(baseline="base", candidate="cand", baseline_run="sim", candidate_run="sim")
    for t in range(trials):
        idx = rng.integers(0, len(base), n)
        ids = [f"q{i}" for i in range(n)]
        b = {q: {"status": "ok", metric: float(base[j])} for q, j in zip(ids, idx, strict=True)}
        c = {q: {"status": "ok", metric: float(cand[j])} for q, j in zip(ids, idx, strict=True)}
        counts[decide(b, c, policy.model_copy(update={"seed": t}), labels).decision] += 1
    return {k: v / trials for k, v in counts.items()}


def wilson_high(rate: float, trials: int, z: float = 1.96) -> float:
    """Upper end of the 95 % Wilson interval of a rate observed in `trials` trials."""
    centre = rate + z * z / (2 * trials)
    spread = z * np.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials))
    return float(min(1.0, (centre + spread) / (1 + z * z / trials)))


def stand_in_population(n: int = 2900, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(baseline, candidate) token recalls with the bundled generator's published character (module doc)."""
    rng = np.random.default_rng(seed)

    def outcomes(k: int) -> np.ndarray:
        u = rng.random(k)
        return np.where(u < 0.45, 0.0, np.where(u < 0.85, 1.0, rng.random(k)))

    base = outcomes(n)
    return base, np.where(rng.random(n) < 0.45, base, outcomes(n))


def store_population(args: argparse.Namespace, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(baseline, candidate) values of `metric` on the paired answerable questions of two stored settings: of
    their latest run, or with `--all-runs` of every run holding both (a sequential gate's batch runs).
    """
    from eval.store import DuckDBStore

    store = DuckDBStore(args.store, read_only=True)
    if args.all_runs:
        runs = store.query(
            "SELECT run_id FROM settings WHERE setting_name IN (?, ?) GROUP BY run_id HAVING count(*) = 2",
            [args.baseline, args.candidate],
        )
        b_rows: dict[str, Any] = {}
        c_rows: dict[str, Any] = {}
        for r in runs:
            b, c = store.paired_samples(
                store.resolve_setting(args.baseline, r["run_id"]), store.resolve_setting(args.candidate, r["run_id"])
            )
            b_rows |= b
            c_rows |= c
    else:
        b_rows, c_rows = store.paired_samples(
            store.resolve_setting(args.baseline), store.resolve_setting(args.candidate)
        )
    ids = sorted(
        q
        for q in set(b_rows) & set(c_rows)
        if b_rows[q].get("answerable", True) and b_rows[q].get(metric) is not None and c_rows[q].get(metric) is not None
    )
    if len(ids) < 30:
        sys.exit(f"error: {args.store}: only {len(ids)} paired answerable questions with {metric}")
    base = np.array([b_rows[q][metric] for q in ids], dtype=float)
    return base, np.array([c_rows[q][metric] for q in ids], dtype=float)


def fixed_scan(
    base: np.ndarray, cand: np.ndarray, policy: Any, metric: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Part 1: the real fixed-n gate's pass / fail / undecided rates over the scan, at each size."""
    manifest = json.loads(Path("datasets/MANIFEST.json").read_text())["files"]
    sizes = [int(s) for s in args.sizes.split(",") if s] or [
        manifest["fanoutqa_dev_demo.jsonl"]["answerable"],
        manifest["generated_questions.jsonl"]["answerable"],
    ]
    m = policy.metrics[0].margin
    scan = [-2 * m, -1.5 * m, -m, -0.5 * m, 0.0, 0.5 * m, m]
    rng = np.random.default_rng(0)
    report: dict[str, Any] = {}
    for n in sizes:
        print(f"\nn = {n}: true difference -> pass / fail / undecided")
        cells = {}
        for d in scan:
            rates = simulate(base, plant(base, cand, d, args.churn, rng), n, args.trials, policy, metric, rng)
            cells[round(d, 4)] = rates
            print(f"  {d:+.3f}  {rates['pass']:.3f} / {rates['fail']:.3f} / {rates['undecided']:.3f}")
        equal = simulate(base, plant(base, base, 0.0, args.churn, rng), n, args.trials, policy, metric, rng)
        print(f"  equal distributions (baseline vs itself with churn): {equal}")
        fp, ff = cells[round(-m, 4)]["pass"], equal["fail"]
        summary = {
            "false_pass_at_margin": fp,
            "false_pass_upper95": wilson_high(fp, args.trials),
            "false_fail_equal": ff,
            "false_fail_upper95": wilson_high(ff, args.trials),
            "power_at_0": cells[0.0]["pass"],
            "power_at_plus_margin": cells[round(m, 4)]["pass"],
            "power_equal_distributions": equal["pass"],
            "scan": {str(k): v for k, v in cells.items()},
        }
        print(
            f"  false pass at -margin {fp:.3f} (95% upper {summary['false_pass_upper95']:.3f}); false fail on equal "
            f"{ff:.3f}; power at 0 {summary['power_at_0']:.3f}, at +margin {summary['power_at_plus_margin']:.3f}"
        )
        report[f"n{n}"] = summary
    return report


def naive_decisions(diffs: np.ndarray, times: np.ndarray, margin: float, z: float) -> tuple[np.ndarray, np.ndarray]:
    """The fixed-n rule (normal interval) re-checked at every look time: verdict and n at the first decision."""
    total, squares = np.cumsum(diffs, axis=1)[:, times - 1], np.cumsum(diffs * diffs, axis=1)[:, times - 1]
    mean = total / times
    spread = z * np.sqrt(np.maximum(squares / times - mean * mean, 0.0) * times / (times - 1) / times)
    passed, failed = mean - spread >= -margin, mean + spread < -margin
    decided = passed | failed
    first = np.where(decided.any(axis=1), decided.argmax(axis=1), len(times) - 1)
    rows = np.arange(len(diffs))
    verdict = np.where(passed[rows, first], "pass", np.where(failed[rows, first], "fail", "undecided"))
    return verdict, times[first]


def fixed_rates(
    base: np.ndarray, planted: np.ndarray, n: int, margin: float, z: float, reps: int, rng: np.random.Generator
) -> tuple[float, float]:
    """Pass and fail rates of the fixed-n rule (normal interval) at one planned n."""
    passes = fails = 0
    for start in range(0, reps, 200):
        idx = rng.integers(0, len(base), (min(200, reps - start), n))
        diffs = planted[idx] - base[idx]
        mean, spread = diffs.mean(axis=1), z * diffs.std(axis=1, ddof=1) / np.sqrt(n)
        passes += int(np.sum(mean - spread >= -margin))
        fails += int(np.sum(mean + spread < -margin))
    return passes / reps, fails / reps


def outcome_rates(verdict: np.ndarray, n: np.ndarray) -> dict[str, float]:
    """Pass / fail / undecided rates and the questions used (mean, 90th percentile)."""
    return {
        "pass": float(np.mean(verdict == "pass")),
        "fail": float(np.mean(verdict == "fail")),
        "undecided": float(np.mean(verdict == "undecided")),
        "mean_n": float(np.mean(n)),
        "p90_n": float(np.percentile(n, 90)),
    }


def looking_again(
    base: np.ndarray, cand: np.ndarray, policy: Any, metric: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Part 2: sequential vs naive re-checking vs fixed-n at matched power (module doc)."""
    from scipy.stats import norm

    from eval.gate.policy import SequentialPlan
    from eval.gate.sequential import alpha_split, first_decisions, look_times

    margin = next(r.margin for r in policy.metrics if r.name == metric)
    alphas = alpha_split(policy)[metric]
    plan = SequentialPlan(batch=args.batch, budget=args.budget, bet=args.bet)
    times = np.array(look_times(args.budget, plan))
    naive_times = times[times >= policy.min_questions]
    z = float(norm.ppf(1 - (1 - policy.confidence) / 2))
    print(
        f"\nlooking again: {args.replicates} paths per true difference, a look every {args.batch} questions up to "
        f"{args.budget}; sequential error budget: pass {alphas.pass_alpha:.4f}, fail {alphas.fail_alpha:.4f} "
        f"(fail split over the policy's deciding tests); naive: {policy.confidence:.0%} normal interval re-checked "
        f"from n = {naive_times[0]}; fixed-n: the sequential rule's power at one planned n"
    )
    print(f"  {'true diff':>9}  {'rule':<22} {'pass':>6} {'fail':>6} {'undec':>6} {'mean n':>8} {'p90 n':>7}")
    cells: dict[str, Any] = {}
    for i, d in enumerate((-margin, -margin / 2, 0.0, margin)):
        rng = np.random.default_rng([1, i])  # each cell its own stream: a cell's population and paths do not
        planted = plant(base, cand, d, args.churn, rng)  # depend on what the cells before it drew
        found: dict[str, list[np.ndarray]] = {"seq_v": [], "seq_n": [], "naive_v": [], "naive_n": []}
        for start in range(0, args.replicates, 500):
            idx = rng.integers(0, len(base), (min(500, args.replicates - start), args.budget))
            diffs = planted[idx] - base[idx]
            verdict, n = first_decisions(diffs, margin, alphas, plan)
            found["seq_v"].append(verdict)
            found["seq_n"].append(n)
            verdict, n = naive_decisions(diffs, naive_times, margin, z)
            found["naive_v"].append(verdict)
            found["naive_n"].append(n)
        seq = outcome_rates(np.concatenate(found["seq_v"]), np.concatenate(found["seq_n"]))
        naive = outcome_rates(np.concatenate(found["naive_v"]), np.concatenate(found["naive_n"]))
        sd = float(np.std(planted - base))
        cell: dict[str, Any] = {"true_diff": d, "sd_diff": sd, "sequential": seq, "naive": naive}
        rows = [("sequential", seq), (f"naive (every {args.batch})", naive)]
        if d > -margin:  # matched power: the fixed n that passes as often as the sequential rule does here
            # a measured power of 1 counts as 1 - 1/replicates (the measurement's resolution); z + z_power > 0
            power = min(max(seq["pass"], (1 - policy.confidence) / 2 + 1e-3), 1 - 1 / args.replicates)
            n_fixed = max(2, int(np.ceil(((z + norm.ppf(power)) * sd / (d + margin)) ** 2)))
            fixed, fixed_fail = fixed_rates(base, planted, n_fixed, margin, z, args.replicates, rng)
            cell["fixed_n"] = {"n": n_fixed, "pass": fixed, "fail": fixed_fail}
            cell["fixed_over_sequential_mean_n_ratio"] = n_fixed / seq["mean_n"]
            planned = float(n_fixed)
            undecided = 1 - fixed - fixed_fail
            fixed_row = {"pass": fixed, "fail": fixed_fail, "undecided": undecided, "mean_n": planned, "p90_n": planned}
            rows.append((f"fixed-n (n = {n_fixed})", fixed_row))
        for i, (name, r) in enumerate(rows):
            label = f"{d:+.3f}" if i == 0 else ""
            cols = " ".join(f"{r[k]:6.3f}" for k in ("pass", "fail", "undecided"))
            print(f"  {label:>9}  {name:<22} {cols} {r['mean_n']:8.0f} {r['p90_n']:7.0f}")
        cells[f"{d:+.4f}"] = cell
    at = {key: cells[f"{d:+.4f}"] for key, d in (("boundary", -margin), ("zero", 0.0), ("plus", margin))}
    fp, naive_fp = at["boundary"]["sequential"]["pass"], at["boundary"]["naive"]["pass"]
    goals = {
        "sequential_false_pass": fp,
        "sequential_false_pass_upper95": wilson_high(fp, args.replicates),
        "sequential_false_pass_met": wilson_high(fp, args.replicates) <= 0.05,
        "naive_false_pass": naive_fp,
        "naive_over_sequential_false_pass_ratio": naive_fp / fp if fp else None,
        "zero_diff_fixed_over_sequential_mean_n_ratio": at["zero"]["fixed_over_sequential_mean_n_ratio"],
        "plus_margin_fixed_over_sequential_mean_n_ratio": at["plus"]["fixed_over_sequential_mean_n_ratio"],
    }
    goals["fewer_questions_met_at_zero"] = goals["zero_diff_fixed_over_sequential_mean_n_ratio"] >= 2
    goals["fewer_questions_met_at_plus_margin"] = goals["plus_margin_fixed_over_sequential_mean_n_ratio"] >= 2

    def met(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print(
        f"  goal: sequential false pass at -margin <= 0.05: {fp:.3f} "
        f"(95% upper {goals['sequential_false_pass_upper95']:.3f}), "
        f"{met(goals['sequential_false_pass_met'])}; the naive rule's: {naive_fp:.3f}\n"
        f"  goal: >= 2x fewer questions than fixed-n at matched power: at 0 "
        f"{goals['zero_diff_fixed_over_sequential_mean_n_ratio']:.2f}x ({met(goals['fewer_questions_met_at_zero'])}), "
        f"at +margin {goals['plus_margin_fixed_over_sequential_mean_n_ratio']:.2f}x "
        f"({met(goals['fewer_questions_met_at_plus_margin'])})"
    )
    return {
        "replicates": args.replicates,
        "batch": args.batch,
        "budget": args.budget,
        "pass_alpha": alphas.pass_alpha,
        "fail_alpha": alphas.fail_alpha,
        "naive_interval": "normal",
        "cells": cells,
        "goals": goals,
    }


def low_variance(policy: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Part 3: a metric that barely moves. Population: 95 % of paired differences exactly 0, the rest uniform
    in [-0.2, +0.2] (mean 0: the candidate is as good); at the boundary, the rest are losses of 1 so that the
    mean difference is exactly -margin (0.05: 5 % of pairs lose everything, the hardest case for a bet that
    has grown bold on steady pairs). Each bet's pass rate, false pass and questions to decide, checked at
    every question (as the product does), up to `--budget`.
    """
    from eval.gate.policy import SequentialPlan
    from eval.gate.sequential import first_decisions

    margin = 0.05
    alphas = alpha_split_for(policy)
    n_paths, budget = min(args.replicates, 10_000), min(args.budget, 1000)
    rng = np.random.default_rng(7)
    steady = np.where(rng.random((n_paths, budget)) < 0.95, 0.0, rng.uniform(-0.2, 0.2, (n_paths, budget)))
    lossy = np.where(rng.random((n_paths, budget)) < margin, -1.0, 0.0)  # mean exactly -margin
    out: dict[str, Any] = {"margin": margin, "paths": n_paths, "budget": budget}
    print(
        f"\nlow variance: {n_paths} paths, margin {margin}, a look at every question up to {budget}: 95 % of pairs "
        "equal, the rest within +-0.2 (as good); at the boundary 5 % of pairs lose 1 (mean -margin)"
    )
    print(f"  {'bet':<10} {'pass (as good)':>14} {'mean n':>8} {'p90 n':>7} {'all equal: n':>13} {'false pass':>11}")
    for bet in ("adaptive", "steady", "mixture"):
        plan = SequentialPlan(batch=1, budget=budget, bet=bet)
        verdict, n = first_decisions(steady, margin, alphas, plan)
        equal_verdict, equal_n = first_decisions(np.zeros((1, budget)), margin, alphas, plan)
        boundary, _ = first_decisions(lossy, margin, alphas, plan)
        false_pass = float(np.mean(boundary == "pass"))
        row = {
            "pass": float(np.mean(verdict == "pass")),
            "mean_n": float(np.mean(n)),
            "p90_n": float(np.quantile(n, 0.9)),
            "all_equal_n": int(equal_n[0]) if equal_verdict[0] == "pass" else None,
            "false_pass": false_pass,
            "false_pass_upper95": wilson_high(false_pass, n_paths),
        }
        out[bet] = row
        print(
            f"  {bet:<10} {row['pass']:14.3f} {row['mean_n']:8.1f} {row['p90_n']:7.0f} "
            f"{str(row['all_equal_n']):>13} {false_pass:11.4f}"
        )
    out["steady_decides_within_120_met"] = out["steady"]["p90_n"] <= 120 and out["steady"]["pass"] >= 0.9
    out["steady_false_pass_met"] = out["steady"]["false_pass_upper95"] <= 0.05
    out["adaptive_over_steady_mean_n_ratio"] = out["adaptive"]["mean_n"] / out["steady"]["mean_n"]
    print(
        f"  goal: steady decides PASS within 120 questions (p90 {out['steady']['p90_n']:.0f}): "
        f"{'met' if out['steady_decides_within_120_met'] else 'MISSED'}; false pass <= 0.05 at the boundary: "
        f"{'met' if out['steady_false_pass_met'] else 'MISSED'}"
    )
    return out


def alpha_split_for(policy: Any) -> Any:
    """The first deciding metric's error budget under `policy` (as the product splits it)."""
    from eval.gate.sequential import alpha_split

    name = next(m.name for m in policy.metrics if not m.advisory)
    return alpha_split(policy)[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=Path("runs/generated/results.duckdb"))
    parser.add_argument("--baseline", default="none-k8-hybrid-dense")
    parser.add_argument("--candidate", default="llmlingua-4x-k8-hybrid-dense")
    parser.add_argument("--stand-in", action="store_true", help="no store: use the stand-in population")
    parser.add_argument("--all-runs", action="store_true", help="pool every run holding both settings")
    parser.add_argument("--metric", default=None, help="default: the policy's first deciding metric")
    parser.add_argument("--policy", type=Path, default=Path("policies/gate.yaml"))
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--churn", type=float, default=0.1, help="share of mass moved each way as noise")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples per decision")
    parser.add_argument("--sizes", default="", help="comma-separated n (default: bundled and generated sizes)")
    parser.add_argument("--skip-fixed-scan", action="store_true", help="leave out part 1 (the slow bootstrap)")
    parser.add_argument("--replicates", type=int, default=10_000, help="part 2: paths per true difference")
    parser.add_argument("--batch", type=int, default=10, help="part 2: questions between looks")
    parser.add_argument("--budget", type=int, default=3000, help="part 2: most questions a path may use")
    parser.add_argument(
        "--bet",
        choices=["adaptive", "mixture", "steady"],
        default="steady",
        help="the sequential rule's bet (SequentialPlan.bet)",
    )
    parser.add_argument("--grid-only", action="store_true", help="run part 4 (the grid) alone")
    parser.add_argument("--skip-grid", action="store_true", help="leave out part 4 (the grid)")
    parser.add_argument("--grid-trials", type=int, default=600, help="part 4: fixed-n trials")
    parser.add_argument("--grid-resamples", type=int, default=1000, help="part 4: bootstrap draws per p-value")
    parser.add_argument("--grid-replicates", type=int, default=4000, help="part 4: sequential paths")
    parser.add_argument("--grid-n", type=int, default=0, help="part 4: fixed n (0: 80 %% power at +margin)")
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    from eval.gate import GatePolicy

    policy = GatePolicy.load(args.policy)
    metric = args.metric or next(m.name for m in policy.metrics if not m.advisory)
    rule = next((m for m in policy.metrics if m.name == metric), None)
    if rule is None:
        sys.exit(f"error: {args.policy}: metric '{metric}' is not in the policy")
    if args.store.is_file():
        base, cand = store_population(args, metric)
        source = f"{args.baseline} vs {args.candidate} from {args.store}"
    elif args.stand_in:
        base, cand = stand_in_population()
        source = "the stand-in population (--stand-in: no store here; see the module doc)"
    else:
        sys.exit(
            f"error: {args.store}: no results store; run `cribsheet sweep --config configs/generated-sweep.yaml`, "
            "or pass --stand-in for the stand-in population"
        )
    fixed_policy = policy.model_copy(
        update={"latency": None, "resamples": args.resamples, "metrics": [rule.model_copy(update={"advisory": False})]}
    )
    m = rule.margin
    print(
        f"population: {len(base)} paired answerable questions of {source}; {metric}: baseline {base.mean():.3f}, "
        f"candidate {cand.mean():.3f} (observed diff {cand.mean() - base.mean():+.3f}, SD of the paired differences "
        f"{np.std(cand - base):.3f}); margin {m}, {policy.confidence:.0%} CI, churn {args.churn:.0%} each way"
        + ("" if args.skip_fixed_scan else f"; {args.trials} trials per cell")
    )
    report: dict[str, Any] = {
        "metric": metric,
        "margin": m,
        "trials": args.trials,
        "population": len(base),
        "population_source": "store" if args.store.is_file() else "stand-in",
    }
    if not args.skip_fixed_scan and not args.grid_only:
        report |= fixed_scan(base, cand, fixed_policy, metric, args)
    if not args.grid_only:
        report["sequential"] = looking_again(base, cand, policy, metric, args)
        report["low_variance"] = low_variance(policy, args)
    if not args.skip_grid:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks.gate_grid
        from benchmarks.gate_grid import grid_part

        report["grid"] = grid_part(base, cand, policy, metric, args, (plant, wilson_high))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
