"""Row models of the release gate: one decision with every number behind it, and a sequential gate's looks."""

from __future__ import annotations

import datetime as dt

from eval.store.row_base import Row


class GateDecisionRow(Row):
    """One release-gate decision with every number behind it."""

    decision_id: str
    created_at: dt.datetime
    baseline: str
    candidate: str
    baseline_hash: str | None = None
    candidate_hash: str | None = None
    baseline_run: str
    candidate_run: str
    decision: str
    """pass | fail | undecided"""
    exit_code: int
    reasons: str
    """JSON list of human-readable reasons."""
    n_questions: int
    policy_json: str
    policy_sha256: str
    results_json: str
    """Per metric: means, diff, CI, margin, verdict; and the latency speed-up with its CI."""
    report_path: str | None = None


class GateLookRow(Row):
    """One metric at one look of a sequential gate (`cribsheet gate --until-decided`): the anytime-valid
    bounds after n paired questions, and the verdict they gave.
    """

    sequence_id: str
    """The sequential gate's identity: the two settings, the policy, the plan (batch, budget, seed) and the
    run identity of what it sweeps (index snapshot, models, code, packages, machine, question file)."""
    look: int
    """1, 2, ...: one per batch of questions."""
    n: int
    """Paired questions (probes, for the latency metric) behind this look."""
    metric: str
    estimate: float | None = None
    """Mean paired difference (candidate - baseline; for latency: the speed-up baseline / candidate)."""
    lower: float | None = None
    upper: float | None = None
    """The confidence sequence's bounds at this look (valid at every look at once)."""
    verdict: str
    """pass | fail | continue | undecided (the budget is spent)."""
    decision: str
    """The gate's overall verdict at this look: pass | fail | continue | undecided."""
    run_id: str
    """The run that computed this look's batch of questions."""
    created_at: dt.datetime
    threshold: float | None = None
    """The decision boundary in the estimate's units: -margin (+margin for a lower-is-better metric), or
    the latency speed-up floor."""
    clipped: int | None = None
    """Latency: paired speed-ups beyond the plan's `latency_bound`, clipped (a PASS is refused while any is)."""
    n_failed: int | None = None
    """Questions drawn so far that failed in either setting (any: the gate stops UNDECIDED, as fixed-n does)."""
