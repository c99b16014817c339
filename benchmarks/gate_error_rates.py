"""Error rates of the release gate over many seeds, on real per-question outcomes of the bundled sweep.

Takes the baseline setting's answer_contains per question from a results store (run `make demo` first),
then, per seed, plants:
- "identical": the same setting re-measured with noise that keeps its expected recall (symmetric flips),
  and the exact same answers;
- "drop": a 5-point answer-recall drop (5% of the questions turn from right to wrong).
False pass rate = share of "drop" candidates that pass; false fail rate = share of "identical" that fail.
Prints a table, then one JSON object as the last line.
Usage: .venv/bin/python benchmarks/gate_error_rates.py [--store PATH] [--seeds N] [--baseline NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", type=Path, default=Path("runs/demo/results.duckdb"))
    parser.add_argument("--baseline", default="none-k8-hybrid-dense")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--noise", type=float, default=0.1, help="flip probability for 'identical' re-runs")
    parser.add_argument("--drop", type=float, default=0.05)
    args = parser.parse_args()
    from eval.runtime import quiet_offline_env

    quiet_offline_env()

    from eval.gate import GatePolicy, Labels, decide
    from eval.store import DuckDBStore

    if not args.store.is_file():
        sys.exit(f"error: {args.store}: no results store; run `make demo` first")
    store = DuckDBStore(args.store, read_only=True)
    ref = store.resolve_setting(args.baseline)
    run = ref.run_id
    stored = store.samples(ref)
    ids = sorted(q for q, r in stored.items() if r["status"] == "ok")
    if not ids:
        sys.exit(f"error: {args.store}: no samples of setting '{args.baseline}' in run {run}")
    base = np.array([stored[q]["answer_contains"] for q in ids], dtype=float)
    policy = GatePolicy.load(Path("policies/gate.yaml")).model_copy(update={"latency": None, "resamples": 2000})
    policy = policy.model_copy(update={"metrics": [m for m in policy.metrics if m.name == "answer_contains"]})

    def as_samples(values: np.ndarray) -> dict[str, dict]:
        return {q: {"status": "ok", "answer_contains": float(v)} for q, v in zip(ids, values, strict=True)}

    outcomes: dict[str, dict[str, int]] = {
        k: {"pass": 0, "fail": 0, "undecided": 0} for k in ("exact", "identical", "drop")
    }
    n_right, n_wrong = int(base.sum()), int(len(base) - base.sum())
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        p_down = args.noise
        p_up = args.noise * n_right / max(1, n_wrong)  # keeps the expected recall unchanged
        flips = np.where(base == 1, rng.random(len(base)) < p_down, rng.random(len(base)) < p_up)
        noisy = np.where(flips, 1 - base, base)
        dropped = base.copy()
        right = np.flatnonzero(base == 1)
        dropped[rng.choice(right, size=round(args.drop * len(base)), replace=False)] = 0.0
        seeded = policy.model_copy(update={"seed": seed})
        for kind, cand in (("exact", base), ("identical", noisy), ("drop", dropped)):
            labels = Labels(baseline="base", candidate=kind, baseline_run=run, candidate_run=run)
            d = decide(as_samples(base), as_samples(cand), seeded, labels)
            outcomes[kind][d.decision] += 1
    n = args.seeds
    print(
        f"baseline {args.baseline}: {len(base)} questions, answer recall {base.mean():.3f}; {n} seeds; "
        f"margin {policy.metrics[0].margin}, {policy.confidence:.0%} CI"
    )
    print(f"{'planted case':<28}{'pass':>8}{'fail':>8}{'undecided':>11}")
    for kind, label in (
        ("exact", "identical answers"),
        ("identical", f"same setting, {args.noise:.0%} noise"),
        ("drop", f"{args.drop * 100:.0f}-point recall drop"),
    ):
        o = outcomes[kind]
        print(f"{label:<28}{o['pass'] / n:>8.3f}{o['fail'] / n:>8.3f}{o['undecided'] / n:>11.3f}")
    print(
        json.dumps(
            {
                "questions": len(base),
                "seeds": n,
                "false_pass_rate": outcomes["drop"]["pass"] / n,
                "false_fail_rate": outcomes["identical"]["fail"] / n,
                "false_fail_rate_exact": outcomes["exact"]["fail"] / n,
                "drop_detected_fail_rate": outcomes["drop"]["fail"] / n,
                "identical_pass_rate": outcomes["identical"]["pass"] / n,
            }
        )
    )


if __name__ == "__main__":
    main()
