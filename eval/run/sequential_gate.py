"""The sequential release gate: sweep a baseline and a candidate over the next batch of unused questions,
look at every metric's anytime-valid confidence sequence (`eval.gate.sequential`), and stop at the first
PASS or FAIL, or at the question budget with UNDECIDED and the n reached.

The questions are drawn in a fixed order set before any answer is seen (sorted by the sha256 of the seed and
the question id: recorded with every look). Each batch is one sweep run over a question file of its own (the
batch's questions, written once, the same bytes every time), pinned to one index snapshot, probing every
question of the batch, so the latency test is sequential too. Every look is stored (`gate_looks`) under the
gate's identity: the two settings, the policy, the plan, and the run identity of what is swept (index
snapshot, models' weights, code, packages, machine, question file). A killed gate run again resumes: a look
already stored keeps its run's rows; a batch whose run was killed is resumed by the sweep (its finished
settings kept); nothing stored is computed twice, and the same inputs give the same looks and decision.

The request, the grid of its two settings, the draw order and the gate's identity are in
`eval.run.sequential_request`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel

from corpus.errors import CribsheetError, InputFileError
from corpus.models import Question
from eval.gate.decision import EXIT_CODES, GateDecision, Labels, paired_arrays
from eval.gate.load_check import latency_column, latency_reasons, load_check
from eval.gate.policy import GatePolicy, SequentialPlan
from eval.gate.run import decision_row
from eval.gate.sequential import SequentialLook, gate_looks, refuse_unbounded, sequential_decision
from eval.gate.statistics import power_figures
from eval.metrics import DIRECTIONS
from eval.run.identity import run_identity
from eval.run.provenance import faithfulness_bar
from eval.run.runner import Progress
from eval.run.sequential_request import SequentialGateRequest as SequentialGateRequest
from eval.run.sequential_request import _batch_file as _batch_file
from eval.run.sequential_request import _sequence_id as _sequence_id
from eval.run.sequential_request import draw_order as draw_order
from eval.run.sequential_request import from_gate_request as from_gate_request
from eval.run.sequential_request import pair_grid as pair_grid
from eval.run.sweep import read_questions, run_sweep
from eval.run.wiring import Components, index_identity
from eval.settings import Setting, SweepConfig
from eval.store import DuckDBStore, Record
from eval.store.rows import GateLookRow


class SequentialOutcome(BaseModel):
    """What a sequential gate decided, when, and on which runs."""

    sequence_id: str
    decision: str
    """pass | fail | undecided"""
    exit_code: int
    n_questions: int
    """Questions swept (both settings) when it stopped."""
    looks: list[GateLookRow]
    runs: list[str]
    """The run of each batch, in order."""
    reasons: list[str]
    fixed_n: dict[str, int | None]
    """Per deciding metric: paired questions a fixed-n design would need for 80 % power at the policy's
    confidence, from the differences observed (None: already decided at any n, or no spread)."""


def as_decision(outcome: SequentialOutcome, policy: GatePolicy, baseline: str, candidate: str) -> GateDecision:
    """The outcome as a `GateDecision` (what the CLI prints and the Prefect flow's state carries)."""
    labels = Labels(
        baseline=baseline, candidate=candidate, baseline_run=outcome.runs[-1], candidate_run=outcome.runs[-1]
    )
    decision = GateDecision.make(
        outcome.decision, outcome.reasons or [outcome.decision], labels, policy, outcome.n_questions
    )
    notes = [f"sequential: {len(outcome.runs)} looks, batch runs {', '.join(outcome.runs)}"]
    notes += [
        f"{m}: a fixed-n design with 80 % power would need ~{n} paired questions"
        for m, n in outcome.fixed_n.items()
        if n
    ]
    return decision.model_copy(update={"notes": notes})


def run_sequential_gate(
    request: SequentialGateRequest,
    components: Components | None = None,
    progress: Progress | None = None,
    store: DuckDBStore | None = None,
) -> SequentialOutcome:
    """Sweep batch after batch until every deciding metric is decided or the budget is spent; every look
    stored as it is taken, the decision stored as a `gate_decisions` row.
    """
    policy = GatePolicy.load(request.policy_path)
    refuse_unbounded(policy)
    refusal = faithfulness_bar(request.sweep, policy)  # a deciding faithfulness metric needs a valid method
    if refusal:
        raise CribsheetError(f"policy {request.policy_path}: {refusal}")
    plan = request.plan or policy.sequential or SequentialPlan()
    grid, b, c = pair_grid(request.sweep, request.baseline, request.candidate)
    read, read_sha256 = read_questions(request.sweep.model_copy(update={"limit": None}))
    pool = draw_order(read, request.seed)
    budget = min(plan.budget, len(pool))
    index = index_identity(request.sweep)
    config = request.sweep.model_copy(update={"grid": grid, "index_version": index.version, "limit": None})
    run = run_identity(config, index)
    if run.questions_sha256 != read_sha256:  # the identity hashed the file again: the same one?
        raise InputFileError(config.questions_path, "changed while the gate started; run again once it is written")
    sequence_id = _sequence_id(config, run, b, c, policy, plan, request.seed, pool[:budget])
    store = store or DuckDBStore(config.store_path)
    rows = store.looks(sequence_id)
    # A look whose batch had a failed question is swept again (its run's rows are recomputed unless the same
    # questions fail a second time: `reusable_source`), so a transient failure does not stay UNDECIDED.
    stored = {look.look: look.run_id for look in rows if not look.n_failed}
    owned = components is None and _sweeps_again(rows, math.ceil(budget / plan.batch))
    if owned:  # one engine for every batch, not one per batch
        from eval.run.wiring import build_components

        components = build_components(config, grid.expand())
    gate = _Sequence(request, policy, plan, config, pool[:budget], sequence_id, store, b, c)
    try:
        return gate.run(stored, components, progress)
    finally:
        if owned and components is not None:
            components.close()


@dataclass(frozen=True)
class _Sequence:
    """One sequential gate: what it computes with, the questions it draws from, where it stores."""

    request: SequentialGateRequest
    policy: GatePolicy
    plan: SequentialPlan
    config: SweepConfig
    """The sweep config pinned to one index snapshot, its grid the two settings."""
    drawn: list[Question]
    """The questions in draw order, up to the budget."""
    sequence_id: str
    store: DuckDBStore
    b: Setting
    c: Setting

    def run(
        self, stored: dict[int, str], components: Components | None, progress: Progress | None
    ) -> SequentialOutcome:
        """The loop over batches: sweep the next one unless its look is stored, look, store the look."""
        tick = progress or (lambda stage, done, total: None)
        config, plan, store, b, c = self.config, self.plan, self.store, self.b, self.c
        folder = config.store_path.parent / "sequential" / self.sequence_id[:16]
        runs: list[str] = []
        decision = "continue"
        last = math.ceil(len(self.drawn) / plan.batch)
        for look in range(1, last + 1):
            batch = self.drawn[(look - 1) * plan.batch : look * plan.batch]
            run_id = stored.get(look)
            if run_id is None or store.run_meta(run_id).status != "ok":
                stage = f"sequential gate: batch {look} ({len(batch)} questions)"
                tick(stage, 0, 1)
                batch_config = config.model_copy(
                    update={
                        "questions_path": _batch_file(folder, look, batch),
                        "probe_questions": min(len(batch), plan.probes or len(batch)),
                    }
                )
                run_id = run_sweep(batch_config, components, progress).run_id
                tick(stage, 1, 1)  # the stage ends: no heartbeat reports it running any more
            runs.append(run_id)
            drawn = [q.id for q in self.drawn[: look * plan.batch]]
            base, cand, ids, failed = _samples(store, runs, drawn, b.name, c.name)
            column = latency_column(self.policy.latency.metric) if self.policy.latency else "e2e_live_s"
            speedups = _speedups(store, runs, config.setting_hash(b), config.setting_hash(c), column)
            looks = _latest_looks(base, cand, ids, self.policy, plan, speedups)
            decision = sequential_decision(looks, self.policy)
            blocked = self._load_blocked(runs, column)
            if any(r.endswith("(fail)") for r in blocked):
                decision = "fail"  # over the offline budget: fails whatever the speed-up, as fixed-n
            elif blocked and decision != "continue":
                # The fixed-n gate's load check: a busy machine, halves that disagree, a biased A/A give no
                # latency verdict; a quality metric's FAIL still stands.
                decision = "fail" if _quality_failed(looks, self.policy) else "undecided"
            if failed:  # as the fixed-n gate: a failed question decides nothing, and is never silently dropped
                decision = "undecided"
            if decision == "continue" and look == last:
                decision = "undecided"
            latency = self.policy.latency.metric if self.policy.latency else None
            store.add_look(_look_rows(self.sequence_id, look, run_id, looks, decision, len(failed), latency))
            tick(f"sequential gate: look {look}, {len(ids)} questions: {decision}", 1, 1)
            if decision != "continue":
                break
        extra = (
            [f"{len(failed)} question(s) failed in a setting (e.g. {failed[:3]}); rerun before gating"]
            if failed
            else []
        )
        if self.policy.latency and runs:
            extra += self._load_blocked(runs, latency_column(self.policy.latency.metric))
        return _finish(self, decision, runs, base, cand, ids, extra)

    def _load_blocked(self, runs: Sequence[str], column: str) -> list[str]:
        """The fixed-n gate's rule over every batch run so far (`latency_reasons`): why latency may not decide,
        or why it fails whatever the speed-up (the offline budget).
        """
        lat = self.policy.latency
        if lat is None:
            return []
        hb, hc = self.config.setting_hash(self.b), self.config.setting_hash(self.c)
        blocked, failed = latency_reasons(load_check(self.store, runs, hb, hc, column, self.policy), lat)
        return blocked + failed


def _quality_failed(looks: dict[str, list[SequentialLook]], policy: GatePolicy) -> bool:
    """Whether a deciding metric other than latency has failed at its latest look."""
    gated = {m.name for m in policy.metrics if not m.advisory}
    return any(seq and seq[-1].verdict == "fail" for name, seq in looks.items() if name in gated)


def _sweeps_again(rows: Sequence[GateLookRow], last: int) -> bool:
    """Whether a run of the gate must sweep a batch: a look before the deciding one (or the last) is missing.
    A rerun of a gate that decided early reads every look it needs from the store, so it starts no engine.
    """
    decided = {r.look for r in rows if r.decision != "continue"}
    stop = min(decided, default=last)
    return not {r.look for r in rows if not r.n_failed} >= set(range(1, stop + 1))


def _samples(
    store: DuckDBStore, runs: Sequence[str], drawn: Sequence[str], baseline: str, candidate: str
) -> tuple[dict[str, Record], dict[str, Record], list[str], list[str]]:
    """Both settings' samples over every batch run so far, the question ids in draw order (`drawn`) that
    both answered, and those that failed in either setting (the gate then stops undecided, as fixed-n does).
    """
    rb: dict[str, Record] = {}
    rc: dict[str, Record] = {}
    for run_id in runs:
        rb |= store.samples(store.resolve_setting(baseline, run_id))
        rc |= store.samples(store.resolve_setting(candidate, run_id))
    held = [q for q in drawn if q in rb and q in rc]
    failed = [q for q in held if rb[q]["status"] != "ok" or rc[q]["status"] != "ok"]
    ids = [q for q in held if q not in set(failed)]
    return {q: rb[q] for q in ids}, {q: rc[q] for q in ids}, ids, failed


def _speedups(
    store: DuckDBStore, runs: Sequence[str], baseline_hash: str, candidate_hash: str, column: str = "e2e_live_s"
) -> dict[str, float]:
    """Per-question paired speed-ups baseline / candidate from each batch run's latency phase: the fixed-n
    gate's pairs (the same blocks of one run, the policy metric's slot column), so both gates read one estimand.
    """
    out: dict[str, float] = {}
    for run_id in runs:
        out |= store.slot_pairs(run_id, baseline_hash, 0, run_id, candidate_hash, 0, column)
    return out


def _latest_looks(
    base: dict[str, Record],
    cand: dict[str, Record],
    ids: list[str],
    policy: GatePolicy,
    plan: SequentialPlan,
    speedups: dict[str, float] | None = None,
) -> dict[str, list[SequentialLook]]:
    """Each metric's looks over every question so far, checked at every n (anytime-valid: checking more
    often costs no error rate), up to its first decision. Latency reads `speedups` (per-question paired
    ratios, in draw order) where the batch runs have them, else the rows' latency columns (older stores).
    """
    import numpy as np

    pairs = {k: v for k, v in paired_arrays(base, cand, ids, policy).items() if len(v[0])}
    if policy.latency and speedups:
        ratios = np.array([speedups[q] for q in ids if q in speedups], dtype=float)
        pairs[policy.latency.metric] = (ratios, np.ones_like(ratios))
    every = plan.model_copy(update={"batch": 1, "budget": 10**9})
    latency = policy.latency.metric if policy.latency else None
    looks = gate_looks(
        pairs, policy.model_copy(update={"latency": policy.latency if latency in pairs else None}), every
    )
    return looks


def _look_rows(
    sequence_id: str,
    look: int,
    run_id: str,
    looks: dict[str, list[SequentialLook]],
    decision: str,
    n_failed: int = 0,
    latency: str | None = None,
) -> list[GateLookRow]:
    now = datetime.now(UTC)
    rows = []
    for metric, seq in sorted(looks.items()):
        if not seq:
            continue
        last = seq[-1]
        verdict = last.verdict if not (decision == "undecided" and last.verdict == "continue") else "undecided"
        rows.append(
            GateLookRow(
                sequence_id=sequence_id,
                look=look,
                n=last.n,
                metric=metric,
                estimate=last.estimate,
                lower=last.lower,
                upper=last.upper,
                verdict=verdict,
                decision=decision,
                run_id=run_id,
                created_at=now,
                threshold=last.threshold,
                clipped=last.clipped if metric == latency else None,
                n_failed=n_failed,
            )
        )
    return rows


def _finish(
    gate: _Sequence,
    decision: str,
    runs: list[str],
    base: dict[str, Record],
    cand: dict[str, Record],
    ids: list[str],
    extra: Sequence[str] = (),
) -> SequentialOutcome:
    """The decision row, the report, and the outcome (`extra`: reasons that come first, e.g. failed questions)."""
    store, request, policy, sequence_id, b, c = gate.store, gate.request, gate.policy, gate.sequence_id, gate.b, gate.c
    looks = store.looks(sequence_id)
    final = [r for r in looks if r.look == len(runs)]
    deciding = {m.name for m in policy.metrics if not m.advisory} | (
        {policy.latency.metric} if policy.latency else set()
    )
    # The deciding metrics first (the one-line verdict names the first), then the advisory ones, marked.
    reasons = [*extra] + [
        f"{r.metric}{'' if r.metric in deciding else ' (advisory)'}: {r.verdict} at n={r.n} "
        f"(estimate {r.estimate:+.3f}, bounds [{r.lower:+.3f}, {r.upper:+.3f}]"
        + (f"; {r.clipped} pair(s) beyond the latency bound, clipped: no pass" if r.clipped else "")
        + ")"
        for r in sorted(final, key=lambda r: (r.metric not in deciding, r.verdict != decision, r.metric))
        if r.estimate is not None and r.lower is not None and r.upper is not None
    ]
    # A deciding metric no question gave a value for has no looks: named first, it is why the gate is undecided.
    silent = sorted(deciding - {r.metric for r in final})
    reasons = [f"{m}: no paired values in {len(ids)} questions: undecided" for m in silent] + reasons
    fixed_n: dict[str, int | None] = {}
    for rule in policy.metrics:
        if rule.advisory:
            continue
        pairs = paired_arrays(base, cand, ids, policy).get(rule.name)
        if pairs is not None and len(pairs[0]) > 1:
            diffs = pairs[1] - pairs[0]
            fixed_n[rule.name] = power_figures(diffs, rule.margin, DIRECTIONS[rule.name], policy.confidence)[2]
    n_questions = sum(len(store.question_ids(r)) for r in runs)
    outcome = SequentialOutcome(
        sequence_id=sequence_id,
        decision=decision,
        exit_code=EXIT_CODES[decision],
        n_questions=n_questions,
        looks=looks,
        runs=runs,
        reasons=reasons,
        fixed_n=fixed_n,
    )
    looks_json = json.dumps(
        {"sequence_id": sequence_id, "runs": runs, "looks": [r.model_dump(mode="json") for r in looks]}
    )
    store.add_decision(
        decision_row(
            as_decision(outcome, policy, b.name, c.name),
            request.sweep.setting_hash(b),
            request.sweep.setting_hash(c),
            request.report_path,
            looks_json,
        )
    )
    if request.report_path is not None:
        from eval.gate.render import sequential_markdown
        from eval.plots import looks_plot

        request.report_path.parent.mkdir(parents=True, exist_ok=True)
        data = outcome.model_dump(mode="json")
        svg = request.report_path.with_suffix(".svg")
        svg.write_text(looks_plot(data["looks"], f"{c.name} vs {b.name}"), encoding="utf-8")
        request.report_path.write_text(sequential_markdown(data, b.name, c.name, svg.name))
    return outcome
