"""What both forms of the report show: the plot's points and the quality-latency frontier, the latency
phase in one paragraph, and the columns of the leaderboard and break-even tables.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from eval.cells import cell, missing
from eval.plots import Point
from eval.store import Record
from eval.store.load_figures import PhaseLoad, phase_text


def points(rows: Sequence[Record]) -> list[Point]:
    """Plot points from leaderboard rows that have both a latency and a quality (others cannot be placed)."""
    out = []
    for r in rows:
        latency, quality = r.get("e2e_cold_p50_s"), r.get("answer_token_recall")
        if latency is None or quality is None:
            continue
        sd, n = r.get("answer_token_recall_sd"), r.get("n_answerable")
        half = 1.96 * float(sd) / math.sqrt(int(n)) if sd is not None and n else 0.0
        out.append(Point(str(r["setting_name"]), float(latency), float(quality), half))
    return out


def frontier(pts: Sequence[Point]) -> set[str]:
    """Settings no other setting beats: at least as good and as fast, strictly better on one."""
    return {
        p.name
        for p in pts
        if not any(
            q.name != p.name
            and q.quality >= p.quality
            and q.latency_s <= p.latency_s
            and (q.quality > p.quality or q.latency_s < p.latency_s)
            for q in pts
        )
    }


def pareto_svg(pts: Sequence[Point], title: str) -> str:
    """Answer quality (y) against end-to-end latency (x, log scale) with intervals; frontier in colour."""
    from eval.plots import pareto_plot

    return pareto_plot(pts, frontier(pts), title)


def noise_floor_text(run: Record) -> str:
    """The run's latency phase in one paragraph (the report's header): the load it ran under (foreign CPU,
    split-half drift, failed slots), the precompute bills its requests read, and the A/A twins.
    """
    if run.get("latency_session") is None:
        return "no latency phase in this run (latency figures, if any, are an older store's)"
    load = PhaseLoad(
        foreign_load=run.get("foreign_load"),
        cores=json.loads(run.get("hardware_json") or "{}").get("cores"),
        load_avg=run.get("load_avg"),
        drift=run.get("latency_drift"),
        drift_setting=run.get("latency_drift_setting"),
        failed_slots=run.get("failed_slots") or 0,
    )
    parts = [
        f"latency phase: {cell(run.get('probe_repeats'))} block(s) per probe question, every setting timed in each"
    ]
    parts.append(phase_text(load).removeprefix("latency phase load: "))
    for rec in json.loads(run.get("precomputes_json") or "[]"):
        parts.append(
            f"{rec['compressor']} {rec['ratio']:g}x read the compressions a precompute step made on "
            f"{rec['finished_at'][:10]} on {rec['host']} ({rec['chunks']} chunks, {rec['seconds_per_chunk']:.3f} s a "
            f"chunk, {rec['corpus_cpu_hours']:.3f} CPU-hours, not in the end-to-end figure)"
        )
    if run.get("aa_ratio") is None:
        parts.append("no A/A figure (no uncompressed setting)")
    else:
        parts.append(
            f"A/A twins {cell(run['aa_ratio'], '{:.3f}x')} [{cell(run.get('aa_ci_low'), '{:.3f}')}, "
            f"{cell(run.get('aa_ci_high'), '{:.3f}')}] over {cell(run.get('aa_n'))} paired probes (two identical "
            "requests at random places in their blocks: 1.000x shows no order or position bias; it cannot show load)"
        )
    return "; ".join(parts)


def faithfulness_lines(run: Record) -> list[str]:
    """Per faithfulness column: the method behind it and its measured validity on the run's corpus kind (a run
    stored before methods were recorded: the rule checker, validity unknown).
    """
    stored = json.loads(run.get("faithfulness_validity") or "{}")
    if not stored:
        return ["faithfulness: rule checker (this run stored no validity figure)"]
    return [v["line"] for v in stored.values()]


BILL = (
    ("setting_name", "setting", "{}"),
    ("n", "n", "{}"),
    ("answer_token_recall", "answer token recall", "{:.3f}"),
    ("context_token_recall", "context token recall", "{:.3f}"),
    ("faithfulness", "faithfulness", "{:.3f}"),
    ("mean_prompt_tokens", "prompt tokens", "{:.0f}"),
    ("realized_ratio", "realized ratio", "{:.2f}"),
    ("mean_compress_cold_s", "answers-phase compressor s", "{:.3f}"),
    ("probe_ttft_p50_s", "TTFT p50 s", "{:.3f}"),
    ("e2e_cold_p50_s", "end-to-end p50 s (live)", "{:.3f}"),
    ("mean_offline_s", "offline s / request (not in end-to-end)", "{:.3f}"),
    ("n_latency", "latency n", "{}"),
)
"""Leaderboard columns of the report's table: quality, then the bill (tokens, compressor, TTFT, total)."""


BREAK_EVEN = (
    ("setting_name", "setting", "{}"),
    ("baseline_setting", "against", "{}"),
    ("context_tokens", "context tokens", "{:.0f}"),
    ("realized_ratio", "realized ratio", "{:.2f}"),
    ("cold_s_per_token", "live compress ms / 1k tokens", "{:.1f}"),
    ("predicted_speedup", "predicted speed-up", "{:.2f}x"),
    ("measured_speedup", "measured speed-up", "{:.2f}x"),
    ("break_even_tokens", "pays from (tokens)", "{:.0f}"),
    ("two_x_tokens", "2x from (tokens)", "{:.0f}"),
    ("speedup_16k", "at 16k tokens", "{:.2f}x"),
)
"""Columns of the report's break-even table (`v_break_even`)."""

_NEVER = frozenset({"break_even_tokens", "two_x_tokens"})
"""Break-even columns whose NULL means the speed-up is not reached on the grid up to 16,000 tokens."""


def break_even_cells(row: Record) -> list[str]:
    """One `v_break_even` row as the table's cells: a length never reached on the grid is "never", any other
    missing figure (no baseline in the run, so nothing measured) is the empty-cell mark; never NULL or nan.
    """
    cold = row.get("cold_s_per_token")
    values = dict(row) | {"cold_s_per_token": None if cold is None else cold * 1e6}
    cells = []
    for key, _, fmt in BREAK_EVEN:
        value = values.get(key)
        cells.append("never" if key in _NEVER and missing(value) else cell(value, fmt))
    return cells


FAMILY = (
    ("candidate", "candidate", "{}"),
    ("verdict", "alone", "{}"),
    ("p_value", "p", "{:.4f}"),
    ("adjusted_verdict", "across the grid", "{}"),
    ("adjusted_p", "Holm-adjusted p", "{:.4f}"),
    ("speedup", "speed-up vs shipped", "{:.2f}x"),
)
"""Columns of the report's table of every candidate against the shipped setting (`family_verdicts`)."""


def recommendation_text(rec: Record) -> str:
    """A run's recommendation line as `cribsheet run` printed it (the first of its stored reasons)."""
    reasons = json.loads(rec.get("reasons") or "[]")
    return str(reasons[0]) if reasons else f"recommendation: {rec['verdict']} against {rec['shipped']}"


def family_cells(row: Record) -> list[str]:
    """One `family_verdicts` row as the table's cells."""
    return [cell(row.get(key), fmt) for key, _, fmt in FAMILY]
