"""Is a speed-up the same whether or not another process shares the machine? The old latency design against
the latency phase, quiet and with a noisy neighbour, on the real stack.

Grid (the demo's index, the first `--questions` demo questions, `--probes` probe questions): top-k 8, no
compression and pruned 4x, each with layout `ranked` and `edges` (the two layouts of one compressor carry the
same prefill: their ratio is an A/A figure of its own). The answers are computed once; every condition below
reuses them and measures latency again.

Designs, measured back to back in each condition:
- old: the design before the latency phase, replayed on the stored rows: setting by setting in grid order,
  each probe alone after a cache reset, end to end = the answers phase's retrieve + rerank seconds + the
  compressor's stored cold bill + the live TTFT; speed-up = the ratio of mean end-to-end times;
- new: the sweep's latency phase (`eval.run.latency`): every setting in one seeded block per probe question
  and repeat, the whole request timed live in its slot, the baselines twice (A/A); speed-up = the gate's
  geometric mean of per-question paired ratios.

Conditions:
- quiet: nothing else runs;
- noisy: one CPU-bound process (a busy loop) switched on and off on a seeded schedule (2-8 s on, 2-8 s off)
  through both designs' measurements;
- one-setting: the busy loop runs during one stretch only: in the old design while the second setting is
  probed; in the new, through the same share of the latency phase (its second quarter).

Printed: per condition and design, the A/A ratio (new: the baselines' twins; old: none ranked against none
edges), pruned 4x's speed-up per layout, each with its 95 % interval, and the gate's latency verdict of each
candidate (policies/demo-gate.yaml). The last line is one JSON object (ratios in keys ending `_ratio`).
Needs the demo's index (`make demo` builds it in runs/demo). About 25 minutes on 2 cores. Usage:
  .venv/bin/python benchmarks/latency_stability.py [--workdir runs/demo] [--questions 50] [--probes 30]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BUSY = "while True: pass"


class Neighbour:
    """A CPU-bound process, paused (SIGSTOP) and resumed (SIGCONT) from this one. It is started by a shell that
    exits at once, so it is not a descendant of this process: another job on the machine, which the latency
    phase's load meter must count as foreign (a child of the sweep would count as the sweep's own work)."""

    def __init__(self) -> None:
        started = subprocess.run(
            ["sh", "-c", f'{sys.executable} -c "{BUSY}" >/dev/null 2>&1 & echo $!'],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        self.pid = int(started.stdout.strip())
        self.on, self.busy_s, self._since = True, 0.0, 0.0
        self.pause()

    def pause(self) -> None:
        """Stop the busy loop."""
        if self.on:
            os.kill(self.pid, signal.SIGSTOP)
            self.on = False
            if self._since:
                self.busy_s += time.perf_counter() - self._since

    def resume(self) -> None:
        """Start the busy loop again."""
        if not self.on:
            os.kill(self.pid, signal.SIGCONT)
            self.on = True
            self._since = time.perf_counter()

    def close(self) -> None:
        """Kill it."""
        self.pause()
        os.kill(self.pid, signal.SIGKILL)


class Schedule(threading.Thread):
    """Switches the neighbour on and off, 2-8 s each way, from a seeded generator, until stopped."""

    def __init__(self, neighbour: Neighbour, seed: int) -> None:
        super().__init__(daemon=True)
        self.neighbour, self.rng, self.stopped = neighbour, random.Random(seed), threading.Event()

    def run(self) -> None:
        """On, off, on, ... until `stop`."""
        while not self.stopped.is_set():
            self.neighbour.resume()
            if self.stopped.wait(self.rng.uniform(2, 8)):
                break
            self.neighbour.pause()
            self.stopped.wait(self.rng.uniform(2, 8))
        self.neighbour.pause()

    def stop(self) -> None:
        """Stop switching; the neighbour ends paused."""
        self.stopped.set()
        self.join()


def geometric(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean with its 95 % percentile bootstrap interval."""
    from eval.gate.statistics import geometric_ci

    return geometric_ci(ratios, 0.95, 4000, 0)


