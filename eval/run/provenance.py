"""Where a run came from: the run, setting and question rows, the run's from its identity (`eval.run.identity`,
which also holds what the identity is made of: code, package and weights versions, the machine).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

from corpus.cluster import RayOptions
from corpus.models import Question
from corpus.retrieve import IndexIdentity
from eval.gate import GatePolicy
from eval.gate.run import validity_refusal
from eval.run.identity import (
    code_sha256,
    file_sha256,
    git_state,
    hardware_digest,
    model_fingerprints,
    package_versions,
    run_identity,
    setting_models_sha256,
)
from eval.settings import Setting, SweepConfig, setting_json
from eval.store import dumps
from eval.store.rows import QuestionRow, RunRow, SettingRow

__all__ = [
    "code_sha256",
    "file_sha256",
    "git_state",
    "hardware_digest",
    "model_fingerprints",
    "new_run_id",
    "package_versions",
    "question_rows",
    "run_row",
    "setting_rows",
]


def new_run_id() -> str:
    """A sortable, unique run id: UTC start time plus a random suffix."""
    return f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def run_row(
    run_id: str,
    config: SweepConfig,
    n_questions: int,
    n_settings: int,
    index: IndexIdentity,
    ray: RayOptions | None = None,
) -> RunRow:
    """The `runs` row of a sweep that starts now: its identity (`eval.run.identity`), built once, and the
    fingerprint and reuse key read from it.
    """
    ident = run_identity(config, index, ray)
    return RunRow(
        run_id=run_id,
        started_at=dt.datetime.now(dt.UTC),
        status="running",
        config_json=config.model_dump_json(),
        config_hash=ident.config_hash,
        git_commit=ident.git_commit,
        git_dirty=ident.git_dirty,
        package_versions=dumps(ident.package_versions),
        questions_path=str(config.questions_path),
        questions_sha256=ident.questions_sha256,
        index_path=str(config.index_path),
        index_version=ident.index_version,
        corpus_sha256=ident.corpus_sha256,
        index_sha256=ident.index_sha256,
        index_build_id=ident.index_build_id or None,
        code_sha256=ident.code_sha256,
        ray_options=ident.ray_options,
        n_questions=n_questions,
        n_settings=n_settings,
        hardware_json=hardware_digest()[0],
        hardware_sha256=ident.hardware_sha256,
        model_fingerprints=dumps(ident.model_fingerprints),
        pid=os.getpid(),
        host=socket.gethostname(),
        resumes=0,
        fingerprint=ident.fingerprint,
        reuse_key=ident.reuse_key,
        faithfulness_validity=dumps(faithfulness_validity(config)),
    )


def faithfulness_validity(config: SweepConfig) -> dict[str, dict[str, Any]]:
    """Per faithfulness metric the run fills: the method behind it, the corpus kind, and that method's measured
    validity on that kind (balanced accuracy, AUROC, n; None: not measured), with the line people read.
    """
    from eval.faithfulness.validity import validity_line, validity_of

    verifier = config.verifier.model_dump(exclude_none=True) if config.verifier else None
    out: dict[str, dict[str, Any]] = {}
    for metric in ("faithfulness", "faithfulness_model") if verifier else ("faithfulness",):
        method, figure = validity_of(metric, verifier, config.corpus_kind, config.embedder)
        out[metric] = {
            "method": method,
            "corpus_kind": config.corpus_kind,
            "balanced_accuracy": figure.balanced_accuracy if figure else None,
            "auroc": figure.auroc if figure else None,
            "n": figure.n if figure else None,
            "line": validity_line(metric, verifier, config.corpus_kind, config.embedder),
        }
    return out


def setting_rows(run_id: str, config: SweepConfig, settings: Sequence[Setting]) -> list[SettingRow]:
    """One `settings` row per setting, its components' specs in `setting_json`."""
    return [
        SettingRow(
            run_id=run_id,
            setting_hash=config.setting_hash(s),
            setting_name=s.name,
            setting_json=setting_json(s, config.component_specs(s)),
            models_sha256=setting_models_sha256(config, s),
            **s.model_dump(),
        )
        for s in settings
    ]


def question_rows(run_id: str, questions: Sequence[Question]) -> list[QuestionRow]:
    """One `questions` row per question of the run."""
    return [
        QuestionRow(
            run_id=run_id,
            question_id=q.id,
            question=q.question,
            answers=dumps(q.answers),
            gold_doc_ids=dumps(q.gold_doc_ids),
            answerable=q.answerable,
        )
        for q in questions
    ]


def faithfulness_bar(config: SweepConfig, policy: GatePolicy) -> str | None:
    """Why a deciding faithfulness metric of `policy` could not decide on this sweep (its method's validity on
    the sweep's corpus kind is under the metric's `min_validity`, or unmeasured, or no verifier fills it); None
    when every such metric can. Checked before any work, as the gate checks it again on the stored run.
    """
    stored = faithfulness_validity(config)
    for rule in policy.metrics:
        if rule.advisory or rule.min_validity is None:
            continue
        entry = stored.get(rule.name)
        if entry is None:
            return f"{rule.name} decides, but no verifier fills it (set verifier: likelihood, or make it advisory)"
        refusal = validity_refusal(rule.name, rule.min_validity, entry)  # the gate's own check, before any work
        if refusal:
            return refusal
    return None
