"""The report people look at: a Pareto plot of answer quality against end-to-end latency (one point per
setting with its 95 % interval, the frontier highlighted) as SVG, and a markdown report with the
leaderboard, each setting's cost bill, where each compressor breaks even, and the gate decisions on the
run. No plotting library: the SVG is written directly, so the report works on the bare install.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from eval.store import DuckDBStore

Record = dict[str, Any]


@dataclass(frozen=True)
class Point:
    """One setting on the plot."""

    name: str
    latency_s: float
    """p50 of end-to-end latency with the compressor's cold cost (e2e_cold_s)."""
    quality: float
    """Mean answer token recall over answerable questions."""
    half_width: float
    """Half the 95 % normal interval of the mean (1.96 sd / sqrt n)."""


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


def pareto_svg(pts: Sequence[Point], title: str, width: int = 720, height: int = 440) -> str:
    """Answer quality (y) against end-to-end latency (x, log scale) with intervals; frontier in colour."""
    left, right, top, bottom = 70, 220, 40, 60
    if not pts:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="120"><text x="10" y="60">'
            f"{escape(title)}: no setting has both a latency and a quality</text></svg>"
        )
    xs = [math.log10(p.latency_s) for p in pts]
    x0, x1 = min(xs) - 0.1, max(xs) + 0.1
    y0 = max(0.0, min(p.quality - p.half_width for p in pts) - 0.05)
    y1 = min(1.0, max(p.quality + p.half_width for p in pts) + 0.05)
    y1 = y1 if y1 > y0 else y0 + 0.1

    def sx(v: float) -> float:
        return left + (math.log10(v) - x0) / (x1 - x0) * (width - left - right)

    def sy(v: float) -> float:
        return top + (y1 - v) / (y1 - y0) * (height - top - bottom)

    best = frontier(pts)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<text x="{left}" y="22" font-size="14">{escape(title)}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
        f'<text x="{(left + width - right) / 2}" y="{height - 15}" text-anchor="middle">'
        "end-to-end latency p50, cold compressor cost (s, log scale)</text>",
        f'<text x="18" y="{(top + height - bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 18 {(top + height - bottom) / 2})">answer token recall (95 % CI)</text>',
    ]
    for k in range(5):
        v = y0 + (y1 - y0) * k / 4
        parts.append(f'<text x="{left - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for e in range(math.floor(x0), math.ceil(x1) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if x0 <= math.log10(v) <= x1:
                parts.append(f'<text x="{sx(v):.1f}" y="{height - bottom + 16}" text-anchor="middle">{v:g}</text>')
    on_front = sorted((p for p in pts if p.name in best), key=lambda p: p.latency_s)
    if len(on_front) > 1:
        path = " ".join(f"{sx(p.latency_s):.1f},{sy(p.quality):.1f}" for p in on_front)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#d62728" stroke-dasharray="4 3"/>')
    for i, p in enumerate(sorted(pts, key=lambda p: p.latency_s)):
        colour = "#d62728" if p.name in best else "#1f77b4"
        x, y = sx(p.latency_s), sy(p.quality)
        parts.append(
            f'<line x1="{x:.1f}" y1="{sy(p.quality + p.half_width):.1f}" x2="{x:.1f}" '
            f'y2="{sy(p.quality - p.half_width):.1f}" stroke="{colour}"/>'
        )
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{colour}"><title>{escape(p.name)}</title></circle>'
        )
        parts.append(f'<text x="{width - right + 10}" y="{top + 16 * i + 4}" fill="{colour}">{escape(p.name)}</text>')
        parts.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{width - right + 6}" y2="{top + 16 * i}" stroke="#ccc"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def _cell(value: Any, fmt: str) -> str:
    return "NULL" if value is None else fmt.format(value)


BILL = (
    ("setting_name", "setting", "{}"),
    ("n", "n", "{}"),
    ("answer_token_recall", "answer token recall", "{:.3f}"),
    ("context_token_recall", "context token recall", "{:.3f}"),
    ("faithfulness", "faithfulness", "{:.3f}"),
    ("mean_prompt_tokens", "prompt tokens", "{:.0f}"),
    ("realized_ratio", "realized ratio", "{:.2f}"),
    ("mean_compress_cold_s", "compressor cold s", "{:.3f}"),
    ("probe_ttft_p50_s", "TTFT p50 s", "{:.3f}"),
    ("e2e_cold_p50_s", "end-to-end p50 s", "{:.3f}"),
    ("n_latency", "latency n", "{}"),
)
"""Leaderboard columns of the report's table: quality, then the bill (tokens, compressor, TTFT, total)."""