def ratio_of_means(base: list[float], cand: list[float]) -> tuple[float, float, float]:
    """The old gate's estimand, mean(base) / mean(cand), with a paired 95 % percentile bootstrap interval."""
    import numpy as np

    b, c = np.array(base), np.array(cand)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(b), (4000, len(b)))
    boot = b[idx].mean(axis=1) / c[idx].mean(axis=1)
    low, high = np.quantile(boot, [0.025, 0.975])
    return float(b.mean() / c.mean()), float(low), float(high)


def old_design(store: Any, run_id: str, comps: Any, layout: Any, prefix: str, probes: list[Any],
               on_setting: Any) -> dict[str, dict[str, float]]:  # fmt: skip
    """The design before the latency phase, replayed: per setting in grid order, each probe alone after a
    reset, end to end = stored retrieve + rerank + stored cold bill + live TTFT. Returns setting -> question
    -> seconds."""
    from eval.run.generation import reset_and_warm

    rows = store.query(
        "SELECT setting_name, question_id, question, context_text, retrieve_seconds, rerank_seconds, "
        "compress_cold_seconds FROM samples WHERE run_id = ? AND status = 'ok'",
        [run_id],
    )
    by_setting: dict[str, dict[str, Any]] = {}
    for r in rows:
        by_setting.setdefault(r["setting_name"], {})[r["question_id"]] = r
    out: dict[str, dict[str, float]] = {}
    for i, name in enumerate(sorted(by_setting, key=_grid_order)):
        on_setting(i)
        out[name] = {}
        for q in probes:
            r = by_setting[name].get(q.id)
            if r is None:
                continue
            reset_and_warm(comps.generator, prefix)
            probe = comps.generator.probe(layout.render(r["context_text"], r["question"], ""))
            if probe.ttft_s is None:
                continue
            stored = (r["retrieve_seconds"] or 0) + (r["rerank_seconds"] or 0) + (r["compress_cold_seconds"] or 0)
            out[name][q.id] = stored + probe.ttft_s
    on_setting(-1)
    return out


def _grid_order(name: str) -> tuple[int, str]:
    return (0 if name.startswith("none") else 1, name)


def figures(per: dict[str, dict[str, float]], pairs: Any) -> dict[str, Any]:
    """A/A and pruned 4x's speed-up per layout from `pairs(a, b) -> ratios or (base, cand)`."""

    def named(compressor: str, layout: str) -> str:
        return next(n for n in per if n.startswith(compressor) and n.endswith("-edges") == (layout == "edges"))

    out: dict[str, Any] = {}
    for layout in ("ranked", "edges"):
        out[f"pruned_{layout}"] = pairs(named("none", layout), named("pruned", layout))
    out["layouts_aa"] = pairs(named("none", "ranked"), named("none", "edges"))
    return out


def main() -> None:  # noqa: PLR0915 - one benchmark, read top to bottom
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("runs/demo"))
    parser.add_argument("--datasets", type=Path, default=Path("datasets"))
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--probes", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20261204)
    parser.add_argument("--conditions", default="quiet,noisy,one-setting")
    parser.add_argument("--old", action="store_true", help="also replay the design before the latency phase")
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    from corpus.bundled import DEMO_FILE
    from eval.gate.policy import GatePolicy
    from eval.run.latency import probe_questions
    from eval.run.sweep import load_questions
    from eval.run.wiring import build_components
    from eval.settings import CompressionSpec, GridConfig, SweepConfig

    index = args.workdir / "index.lancedb"
    if not index.exists():
        sys.exit(f"error: {index}: no demo index; run `make demo` first (it builds the index there)")
    out_dir = args.workdir / "latency-stability"
    out_dir.mkdir(parents=True, exist_ok=True)
    store_path = out_dir / "results.duckdb"
    grid = GridConfig(
        compressions=[CompressionSpec(), CompressionSpec(compressor="pruned", target_ratio=4.0)],
        top_ks=[8],
        layouts=["ranked", "edges"],
    )
    config = SweepConfig(
        index_path=index,
        questions_path=args.datasets / DEMO_FILE,
        store_path=store_path,
        limit=args.questions,
        grid=grid,
        probe_questions=args.probes,
        probe_repeats=args.repeats,
    )
    settings = grid.expand()
    comps = build_components(config, settings)
    policy_path = Path("policies/demo-gate.yaml")
    policy = GatePolicy.load(policy_path).model_copy(update={"min_questions": 2})
    probes = probe_questions(load_questions(config), args.probes)
    neighbour = Neighbour()
    report: dict[str, Any] = {"questions": args.questions, "probes": args.probes, "repeats": args.repeats}
    print(
        f"grid: {', '.join(s.name for s in settings)}; {args.questions} demo questions, {args.probes} probe "
        f"questions, {args.repeats} blocks each (new design); a busy-loop neighbour on one of 2 cores"
    )
    try:
        for condition in args.conditions.split(","):
            report[condition] = run_condition(
                condition, config, comps, neighbour, probes, args.seed, policy_path, args.old
            )
    finally:
        neighbour.close()
        comps.close()
    _print_goals(report, args.conditions.split(","), policy)


