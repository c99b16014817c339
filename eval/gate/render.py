"""The gate decision for people: a table (terminal and markdown) and the JSON stored with the decision."""

from __future__ import annotations

import json
from typing import Any

from eval.cells import cell
from eval.gate.decision import GateDecision
from eval.store.load_figures import latency_figures

DECISION_COLUMNS = (
    "metric",
    "n",
    "baseline",
    "candidate",
    "diff",
    "CI",
    "margin",
    "detectable",
    "n to decide",
    "verdict",
)
"""`detectable`: the minimal detectable difference at this n (80 % power); `n to decide`: for an undecided
verdict, the paired questions that would decide it if the observed difference and variance held."""


def decision_rows(d: GateDecision) -> list[tuple[str, ...]]:
    """The decision table (one row per metric, then the latency speed-up), formatted, for every renderer."""
    rows: list[tuple[str, ...]] = [
        (
            m.name + (f" ({m.population})" if m.population != "all" else "") + (" (advisory)" if m.advisory else ""),
            str(m.n),
            cell(m.baseline_mean, "{:.3f}"),
            cell(m.candidate_mean, "{:.3f}"),
            cell(m.diff, "{:+.3f}"),
            f"[{cell(m.ci_low, '{:+.3f}')}, {cell(m.ci_high, '{:+.3f}')}]",
            cell(m.margin, "{:.3f}"),
            cell(m.mdd, "{:.3f}"),
            cell(m.n_to_decide),
            m.verdict,
        )
        for m in d.metrics
    ]
    if d.latency:
        lt = d.latency
        rows.append(
            (
                f"{lt.metric} speed-up",
                str(lt.n),
                cell(lt.baseline_mean, "{:.3f} s"),  # None: only the paired ratios were read
                cell(lt.candidate_mean, "{:.3f} s"),
                cell(lt.speedup, "{:.2f}x"),
                f"[{cell(lt.ci_low, '{:.2f}')}, {cell(lt.ci_high, '{:.2f}')}]",
                f">={lt.min_speedup:.2f}x",
                "",  # the minimal detectable difference and the questions to decide are the metrics' alone
                "",
                lt.verdict,
            )
        )
    return rows


def markdown_report(d: GateDecision) -> str:
    """The decision as a markdown document."""
    lines = [
        f"# Gate: {d.candidate} vs {d.baseline}",
        "",
        f"**Decision: {d.decision.upper()}** (exit {d.exit_code}) on {d.n_questions} paired questions; "
        f"runs {d.baseline_run} / {d.candidate_run}; policy v{d.policy.version} "
        f"({d.policy.confidence:.0%} bootstrap CI, {d.policy.resamples} resamples, seed {d.policy.seed}).",
        "",
    ]
    lines += [f"- {r}" for r in d.reasons]
    if d.latency is not None and latency_figures(d.latency):
        lines += [f"- latency measured under: {latency_figures(d.latency)}"]
    if d.notes:
        lines += ["", "Differences between the runs:", *[f"- {n}" for n in d.notes]]
    lines += [
        "",
        "| " + " | ".join(DECISION_COLUMNS) + " |",
        "|---" * len(DECISION_COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in decision_rows(d)]
    return "\n".join(lines) + "\n"


def decision_json(d: GateDecision) -> str:
    """Compact JSON of the metric and latency results, stored with the decision row."""
    return json.dumps(
        {
            "metrics": [m.model_dump() for m in d.metrics],
            "latency": d.latency.model_dump() if d.latency else None,
            "notes": d.notes,
        },
        sort_keys=True,
    )


def sequential_markdown(outcome: dict[str, Any], baseline: str, candidate: str, plot: str | None = None) -> str:
    """A sequential gate's report: the decision, the plot of it forming (`plot`: an image address), then every
    look of every metric (n, estimate, bounds, verdict); `outcome` is `SequentialOutcome` as JSON.
    """
    lines = [
        f"# Sequential gate: {candidate} vs {baseline}: {outcome['decision'].upper()}",
        "",
        *([f"![the decision forming, look by look]({plot})", ""] if plot else []),
        f"{outcome['n_questions']} questions over {len(outcome['runs'])} batch runs; identity "
        f"`{outcome['sequence_id'][:16]}`. Bounds are an anytime-valid confidence sequence: valid at every look "
        "at once, so looking after every batch does not raise the error rates.",
        "",
        *[f"- {r}" for r in outcome["reasons"]],
        "",
        "| look | metric | n | estimate | lower | upper | verdict | gate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in outcome["looks"]:
        lines.append(
            f"| {r['look']} | {r['metric']} | {r['n']} | {_num(r['estimate'])} | {_num(r['lower'])} | "
            f"{_num(r['upper'])} | {r['verdict']} | {r['decision']} |"
        )
    fixed = {k: v for k, v in outcome["fixed_n"].items() if v}
    if fixed:
        lines += [
            "",
            "A fixed-n design with 80 % power at these differences: "
            + ", ".join(f"{k} ~{v} questions" for k, v in fixed.items()),
        ]
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return cell(value, "{:+.3f}")
