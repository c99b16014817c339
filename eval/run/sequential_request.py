"""A sequential gate's request and what pins it before the first batch runs: the grid of its two settings, the
seeded order the questions are drawn in, each batch's question file, and the gate's identity (`_sequence_id`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError
from corpus.models import Question
from eval.gate.policy import GatePolicy, GateRequest, SequentialPlan
from eval.run.identity import RunIdentity, setting_models_sha256
from eval.settings import CompressionSpec, GridConfig, Setting, SweepConfig
from eval.store.schema import baseline_key


class SequentialGateRequest(BaseModel):
    """A sequential gate: which two settings of a sweep config, under which policy and plan."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sweep: SweepConfig
    """What to compute: index, question file (the pool drawn from), models, store; its grid must hold both
    settings."""
    baseline: str
    """Baseline setting name (e.g. none-k8-hybrid-dense)."""
    candidate: str
    """Candidate setting name; it must differ from the baseline only in compression."""
    policy_path: Path = Path("policies/gate.yaml")
    plan: SequentialPlan | None = None
    """Batch and budget (None: the policy's `sequential` block, else the defaults)."""
    seed: int = Field(default=0, ge=0)
    """Seeds the order the questions are drawn in."""
    report_path: Path | None = None
    """Markdown report of the looks."""


def from_gate_request(request: GateRequest, sweep: SweepConfig) -> SequentialGateRequest:
    """The sequential gate a `GateRequest` with `until_decided` asks for, computing with `sweep` (its store
    replaced by the request's).
    """
    policy = GatePolicy.load(request.policy_path)
    plan = policy.sequential or SequentialPlan()
    plan = plan.model_copy(
        update={"batch": request.batch or plan.batch, "budget": request.max_questions or plan.budget}
    )
    return SequentialGateRequest(
        sweep=sweep.model_copy(update={"store_path": request.store_path}),
        baseline=request.baseline,
        candidate=request.candidate,
        policy_path=request.policy_path,
        plan=plan,
        seed=request.seed,
        report_path=request.report_path,
    )


def draw_order(questions: Sequence[Question], seed: int) -> list[Question]:
    """The questions in the order the gate draws them: by sha256 of `seed` and the id (set before any answer)."""
    return sorted(questions, key=lambda q: hashlib.sha256(f"{seed}:{q.id}".encode()).hexdigest())


def pair_grid(config: SweepConfig, baseline: str, candidate: str) -> tuple[GridConfig, Setting, Setting]:
    """A grid of exactly the two settings (from `config`'s grid, by name), which must differ only in
    compression: a compression setting is gated against its own uncompressed twin.
    """
    settings = {s.name: s for s in config.grid.expand()}
    for name in (baseline, candidate):
        if name not in settings:
            raise CribsheetError(f"setting '{name}' is not in the sweep's grid; known: {', '.join(sorted(settings))}")
    b, c = settings[baseline], settings[candidate]
    if baseline_key(b.model_dump()) != baseline_key(c.model_dump()):
        raise CribsheetError(
            f"'{baseline}' and '{candidate}' differ in more than compression; the sequential gate compares a "
            "compressed setting with the same setting uncompressed"
        )
    grid = GridConfig(
        compressions=[CompressionSpec(compressor=s.compressor, target_ratio=s.target_ratio) for s in (b, c)],
        top_ks=[b.top_k],
        rerankers=[b.reranker],
        retrievals=[b.retrieval],
        layouts=[b.layout],
        outputs=[b.output],
        answer_caches=[b.answer_cache],
    )
    if {s.name for s in grid.expand()} != {baseline, candidate}:
        raise CribsheetError(f"could not build a grid of only '{baseline}' and '{candidate}'")
    return grid, b, c


def _sequence_id(
    config: SweepConfig,
    run: RunIdentity,
    b: Setting,
    c: Setting,
    policy: GatePolicy,
    plan: SequentialPlan,
    seed: int,
    drawn: Sequence[Question],
) -> str:
    """The gate's identity: the run identity of what it sweeps (`run`), the two settings with the weights of
    the models each names alone (its reranker, compressor LM, unit scorer: the reuse key holds only the shared
    ones), the policy, the plan and the drawn questions in order.
    """
    payload: dict[str, object] = {
        "run": run.reuse_key,
        "baseline": config.setting_hash(b),
        "candidate": config.setting_hash(c),
        "policy": policy.sha256(),
        "plan": plan.model_dump(mode="json"),
        "seed": seed,
        "questions": [q.id for q in drawn],
    }
    own = {"baseline": setting_models_sha256(config, b), "candidate": setting_models_sha256(config, c)}
    if any(own.values()):  # a gate of settings that name no model of their own keeps its earlier id
        payload["setting_models"] = own
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _batch_file(folder: Path, look: int, batch: Sequence[Question]) -> Path:
    """The batch's question file: the same bytes every time (its digest is part of the batch run's identity)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"batch-{look:04d}.jsonl"
    text = "".join(q.model_dump_json() + "\n" for q in batch)
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path
