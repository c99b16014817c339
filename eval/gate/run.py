"""The gate over a results store: resolve the two settings, decide, write the report and the decision row."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from eval.gate.decision import GateDecision, Labels, decide
from eval.gate.policy import GatePolicy, GateRequest
from eval.gate.report import decision_json, markdown_report
from eval.rows import GateDecisionRow
from eval.store import DuckDBStore


def run_gate(request: GateRequest, policy: GatePolicy | None = None, store: DuckDBStore | None = None) -> GateDecision:
    """Gate two stored settings; writes the decision row (and the markdown report when asked).

    `policy` and `store` default to the request's files.
    """
    policy = policy or GatePolicy.load(request.policy_path)
    store = store or DuckDBStore(request.store_path)
    base_ref = store.resolve_setting(request.baseline, request.baseline_run or request.run)
    cand_ref = store.resolve_setting(request.candidate, request.candidate_run or request.run or base_ref.run_id)
    labels = Labels(
        baseline=base_ref.setting_name,
        candidate=cand_ref.setting_name,
        baseline_run=base_ref.run_id,
        candidate_run=cand_ref.run_id,
    )
    mismatch = None
    if base_ref.run_id != cand_ref.run_id:
        b, c = store.run_meta(base_ref.run_id), store.run_meta(cand_ref.run_id)
        for field in ("questions_sha256", "corpus_sha256"):
            if getattr(b, field) != getattr(c, field):
                mismatch = (
                    f"runs differ in {field}: {str(getattr(b, field))[:12]} vs {str(getattr(c, field))[:12]}; "
                    "gate only runs on the same question set and corpus"
                )
                break
    if mismatch:
        decision = GateDecision.make("undecided", [mismatch], labels, policy)
    else:
        decision = decide(*store.paired_samples(base_ref, cand_ref), policy, labels)
    report = request.report_path
    if report is not None:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).write_text(markdown_report(decision))
    store.add_decision(
        GateDecisionRow(
            decision_id=uuid.uuid4().hex[:12],
            created_at=decision.created_at,
            baseline=labels.baseline,
            candidate=labels.candidate,
            baseline_hash=base_ref.setting_hash,
            candidate_hash=cand_ref.setting_hash,
            baseline_run=labels.baseline_run,
            candidate_run=labels.candidate_run,
            decision=decision.decision,
            exit_code=decision.exit_code,
            reasons=json.dumps(decision.reasons),
            n_questions=decision.n_questions,
            policy_json=policy.model_dump_json(),
            policy_sha256=policy.sha256(),
            results_json=decision_json(decision),
            report_path=str(report) if report else None,
        )
    )
    return decision
