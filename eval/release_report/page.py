"""The report as one static HTML page: both plots inline, the leaderboard, break-even, and every gate
decision of the run with its table and the questions each candidate lost most on. No script, no network.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from corpus.runtime import hardware_text
from eval.cells import cell
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
from eval.store import DuckDBStore, Record
from eval.store.load_figures import latency_figures

WHAT = (
    "retrieve + rerank + the compressor computing this context as a first request pays it (a "
    "query-agnostic one runs its model, unless <code>cribsheet precompress</code> made its compressions: "
    "then they are read and their bill is the offline column) + TTFT"
)
"""What the end-to-end figure times, in the HTML captions."""


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; padding: 0 1rem;
       color: #111; background: #fafafa; line-height: 1.4; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; background: white; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; vertical-align: top; }
th:first-child, td:first-child, th.text { text-align: left; } td.text { text-align: left; max-width: 28rem; }
.pass { color: #1b5e20; font-weight: bold; } .fail { color: #b71c1c; font-weight: bold; }
.undecided { color: #8d6e00; font-weight: bold; } .front { font-weight: bold; }
.recommendation { font-size: 1.1rem; padding: 0.5rem 0.75rem; border-left: 4px solid #1565c0; background: white; }
figure { margin: 1rem 0; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: #333; } .meta { color: #333; font-size: 0.9rem; }
@media (prefers-color-scheme: dark) {
  body { color: #e6e6e6; background: #121212; }
  h2 { border-bottom-color: #555; }
  table { background: #1e1e1e; }
  .recommendation { background: #1e1e1e; }
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


def _metric_rows(results: Record) -> list[list[str]]:
    """A decision's metric table: one row per metric, then the latency speed-up's (escaped cells)."""
    from html import escape

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
    return rows


def _looks_figure(results: Record, d: Record) -> str:
    """A sequential decision's looks plotted (the decision forming, look by look); empty for a fixed-n one."""
    if "looks" not in results:
        return ""
    from eval.plots import looks_plot

    title = f"{d['candidate']} vs {d['baseline']}"
    return (
        f"<figure>{looks_plot(results['looks'], title)}<figcaption>Estimate (dots) and anytime-valid bounds "
        "(band) after each batch, the decision boundary dashed, the look that decided ringed. "
        f"{len(results.get('runs', []))} batch runs.</figcaption></figure>"
    )


def _losses_html(store: DuckDBStore, d: Record, results: Record) -> list[str]:
    """The questions where the candidate lost most answer token recall (nothing when the decision names no
    setting hashes, or none was lost).
    """
    import json
    from html import escape

    if not (d.get("baseline_hash") and d.get("candidate_hash")):
        return []
    batches = results.get("runs")  # a sequential decision: every batch run, not the last one only
    base_runs, cand_runs = batches or str(d["baseline_run"]), batches or str(d["candidate_run"])
    losses = store.largest_losses(base_runs, d["baseline_hash"], cand_runs, d["candidate_hash"])
    if not losses:
        return []
    return [
        "<p>Questions where the candidate lost most answer token recall:</p>",
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
        ),
    ]


def _decision_html(store: DuckDBStore, run_id: str, d: Record) -> str:
    """One gate decision: verdict, reasons, its metric table and the questions the candidate lost most on."""
    import json
    from html import escape

    verdict = str(d["decision"])
    results = json.loads(d["results_json"] or "{}")
    rows = _metric_rows(results)
    lat = results.get("latency")
    reasons = "".join(f"<li>{escape(r)}</li>" for r in json.loads(d["reasons"] or "[]"))
    parts = [
        f'<section class="decision" data-verdict="{escape(verdict)}">',
        f"<h3>{escape(str(d['candidate']))} vs {escape(str(d['baseline']))}: "
        f'<span class="{escape(verdict)}">{escape(verdict.upper())}</span> (exit {d["exit_code"]}, '
        f"{cell(d['n_questions'])} paired questions)</h3>",
        f"<ul>{reasons}</ul>" if reasons else "",
        f'<p class="meta latency-figures">latency measured under: {escape(latency_figures(lat))}</p>'
        if lat and latency_figures(lat)
        else "",
        _table(["metric", "n", "baseline", "candidate", "diff", "95% CI", "margin", "verdict"], rows) if rows else "",
        _looks_figure(results, d),
        *_losses_html(store, d, results),
        "</section>",
    ]
    return "\n".join(parts)


def html_report(store: DuckDBStore, run_id: str) -> str:
    """One static HTML page: the recommendation against the shipped setting first (when the run has one),
    both plots inline, the leaderboard, break-even, and every gate decision of the run with its table and the
    questions each candidate lost most on. No script, no network.
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
    recommended = store.recommendation(run_id)
    first: list[str] = []
    if recommended is not None:  # the answer to "what should ship?" before everything behind it
        family = [[escape(c) for c in family_cells(f)] for f in store.family_verdicts(run_id)]
        first = [
            f'<p class="recommendation" id="recommendation"><strong>{escape(recommendation_text(recommended))}'
            "</strong></p>",
            _table([h for _, h, _ in FAMILY], family, frozenset({0, 1, 3})),
        ]
    body = [
        f"<h1>cribsheet release report: run {escape(run_id)}</h1>",
        *first,
        f'<p class="meta">{escape(cell(run["started_at"]))} &middot; status {escape(cell(run["status"]))} &middot; '
        f"{cell(run['n_questions'])} questions ({escape(cell(run['questions_path']))}) &times; "
        f"{cell(run['n_settings'])} settings "
        f"&middot; commit {escape(str(run['git_commit'] or 'unknown')[:12])}{' (dirty)' if run['git_dirty'] else ''} "
        f"&middot; {escape(hardware_text(run['hardware_json']))} &middot; engine "
        f"{escape(str(run['engine_precision'] or '?'))}</p>",
        f'<p class="meta" id="noise-floor">{escape(noise_floor_text(run))}</p>',
        '<p class="meta" id="faithfulness-method">'
        + "<br>".join(escape(line) for line in faithfulness_lines(run))
        + "</p>",
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
