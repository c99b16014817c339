"""The release gate: is the candidate setting no worse than the baseline, and as fast as it promises?

Paired per question, bootstrap confidence intervals (scipy.stats.bootstrap) on the mean difference of each
gated metric, a non-inferiority margin per metric from a versioned policy (`policy`), the statistics
(`statistics`), the three-way decision with its exit code (`decision`), its rendering (`report`), the gate over a
results store (`run`), error control across a grid (`family`) and the one recommendation against the shipped
setting (`recommend`).
"""

from eval.gate.decision import EXIT_CODES, FAIL, PASS, UNDECIDED, GateDecision, Labels, decide
from eval.gate.policy import GatePolicy, GateRequest, LatencyRule, MetricRule
from eval.gate.recommend import Recommendation, gate_against_shipped
from eval.gate.render import DECISION_COLUMNS, decision_json, decision_rows, markdown_report
from eval.gate.run import gate_each_compressed, run_gate, verdict_line, watch_line, watch_shipped
from eval.gate.statistics import LatencyResult, MetricResult, bootstrap_ci, judge_latency, judge_metric

__all__ = [
    "DECISION_COLUMNS",
    "EXIT_CODES",
    "FAIL",
    "PASS",
    "UNDECIDED",
    "GateDecision",
    "GatePolicy",
    "GateRequest",
    "Labels",
    "LatencyResult",
    "LatencyRule",
    "MetricResult",
    "MetricRule",
    "Recommendation",
    "bootstrap_ci",
    "decide",
    "gate_against_shipped",
    "gate_each_compressed",
    "verdict_line",
    "decision_json",
    "decision_rows",
    "judge_latency",
    "judge_metric",
    "markdown_report",
    "run_gate",
    "watch_line",
    "watch_shipped",
]
