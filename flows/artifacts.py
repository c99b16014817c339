"""What the flows publish to Prefect: the leaderboard as a table artifact, the gate report as markdown,
and the gate's decision as the flow run's final state (Completed on pass, Failed on fail, Failed named
"Undecided" when the gate could not decide), so the UI shows results and automations can react to them.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from prefect import State
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.states import Completed, Failed

from eval.gate import GateDecision, Recommendation
from eval.gate.render import markdown_report
from eval.release_report import pareto_svg, points, report_markdown
from eval.run.sweep import SweepResult

LEADERBOARD_COLUMNS = (
    "setting_name",
    "n",
    "n_failed",
    "answer_token_recall",
    "answer_contains",
    "context_token_recall",
    "faithfulness",
    "abstention_unanswerable",
    "realized_ratio",
    "mean_compress_cold_s",
    "probe_ttft_p50_s",
    "e2e_cold_p50_s",
)
"""The leaderboard columns a person reads first (the store's v_leaderboard has them all)."""

UNDECIDED = "Undecided"
"""Name of the Failed-type state of a gate that could not decide."""


def artifact_key(text: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes) from any text."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")[:100]


def _cell(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def publish_leaderboard(result: SweepResult) -> None:
    """The run's leaderboard as a table artifact (key `cribsheet-leaderboard`, one version per run), and its
    report (Pareto plot inline, cost bill) as a markdown artifact (key `cribsheet-report`).
    """
    rows = [{c: _cell(r.get(c)) for c in LEADERBOARD_COLUMNS} for r in result.leaderboard]
    create_table_artifact(
        table=rows,
        key="cribsheet-leaderboard",
        description=f"run {result.run_id}: {result.n_samples} samples, store {result.store_path}; "
        + "; ".join(result.faithfulness),  # each faithfulness column's method and its validity
    )
    svg = pareto_svg(points(result.leaderboard), f"run {result.run_id}")
    plot = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
    create_markdown_artifact(
        markdown=report_markdown(result.run_id, result.leaderboard, [], plot),
        key="cribsheet-report",
        description=f"run {result.run_id}: quality vs end-to-end latency and the cost bill per setting",
    )


def publish_report(html_path: Path, run_id: str) -> None:
    """The written release report in Prefect: its markdown (Pareto plot inline, break-even, the gate
    decisions; key `cribsheet-release-report`) and a link to the one-page HTML report.
    """
    folder = html_path.parent
    svg = (folder / "pareto.svg").read_text(encoding="utf-8")
    plot = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
    markdown = (folder / "report.md").read_text(encoding="utf-8").replace("(pareto.svg)", f"({plot})")
    create_markdown_artifact(
        markdown=markdown, key="cribsheet-release-report", description=f"run {run_id}: the release report"
    )
    create_link_artifact(
        link=html_path.resolve().as_uri(),
        link_text=f"release report of run {run_id} (HTML, one page)",
        key="cribsheet-release-report-html",
        description=str(html_path.resolve()),
    )


def publish_gate(decision: GateDecision) -> None:
    """The gate report as a markdown artifact keyed by the candidate setting."""
    create_markdown_artifact(
        markdown=markdown_report(decision),
        key=artifact_key(f"cribsheet-gate-{decision.candidate}"),
        description=f"{decision.decision.upper()}: {decision.candidate} vs {decision.baseline}",
    )


def publish_recommendation(rec: Recommendation) -> None:
    """The run's recommendation against the shipped setting, with every candidate's verdict before and after
    Holm's adjustment, as a markdown artifact.
    """
    lines = [
        f"# {rec.line()}",
        "",
        "| candidate | alone | p | across the grid | Holm-adjusted p |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {f.name} | {f.verdict} | {f.p_value:.4f} | {f.adjusted_verdict} | {f.adjusted_p:.4f} |" for f in rec.family
    ]
    create_markdown_artifact(
        markdown="\n".join(lines) + "\n",
        key=artifact_key(f"cribsheet-recommendation-{rec.run_id}"),
        description=f"{rec.verdict}: against {rec.shipped}",
    )


def publish_looks(outcome: dict[str, Any], baseline: str, candidate: str) -> None:
    """A sequential gate's looks (the decision forming, batch by batch) as a markdown artifact."""
    from eval.gate.render import sequential_markdown
    from eval.plots import looks_plot

    svg = looks_plot(outcome["looks"], f"{candidate} vs {baseline}")
    plot = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
    create_markdown_artifact(
        markdown=sequential_markdown(outcome, baseline, candidate, plot),
        key=artifact_key(f"cribsheet-looks-{candidate}"),
        description=f"{outcome['decision'].upper()} after {len(outcome['runs'])} looks: {candidate} vs {baseline}",
    )


def gate_state(decision: GateDecision) -> State[GateDecision]:
    """The gate flow run's final state, carrying the decision as its result."""
    message = f"{decision.decision.upper()}: {decision.candidate} vs {decision.baseline}: " + "; ".join(
        decision.reasons
    )
    if decision.decision == "pass":
        return Completed(message=message[:2000], data=decision)
    if decision.decision == "fail":
        return Failed(message=message[:2000], data=decision)
    return Failed(name=UNDECIDED, message=message[:2000], data=decision)
