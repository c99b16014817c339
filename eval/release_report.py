"""The report people look at: a Pareto plot of answer quality against end-to-end latency (one point per
setting with its 95 % interval, the frontier highlighted) as SVG, and a markdown report with the
leaderboard, each setting's cost bill, where each compressor breaks even, and the gate decisions on the
run; and one static HTML page with all of it (`html_report`). Plots come from `eval/plots.py` (matplotlib).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from corpus.runtime import hardware_text
from eval.cells import EMPTY, cell, missing
from eval.plots import Point
from eval.store import DuckDBStore, Record
from eval.store.load_figures import PhaseLoad, latency_figures, phase_text


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


WHAT = (
    "retrieve + rerank + the compressor computing this context as a first request pays it (a "
    "query-agnostic one runs its model, unless <code>cribsheet precompress</code> made its compressions: "
    "then they are read and their bill is the offline column) + TTFT"
)
"""What the end-to-end figure times, in the HTML captions."""

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
) -> str:
    """The run's report: plot, leaderboard with the cost bill, frontier, break-even, gate decisions."""
    pts = points(rows)
    best = frontier(pts)
    lines = [f"# cribsheet report: run {run_id}", ""]
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
        run_id, rows, store.decisions_for_run(run_id), "pareto.svg", store.break_even(run_id), store.run_summary(run_id)
    )
    (out_dir / "report.md").write_text(md, encoding="utf-8")
    return write_html_report(store, run_id, out_dir / "report.html")


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; padding: 0 1rem;
       color: #111; background: #fafafa; line-height: 1.4; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; background: white; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; vertical-align: top; }
