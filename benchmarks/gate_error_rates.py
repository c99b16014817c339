"""Error rates and power of the release gate, by simulation on a real sweep's paired outcomes.

Population: the paired per-question values (baseline, candidate) of one gated metric (default: the first
deciding metric of policies/gate.yaml) from a stored sweep, answerable questions only. For each planted
true difference d, the candidate's population values are moved, both ways, until mean(candidate) -
mean(baseline) is exactly d:
- churn: `--churn` of the candidate's mass moves down (outcomes set to 0) and as much moves up (set to 1),
  so the per-question outcomes change while the mean does not (noise, not copies);
- then the net change that reaches d, in random questions.
Each trial resamples n questions with replacement from the population and runs the real gate (`decide`, the
policy's margin and confidence, a per-trial bootstrap seed).

Reported at n = the bundled set's answerable count and n = the generated set's size:
- false pass: pass rate at d = -margin (the non-inferiority boundary; the gate should pass <= 2.5 %);
- false fail: fail rate on equal distributions with noise (baseline vs the baseline with churn);
- power: pass rate at d = 0 and d = +margin;
- the whole scan from -2*margin to +margin.
The last line is one JSON object. Usage:
  .venv/bin/python benchmarks/gate_error_rates.py --store runs/generated/results.duckdb \
      --baseline none-k8-hybrid-dense --candidate llmlingua-4x-k8-hybrid-dense [--trials 200]
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


def main() -> None:  # noqa: PLR0915
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=Path("runs/generated/results.duckdb"))
    parser.add_argument("--baseline", default="none-k8-hybrid-dense")
    parser.add_argument("--candidate", default="llmlingua-4x-k8-hybrid-dense")
    parser.add_argument("--metric", default=None, help="default: the policy's first deciding metric")
    parser.add_argument("--policy", type=Path, default=Path("policies/gate.yaml"))
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--churn", type=float, default=0.1, help="share of mass moved each way as noise")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples per decision")
    parser.add_argument("--sizes", default="", help="comma-separated n (default: bundled and generated sizes)")
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    from eval.gate import GatePolicy
    from eval.store import DuckDBStore

    if not args.store.is_file():
        sys.exit(f"error: {args.store}: no results store; run `cribsheet sweep --config configs/generated-sweep.yaml`")
    policy = GatePolicy.load(args.policy)
    metric = args.metric or next(m.name for m in policy.metrics if not m.advisory)
    rule = next((m for m in policy.metrics if m.name == metric), None)
    if rule is None:
        sys.exit(f"error: {args.policy}: metric '{metric}' is not in the policy")
    policy = policy.model_copy(
        update={"latency": None, "resamples": args.resamples, "metrics": [rule.model_copy(update={"advisory": False})]}
    )
    store = DuckDBStore(args.store, read_only=True)
    b_rows, c_rows = store.paired_samples(store.resolve_setting(args.baseline), store.resolve_setting(args.candidate))
    ids = sorted(
        q
        for q in set(b_rows) & set(c_rows)
        if b_rows[q].get("answerable", True) and b_rows[q].get(metric) is not None and c_rows[q].get(metric) is not None
    )
    if len(ids) < 30:
        sys.exit(f"error: {args.store}: only {len(ids)} paired answerable questions with {metric}")
    base = np.array([b_rows[q][metric] for q in ids], dtype=float)
    cand = np.array([c_rows[q][metric] for q in ids], dtype=float)
    manifest = json.loads(Path("datasets/MANIFEST.json").read_text())["files"]
    sizes = [int(s) for s in args.sizes.split(",") if s] or [
        manifest["fanoutqa_dev_demo.jsonl"]["answerable"],
        manifest["generated_questions.jsonl"]["answerable"],
    ]
    m = rule.margin
    scan = [-2 * m, -1.5 * m, -m, -0.5 * m, 0.0, 0.5 * m, m]
    rng = np.random.default_rng(0)
    print(
        f"population: {len(ids)} paired answerable questions of {args.baseline} vs {args.candidate} from "
        f"{args.store}; {metric}: baseline {base.mean():.3f}, candidate {cand.mean():.3f} (observed diff "
        f"{cand.mean() - base.mean():+.3f}); margin {m}, {policy.confidence:.0%} CI, {args.trials} trials per cell, "
        f"churn {args.churn:.0%} each way"
    )
    report: dict[str, Any] = {"metric": metric, "margin": m, "trials": args.trials, "population": len(ids)}
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
    print(json.dumps(report))


if __name__ == "__main__":
    main()