BREAK_EVEN = (
    ("setting_name", "setting", "{}"),
    ("context_tokens", "context tokens", "{:.0f}"),
    ("realized_ratio", "realized ratio", "{:.2f}"),
    ("cold_s_per_token", "cold cost ms / 1k tokens", "{:.1f}"),
    ("predicted_speedup", "predicted speed-up", "{:.2f}x"),
    ("measured_speedup", "measured speed-up", "{:.2f}x"),
    ("break_even_tokens", "pays from (tokens)", "{:.0f}"),
    ("two_x_tokens", "2x from (tokens)", "{:.0f}"),
    ("limit_speedup", "long-context limit", "{:.2f}x"),
)
"""Columns of the report's break-even table (`v_break_even`)."""


def break_even_markdown(rows: Sequence[Record]) -> list[str]:
    """The break-even table: where each compressor pays for itself on this run's hardware."""
    if not rows:
        return ["No compressed setting with probe latencies in this run (`--probe-questions`)."]
    lines = [
        "End-to-end speed-up against no compression at the same top-k, predicted from a line fitted to the "
        "run's probes (TTFT alone vs uncached prompt tokens), each compressor's cold cost per input token and "
        "its realized ratio; measured on the same probe questions. 'pays from' NULL: never, at any length.",
        "",
        "| " + " | ".join(h for _, h, _ in BREAK_EVEN) + " |",
        "|" + "---|" * len(BREAK_EVEN),
    ]
    for r in rows:
        values = dict(r) | {"cold_s_per_token": r["cold_s_per_token"] * 1e6 if r["cold_s_per_token"] else None}
        lines.append("| " + " | ".join(_cell(values.get(k), f) for k, _, f in BREAK_EVEN) + " |")
    return lines


def report_markdown(
    run_id: str,
    rows: Sequence[Record],
    decisions: Sequence[Record],
    plot: str | None,
    break_even: Sequence[Record] = (),
) -> str:
    """The run's report: plot, leaderboard with the cost bill, frontier, break-even, gate decisions."""
    pts = points(rows)
    best = frontier(pts)
    lines = [f"# cribsheet report: run {run_id}", ""]
    if plot:
        lines += [f"![answer quality vs end-to-end latency]({plot})", ""]
    lines += [
        "Answer metrics over answerable questions; latency is the p50 of retrieve + rerank + the compressor's "
        "cold cost + TTFT of the prompt run alone (probe questions). **Bold**: on the quality-latency frontier.",
        "",
        "| " + " | ".join(h for _, h, _ in BILL) + " |",
        "|" + "---|" * len(BILL),
    ]
    for r in rows:
        cells = [_cell(r.get(k), f) for k, _, f in BILL]
        if r["setting_name"] in best:
            cells[0] = f"**{cells[0]}**"
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Where each compressor pays for itself", "", *break_even_markdown(break_even)]
    lines += ["", "## Gate decisions on this run", ""]
    if not decisions:
        lines.append("None yet (`cribsheet gate --run RUN --baseline ... --candidate ...`).")
    for d in decisions:
        lines.append(
            f"- {d['created_at']:%Y-%m-%d %H:%M} **{str(d['decision']).upper()}** (exit {d['exit_code']}): "
            f"{d['candidate']} vs {d['baseline']} on {d['n_questions']} paired questions"
            + (f"; report {d['report_path']}" if d.get("report_path") else "")
        )
    return "\n".join(lines) + "\n"


def write_report(store: DuckDBStore, run_id: str, out_dir: Path) -> Path:
    """The run's Pareto plot and markdown report into `out_dir`; returns the report's path."""
    rows = store.leaderboard(run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "pareto.svg").write_text(pareto_svg(points(rows), f"run {run_id}"), encoding="utf-8")
    md = report_markdown(run_id, rows, store.decisions_for_run(run_id), "pareto.svg", store.break_even(run_id))
    path = out_dir / "report.md"
    path.write_text(md, encoding="utf-8")
    return path
