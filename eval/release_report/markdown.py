"""The markdown report (`report.md`) beside its Pareto plot (`pareto.svg`), and `write_report`, which writes
both and the HTML page.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from eval.cells import EMPTY, cell
from eval.release_report.figures import (
    BILL,
    BREAK_EVEN,
    FAMILY,
    break_even_cells,
    faithfulness_lines,
    family_cells,
    frontier,
    noise_floor_text,
    pareto_svg,
    points,
    recommendation_text,
)
from eval.release_report.page import write_html_report
from eval.store import DuckDBStore, Record


def _markdown_table(columns: Sequence[tuple[str, str, str]], cells: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table: the columns' headers, then one line per row of already formatted cells."""
    return [
        "| " + " | ".join(h for _, h, _ in columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(row) + " |" for row in cells),
    ]


def break_even_markdown(rows: Sequence[Record]) -> list[str]:
    """The break-even table: where each compressor pays for itself on this run's hardware."""
    if not rows:
        return ["No compressed setting with probe latencies in this run (`--probe-questions`)."]
    lines = [
        "End-to-end speed-up against the same setting without compression ('against': same top-k, retrieval, "
        "reranker, layout, output and answer cache), predicted from a quadratic fitted to the run's probes (TTFT "
        "alone vs uncached prompt tokens), each compressor's seconds per input token in its timed slots and its "
        "realized ratio; "
        f"measured against that baseline on the probe questions ({EMPTY}: the run has no such baseline). 'pays from' "
        "and '2x from': the first length on a 100-token grid up to 16,000 where it does (never: nowhere on it).",
        "",
    ]
    cells = [break_even_cells(r) for r in rows]
    return lines + _markdown_table(BREAK_EVEN, cells)


def report_markdown(
    run_id: str,
    rows: Sequence[Record],
    decisions: Sequence[Record],
    plot: str | None,
    break_even: Sequence[Record] = (),
    run: Record | None = None,
    recommendation: Record | None = None,
    family: Sequence[Record] = (),
) -> str:
    """The run's report: the recommendation against the shipped setting first (when the project names one,
    with every candidate's verdict before and after the adjustment), then plot, leaderboard with the cost
    bill, frontier, break-even, gate decisions.
    """
    pts = points(rows)
    best = frontier(pts)
    lines = [f"# cribsheet report: run {run_id}", ""]
    if recommendation is not None:
        lines += [f"**{recommendation_text(recommendation)}**", ""]
        lines += _markdown_table(FAMILY, [family_cells(f) for f in family]) + [""]
    if plot:
        lines += [f"![answer quality vs end-to-end latency]({plot})", ""]
    lines += [
        "Answer metrics over answerable questions; latency is the p50 over the probe questions of the whole "
        "request timed live in the latency phase (retrieve + rerank + the compressor computing the context as a "
        "first request pays it: a query-agnostic one runs its model unless `cribsheet precompress` made its "
        "compressions, whose bill is then the offline column + TTFT; each setting's request back to back with the "
        "others'). **Bold**: on the quality-latency frontier.",
        "",
    ]
    if run is not None:
        floor = noise_floor_text(run)
        lines += [floor[0].upper() + floor[1:] + ".", ""]
        lines += [f"- {line}" for line in faithfulness_lines(run)] + [""]
    board = []
    for r in rows:
        cells = [cell(r.get(k), f) for k, _, f in BILL]
        if r["setting_name"] in best:
            cells[0] = f"**{cells[0]}**"
        board.append(cells)
    lines += _markdown_table(BILL, board)
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
    """The run's Pareto plot, markdown report and HTML page into `out_dir`; returns the page's path."""
    rows = store.leaderboard(run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "pareto.svg").write_text(pareto_svg(points(rows), f"run {run_id}"), encoding="utf-8")
    md = report_markdown(
        run_id,
        rows,
        store.decisions_for_run(run_id),
        "pareto.svg",
        store.break_even(run_id),
        store.run_summary(run_id),
        store.recommendation(run_id),
        store.family_verdicts(run_id),
    )
    (out_dir / "report.md").write_text(md, encoding="utf-8")
    return write_html_report(store, run_id, out_dir / "report.html")
