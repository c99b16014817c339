"""Row models of the release gate: one decision with every number behind it, a sequential gate's looks, and
a run's recommendation against the shipped setting with each candidate's verdict across the grid.
"""

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


class RecommendationRow(Row):
    """A run's one recommendation against the setting shipped today (the project's `shipped:`): which
    setting to ship, or to keep shipping, or that the grid could not decide.
    """

    run_id: str
    shipped: str
    """The setting in production today, every candidate's baseline."""
    recommended: str | None = None
    """The candidate to ship (NULL: keep shipping `shipped`, or undecided)."""
    verdict: str
    """ship | keep | undecided"""
    speedup: float | None = None
    """The recommended candidate's paired end-to-end speed-up against `shipped` (geometric mean of the
    per-question ratios shipped / candidate), optimistic after selection (the fastest of those that passed)."""
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    """Its interval: the bootstrap CI over the probe questions (`holm`), or the confidence sequence's bounds at
    the look that decided (`holm-anytime`: anytime-valid, one-sided levels as the sequential gate splits them)."""
    answer_metric: str | None = None
    """The policy's first deciding answer metric, the one reported beside the speed-up."""
    answer_diff: float | None = None
    """Its mean paired difference, candidate - shipped, over the questions the gate compared."""
    answer_ci_low: float | None = None
    answer_ci_high: float | None = None
    k: int
    """Candidates in the family: every setting of the run gated against `shipped`, failed ones included."""
    procedure: str
    """How the family-wise error rate is held: `holm` (Holm's step-down over the candidates' one-sided
    p-values at (1 - confidence) / 2) or `holm-anytime` (the same over anytime-valid p-values, batch by batch)."""
    level: float
    """The family-wise level: the chance, over all k candidates at once, of passing one that is in truth
    worse than a margin."""
    created_at: dt.datetime
    reasons: str
    """JSON list: why this verdict (which candidates passed before and after the adjustment)."""
    n_questions: int | None = None
    """`holm-anytime`: questions drawn when the sequential grid stopped (NULL: a fixed-n recommendation)."""
    fixed_n_questions: int | None = None
    """`holm-anytime`: paired questions a fixed-n design with 80 % power would need for the recommended
    candidate (else the undecided one nearest to a decision), from the differences seen."""


class FamilyVerdictRow(Row):
    """One candidate of a run gated against the shipped setting: its own verdict and p-value, and both after
    the adjustment across the grid.
    """

    run_id: str
    candidate: str
    shipped: str
    p_value: float
    """One-sided non-inferiority p-value: the largest over its deciding tests (`eval.gate.family`)."""
    adjusted_p: float
    """Holm's adjusted p-value over the run's k candidates."""
    verdict: str
    """pass | fail | undecided: the candidate gated alone (its `gate_decisions` row)."""
    adjusted_verdict: str
    """pass only when `verdict` is pass and adjusted_p <= the level; a pass Holm holds back is undecided."""
    speedup: float | None = None
    """Paired end-to-end speed-up against `shipped` (NULL: no latency verdict)."""
    created_at: dt.datetime
