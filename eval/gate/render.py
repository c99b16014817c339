"""The gate decision for people: a table (terminal and markdown) and the JSON stored with the decision."""

from __future__ import annotations

import json

from eval.gate.decision import GateDecision

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
            f"{m.baseline_mean:.3f}",
            f"{m.candidate_mean:.3f}",
            f"{m.diff:+.3f}",
            f"[{m.ci_low:+.3f}, {m.ci_high:+.3f}]",
            f"{m.margin:.3f}",
            "" if m.mdd is None else f"{m.mdd:.3f}",
            "" if m.n_to_decide is None else str(m.n_to_decide),
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
                f"{lt.baseline_mean:.3f} s",
                f"{lt.candidate_mean:.3f} s",
                f"{lt.speedup:.2f}x",
                f"[{lt.ci_low:.2f}, {lt.ci_high:.2f}]",
                f">={lt.min_speedup:.2f}x",
                "",
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
