"""The report people look at: a Pareto plot of answer quality against end-to-end latency (one point per
setting with its 95 % interval, the frontier highlighted) as SVG, and a markdown report with the
leaderboard, each setting's cost bill, where each compressor breaks even, and the gate decisions on the
run; and one static HTML page with all of it (`html_report`). Plots come from `eval/plots.py` (matplotlib).

The package by part: `figures` (plot points, frontier, the latency phase paragraph, table columns), `markdown`
(`report.md`, and `write_report`, which writes every file), `page` (the HTML page). Every public name is
importable from here.
"""

from eval.release_report.figures import (
    BILL,
    BREAK_EVEN,
    break_even_cells,
    faithfulness_lines,
    frontier,
    noise_floor_text,
    pareto_svg,
    points,
)
from eval.release_report.markdown import break_even_markdown, report_markdown, write_report
from eval.release_report.page import WHAT, html_report, write_html_report

__all__ = [
    "BILL",
    "BREAK_EVEN",
    "WHAT",
    "break_even_cells",
    "break_even_markdown",
    "frontier",
    "html_report",
    "faithfulness_lines",
    "noise_floor_text",
    "pareto_svg",
    "points",
    "report_markdown",
    "write_html_report",
    "write_report",
]