th:first-child, td:first-child, th.text { text-align: left; } td.text { text-align: left; max-width: 28rem; }
.pass { color: #1b5e20; font-weight: bold; } .fail { color: #b71c1c; font-weight: bold; }
.undecided { color: #8d6e00; font-weight: bold; } .front { font-weight: bold; }
figure { margin: 1rem 0; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: #333; } .meta { color: #333; font-size: 0.9rem; }
@media (prefers-color-scheme: dark) {
  body { color: #e6e6e6; background: #121212; }
  h2 { border-bottom-color: #555; }
  table { background: #1e1e1e; }
  th, td { border-color: #555; }
  .pass { color: #81c784; } .fail { color: #ef9a9a; } .undecided { color: #ffd54f; }
  figcaption, .meta { color: #c8c8c8; }
  a { color: #90caf9; }
}
"""
"""The page's style; a dark system theme gets a dark page with light text. The plots keep their own opaque
light background (eval/plots.py), so their black text and axes read on either page."""


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], text_cols: frozenset[int] = frozenset()) -> str:
    """An HTML table of already escaped cells."""
    head = "".join(f'<th class="text">{h}</th>' if i in text_cols else f"<th>{h}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="text">{c}</td>' if i in text_cols else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _decision_html(store: DuckDBStore, run_id: str, d: Record) -> str:
    """One gate decision: verdict, reasons, its metric table and the questions the candidate lost most on."""
    import json
    from html import escape

    verdict = str(d["decision"])
    results = json.loads(d["results_json"] or "{}")
    rows = []
    for m in results.get("metrics", []):
        rows.append(
            [
                escape(f"{m['name']} ({m['population']})" + (" (advisory)" if m.get("advisory") else "")),
                cell(m.get("n")),
                cell(m.get("baseline_mean"), "{:.3f}"),
                cell(m.get("candidate_mean"), "{:.3f}"),
                cell(m.get("diff"), "{:+.3f}"),
                f"[{cell(m.get('ci_low'), '{:+.3f}')}, {cell(m.get('ci_high'), '{:+.3f}')}]",
                cell(m.get("margin"), "{:.3f}"),
                f'<span class="{escape(m["verdict"])}">{escape(m["verdict"])}</span>',
            ]
        )
    lat = results.get("latency")
    if lat:
        rows.append(
            [
                escape(f"{lat['metric']} speed-up"),
                cell(lat.get("n")),
                cell(lat.get("baseline_mean"), "{:.3f} s"),  # None: only the paired ratios were read
                cell(lat.get("candidate_mean"), "{:.3f} s"),
                cell(lat.get("speedup"), "{:.2f}x"),
                f"[{cell(lat.get('ci_low'), '{:.2f}')}, {cell(lat.get('ci_high'), '{:.2f}')}]",
                cell(lat.get("min_speedup"), "&ge;{:.2f}x"),
                f'<span class="{escape(lat["verdict"])}">{escape(lat["verdict"])}</span>',
            ]
        )
    reasons = "".join(f"<li>{escape(r)}</li>" for r in json.loads(d["reasons"] or "[]"))
    if "looks" in results:  # a sequential decision: the decision forming, look by look
        from eval.plots import looks_plot

        title = f"{d['candidate']} vs {d['baseline']}"
        rows.append([])
        figure = (
            f"<figure>{looks_plot(results['looks'], title)}<figcaption>Estimate (dots) and anytime-valid bounds "
            "(band) after each batch, the decision boundary dashed, the look that decided ringed. "
            f"{len(results.get('runs', []))} batch runs.</figcaption></figure>"
        )
    else:
        figure = ""
    parts = [
        f'<section class="decision" data-verdict="{escape(verdict)}">',
        f"<h3>{escape(str(d['candidate']))} vs {escape(str(d['baseline']))}: "
        f'<span class="{escape(verdict)}">{escape(verdict.upper())}</span> (exit {d["exit_code"]}, '
        f"{cell(d['n_questions'])} paired questions)</h3>",
        f"<ul>{reasons}</ul>" if reasons else "",
        f'<p class="meta latency-figures">latency measured under: {escape(latency_figures(lat))}</p>'
        if lat and latency_figures(lat)
        else "",
        _table(["metric", "n", "baseline", "candidate", "diff", "95% CI", "margin", "verdict"], [r for r in rows if r])
        if any(rows)
        else "",
        figure,
    ]
    if d.get("baseline_hash") and d.get("candidate_hash"):
        batches = results.get("runs")  # a sequential decision: every batch run, not the last one only
        base_runs, cand_runs = batches or str(d["baseline_run"]), batches or str(d["candidate_run"])
        losses = store.largest_losses(base_runs, d["baseline_hash"], cand_runs, d["candidate_hash"])
        if losses:
            parts.append("<p>Questions where the candidate lost most answer token recall:</p>")
            parts.append(
                _table(
                    ["question", "gold", "baseline answer", "candidate answer", "recall", "context tokens"],
                    [
                        [
                            escape(str(x["question"])),
                            escape(", ".join(json.loads(x["gold_answers"] or "[]"))),
                            escape(str(x["baseline_answer"] or "")),
                            escape(str(x["candidate_answer"] or "")),
                            f"{cell(x['baseline_recall'], '{:.2f}')} &rarr; {cell(x['candidate_recall'], '{:.2f}')}",
                            f"{cell(x['baseline_context_tokens'])} &rarr; {cell(x['candidate_context_tokens'])}",
                        ]
                        for x in losses
                    ],
                    frozenset({0, 1, 2, 3}),
                )
            )
    parts.append("</section>")
    return "\n".join(parts)


def html_report(store: DuckDBStore, run_id: str) -> str:
    """One static HTML page: both plots inline, the leaderboard, break-even, and every gate decision of the
    run with its table and the questions each candidate lost most on. No script, no network.
    """
    from html import escape

    from eval.plots import break_even_plot

    run = store.run_summary(run_id)
    rows = store.leaderboard(run_id)
    pts = points(rows)
    best = frontier(pts)
    be = store.break_even(run_id)
    newest: dict[tuple[str, str, bool], Record] = {}
    # Newest first: a candidate gated again shows its last decision, and its last sequential decision beside it.
    for d in [*store.decisions_for_run(run_id), *store.sequential_decisions()]:
        sequential = '"sequence_id"' in str(d["results_json"] or "")
        newest.setdefault((str(d["baseline"]), str(d["candidate"]), sequential), d)
    decisions = list(newest.values())
    board = [
        [
            (f'<span class="front">{escape(str(r["setting_name"]))}</span>' if r["setting_name"] in best else "")
            or escape(str(r["setting_name"])),
            *[cell(r.get(k), f) for k, _, f in BILL[1:]],
        ]
        for r in rows
    ]
    be_rows = [[escape(c) for c in break_even_cells(r)] for r in be]
    body = [
        f"<h1>cribsheet release report: run {escape(run_id)}</h1>",
        f'<p class="meta">{escape(cell(run["started_at"]))} &middot; status {escape(cell(run["status"]))} &middot; '
        f"{cell(run['n_questions'])} questions ({escape(cell(run['questions_path']))}) &times; "
        f"{cell(run['n_settings'])} settings "
        f"&middot; commit {escape(str(run['git_commit'] or 'unknown')[:12])}{' (dirty)' if run['git_dirty'] else ''} "
        f"&middot; {escape(hardware_text(run['hardware_json']))} &middot; engine "
        f"{escape(str(run['engine_precision'] or '?'))}</p>",
        f'<p class="meta" id="noise-floor">{escape(noise_floor_text(run))}</p>',
        "<h2>Release decisions</h2>",
        "".join(_decision_html(store, run_id, d) for d in decisions)
        or "<p>No gate decision on this run yet (<code>cribsheet gate</code>).</p>",
        "<h2>Answer quality against end-to-end latency</h2>",
        f"<figure>{pareto_svg(pts, f'run {run_id}')}<figcaption>Answer token recall (95 % interval) against the "
        f"p50 of the whole request timed live in the latency phase ({WHAT}); the frontier in magenta; each point "
        "numbered, the key below the plot names its setting (frontier in "
        "bold).</figcaption></figure>",
        "<h2>Leaderboard</h2>",
        _table([h for _, h, _ in BILL], board),
        "<h2>Where each compressor pays for itself</h2>",
        f"<figure>{break_even_plot(be, 'predicted end-to-end speed-up by context length')}<figcaption>Curves: "
        "the break-even model (a quadratic fitted to the run's probes, each compressor's live seconds per token and "
        "realized ratio); dots: measured against each setting's baseline, the same setting without compression, on "
        "this run's probe questions.</figcaption></figure>",
        _table([h for _, h, _ in BREAK_EVEN], be_rows, frozenset({0, 1}))
        if be_rows
        else "<p>No compressed setting with probes.</p>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="color-scheme" content="light dark">'
        f"<title>cribsheet report {escape(run_id)}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def write_html_report(store: DuckDBStore, run_id: str, path: Path) -> Path:
    """`html_report` into `path` (written whole: a reader never sees half a page)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(html_report(store, run_id), encoding="utf-8")
    tmp.replace(path)
    return path
