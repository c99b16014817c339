"""Where each compressor breaks even, predicted against measured, in one sweep on this machine.

One real sweep (vLLM, the bundled SmolLM2, LanceDB with sentence vectors, DuckDB) over the first N answerable
FanOutQA demo questions: every compressor at 4x and no compression, at top-3, top-8 and top-32 (about 4,000
context tokens), each question also run alone after a cache reset (the probes: TTFT alone, end to end with
the compressor's cold cost). Then the store's `v_break_even` predicts each compressed setting's end-to-end
speed-up from the run's quadratic fit of TTFT against prompt tokens, the compressor's cold cost per token
and its realized ratio; the script prints predicted and measured side by side, the break-even and 2x context
lengths, and the worst ratio between prediction and measurement (goal: within 1.25 at every point). The model
is fitted on the same run's probes, so this checks the model's form (quadratic prefill, cost proportional to
context), not an out-of-sample forecast. A straight-line fit, the first model, was off by up to 1.72x at
top-3 and top-32 on this CPU. One JSON line last.

    .venv/bin/python benchmarks/break_even.py [--questions 16] [--top-k 3 8 32]
    .venv/bin/python benchmarks/break_even.py --report-only   # the table again from the stored run
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

COMPRESSORS = ["llmlingua", "longllmlingua", "extractive", "engine-lingua", "pruned"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--top-k", type=int, nargs="+", default=[3, 8, 32])
    parser.add_argument("--ratio", type=float, default=4.0)
    parser.add_argument("--compressors", nargs="+", default=COMPRESSORS)
    parser.add_argument("--index", type=Path, default=Path("runs/bench-levers/index.lancedb"))
    parser.add_argument("--store", type=Path, default=Path("runs/break-even/results.duckdb"))
    parser.add_argument("--report-only", action="store_true", help="no sweep: the latest stored run's table")
    args = parser.parse_args()
    if args.report_only:
        from eval.store import DuckDBStore

        store = DuckDBStore(args.store)  # writable: the views follow this code version
        run_id = store.latest_run()
        if run_id is None:
            sys.exit(f"error: {args.store}: no run")
        report(store.break_even(run_id), f"run {run_id}")
        return
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    from corpus.bundled import DEMO_FILE, bundled_index
    from corpus.embed import SentenceTransformerEmbedder
    from corpus.table import IndexOptions
    from eval.engine.generator import GeneratorConfig
    from eval.run.sweep import run_sweep
    from eval.settings import CompressionSpec, GridConfig, SweepConfig
    from eval.store import DuckDBStore

    work = Path(tempfile.mkdtemp(prefix="cribsheet-break-even-"))
    bundled_index(args.index, work, SentenceTransformerEmbedder(), IndexOptions(sentence_vectors=True))
    answerable = work / "answerable.jsonl"
    lines = [line for line in (work / DEMO_FILE).read_text().splitlines() if '"answerable": true' in line]
    answerable.write_text("\n".join(lines[: args.questions]) + "\n")
    config = SweepConfig(
        index_path=args.index,
        questions_path=answerable,
        store_path=args.store,
        retrieve_n=max(20, *args.top_k),
        probe_questions=args.questions,
        grid=GridConfig(
            compressions=[
                CompressionSpec(),
                *(CompressionSpec(compressor=c, target_ratio=args.ratio) for c in args.compressors),
            ],
            top_ks=args.top_k,
        ),
        generator=GeneratorConfig(max_model_len=8192, max_tokens=48),
    )
    start = time.perf_counter()
    result = run_sweep(config, progress=lambda stage, done, total: None)
    minutes = (time.perf_counter() - start) / 60
    report(DuckDBStore(args.store, read_only=True).break_even(result.run_id), f"run {result.run_id}, {minutes:.1f} min")


def report(rows: list[dict[str, Any]], title: str) -> None:
    """Predicted and measured side by side, the worst ratio, one JSON line."""
    print(f"\n{title}: {len(rows)} compressed settings")
    print(
        f"{'setting':<34}{'context':>8}{'ratio':>7}{'cost ms/1k':>11}{'predicted':>10}{'measured':>9}"
        f"{'pred/meas':>10}{'pays from':>10}{'2x from':>9}"
    )
    worst = 1.0
    figures: dict[str, float | None] = {}
    for r in rows:
        predicted, measured = r["predicted_speedup"], r["measured_speedup"]
        ratio = predicted / measured if predicted and measured else None
        if ratio:
            worst = max(worst, ratio, 1 / ratio)
        pays = "never" if r["break_even_tokens"] is None else f"{r['break_even_tokens']:.0f}"
        twice = "never" if r["two_x_tokens"] is None else f"{r['two_x_tokens']:.0f}"
        print(
            f"{r['setting_name']:<34}{r['context_tokens']:>8.0f}{r['realized_ratio']:>7.2f}"
            f"{r['cold_s_per_token'] * 1e6:>11.1f}{predicted:>10.2f}{measured:>9.2f}{ratio or 0:>10.2f}"
            f"{pays:>10}{twice:>9}"
        )
        key = str(r["setting_name"]).replace("-hybrid-dense", "")
        figures[f"{key}_predicted"] = round(predicted, 3) if predicted else None
        figures[f"{key}_measured"] = round(measured, 3) if measured else None
    print(f"worst predicted/measured ratio: {worst:.2f} (goal <= 1.25: {'met' if worst <= 1.25 else 'missed'})")
    figures["worst_ratio"] = round(worst, 3)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