def run_condition(
    condition: str,
    config: Any,
    comps: Any,
    neighbour: Neighbour,
    probes: list[Any],
    seed: int,
    policy_path: Path,
    old_too: bool = False,
) -> dict[str, Any]:
    """One condition: the sweep (answers reused after the first, latency measured again), then the old
    design replayed, each with the neighbour as the condition has it; their figures and the gate's verdicts.
    """
    from eval.gate.run import gate_each_compressed
    from eval.store import DuckDBStore

    t0 = time.perf_counter()
    schedule: Schedule | None = None

    def tick(stage: str, done: int, total: int) -> None:
        if condition == "one-setting" and stage.startswith("latency"):
            (neighbour.resume if total / 4 <= done < total / 2 else neighbour.pause)()

    if condition == "noisy":
        schedule = Schedule(neighbour, seed)
        schedule.start()
    from eval.run.sweep import run_sweep

    result = run_sweep(config, comps, progress=tick)
    neighbour.pause()
    store = DuckDBStore(config.store_path)
    layout = _layout(comps)

    def on_setting(i: int) -> None:
        if condition == "one-setting":
            (neighbour.resume if i == 1 else neighbour.pause)()

    old = old_design(store, result.run_id, comps, layout, layout.stable_prefix(), probes, on_setting) if old_too else {}
    if schedule is not None:
        schedule.stop()
    neighbour.pause()
    settings = config.grid.expand()
    hashes = {s.name: config.setting_hash(s) for s in settings}

    def new_pairs(a: str, b: str) -> tuple[float, float, float]:
        run = result.run_id
        return geometric(list(store.slot_pairs(run, hashes[a], 0, run, hashes[b], 0).values()))

    def old_pairs(a: str, b: str) -> tuple[float, float, float]:
        ids = sorted(set(old[a]) & set(old[b]))
        return ratio_of_means([old[a][q] for q in ids], [old[b][q] for q in ids])

    floor = result.noise_floor
    new = figures({s.name: {} for s in settings}, new_pairs)
    new["aa"] = (floor.ratio, floor.ci_low, floor.ci_high) if floor else None
    olds = figures(old, old_pairs) if old else {k: None for k in new if k != "aa"}
    decisions = gate_each_compressed(store, result.run_id, policy_path)
    verdicts = {d.candidate: (d.decision, d.latency.verdict if d.latency else None) for d in decisions}
    load = result.load
    reasons = [r for d in decisions for r in d.reasons]
    fired = sorted({"load" for r in reasons if "other processes used" in r}
                   | {"drift" for r in reasons if "first half of the latency phase" in r})  # fmt: skip
    check = {
        "foreign_load": load.foreign_load if load else None,
        "load_avg": load.load_avg if load else None,
        "drift": load.drift if load else None,
        "drift_setting": load.drift_setting if load else None,
        "fired": fired,
    }
    minutes = (time.perf_counter() - t0) / 60
    _print_condition(condition, new, olds, verdicts, minutes, check)
    return {"new": new, "old": olds, "verdicts": verdicts, "minutes": minutes, "run_id": result.run_id, "check": check}


def _layout(comps: Any) -> Any:
    from eval.prompt import PromptLayout

    return PromptLayout(getattr(comps.generator, "tokenizer", None))


def _fmt(x: tuple[float, float, float] | None) -> str:
    return "–" if x is None else f"{x[0]:.3f}x [{x[1]:.3f}, {x[2]:.3f}]"


def _print_condition(
    condition: str, new: dict[str, Any], old: dict[str, Any], verdicts: Any, minutes: float, check: dict[str, Any]
) -> None:
    print(f"\n{condition} ({minutes:.1f} min)")
    load = "n/a" if check["foreign_load"] is None else f"{check['foreign_load']:.1%} of the cores"
    drift = "n/a" if check["drift"] is None else f"{check['drift']:.3f}x ({check['drift_setting']})"
    print(f"  load check: foreign load {load}, worst split-half drift {drift}; fired: {check['fired'] or 'no'}")
    print(f"  {'figure':<34} {'old design':>28} {'latency phase':>28}")
    print(f"  {'A/A (baseline twins)':<34} {'–':>28} {_fmt(new['aa']):>28}")
    print(f"  {'A/A (none ranked / none edges)':<34} {_fmt(old.get('layouts_aa')):>28} {_fmt(new['layouts_aa']):>28}")
    for layout in ("ranked", "edges"):
        label = f"pruned 4x speed-up, {layout}"
        print(f"  {label:<34} {_fmt(old.get(f'pruned_{layout}')):>28} {_fmt(new[f'pruned_{layout}']):>28}")
    for cand, (decision, latency) in sorted(verdicts.items()):
        print(f"  gate (latency phase) {cand}: {decision.upper()} (latency {latency})")


def _print_goals(report: dict[str, Any], conditions: list[str], policy: Any) -> None:
    figures_out: dict[str, Any] = {}
    for c in conditions:
        for design in ("old", "new"):
            r = report[c][design]
            for key in ("pruned_ranked", "pruned_edges", "layouts_aa"):
                if r.get(key) is not None:
                    figures_out[f"{c}_{design}_{key}_ratio"] = round(r[key][0], 4)
            if design == "new" and r["aa"]:
                figures_out[f"{c}_new_aa_ratio"] = round(r["aa"][0], 4)
        check = report[c]["check"]
        figures_out[f"{c}_foreign_load"] = None if check["foreign_load"] is None else round(check["foreign_load"], 4)
        figures_out[f"{c}_drift_ratio"] = None if check["drift"] is None else round(check["drift"], 4)
    goals: dict[str, Any] = {}
    for c in conditions:
        fired = report[c]["check"]["fired"]
        # The load check must stay silent on a quiet machine and fire when a neighbour shares it.
        goals[f"{c}_load_check_{'silent' if c == 'quiet' else 'fires'}"] = (not fired) if c == "quiet" else bool(fired)
    if "quiet" in conditions:
        for c in conditions:
            for layout in ("ranked", "edges"):
                moved = report[c]["new"][f"pruned_{layout}"][0] / report["quiet"]["new"][f"pruned_{layout}"][0]
                figures_out[f"{c}_over_quiet_new_{layout}_ratio"] = round(moved, 4)
                if c != "quiet":  # what the check protects a verdict from: a speed-up that moved
                    goals[f"{c}_new_{layout}_within_10pct_of_quiet_or_check_fired"] = abs(moved - 1) <= 0.10 or bool(
                        report[c]["check"]["fired"]
                    )
    print("\ngoals:")
    for k, v in goals.items():
        print(f"  {k}: {'met' if v else 'MISSED'}")
    minutes = {f"{c}_minutes": round(report[c]["minutes"], 1) for c in conditions}
    verdicts = {c: report[c]["verdicts"] for c in conditions}
    checks = {f"{c}_fired": report[c]["check"]["fired"] for c in conditions}
    print(json.dumps(figures_out | {"goals": goals, "verdicts": verdicts} | checks | minutes))


if __name__ == "__main__":
    main()
