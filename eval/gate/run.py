"""The gate over a results store: resolve the two settings, decide, write the report and the decision row."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from corpus.runtime import hardware_text
from eval.cells import cell
from eval.gate.decision import EXIT_CODES, GateDecision, Labels, decide
from eval.gate.load_check import LoadCheck, aa_figure, latency_column, load_check
from eval.gate.policy import GatePolicy, GateRequest, ShippedSetting
from eval.gate.render import decision_json, markdown_report
from eval.store import DuckDBStore, RunMeta, SettingRef
from eval.store.load_figures import latency_figures
from eval.store.rows import GateDecisionRow
from eval.store.schema import baseline_key


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
    mismatch, notes = None, []
    if base_ref.run_id != cand_ref.run_id:
        b, c = store.run_meta(base_ref.run_id), store.run_meta(cand_ref.run_id)
        for field in ("questions_sha256", "corpus_sha256"):
            if getattr(b, field) != getattr(c, field):
                mismatch = (
                    f"runs differ in {field}: {cell(getattr(b, field))[:12]} vs {cell(getattr(c, field))[:12]}; "
                    "gate only runs on the same question set and corpus"
                )
                break
        notes = run_differences(b, c)
        if policy.latency and b.hardware_sha256 != c.hardware_sha256:
            # Latency measured on two machines says as much about the machines as about the settings.
            notes.append(
                f"latency not compared: the runs were measured on different hardware "
                f"({hardware_text(b.hardware_json)} vs {hardware_text(c.hardware_json)})"
            )
            policy = policy.model_copy(update={"latency": None})
            mismatch = mismatch or "latency cannot be compared across different hardware; rerun both on one machine"
    refusal = None
    if any(m.name in FAITHFULNESS for m in policy.metrics):
        # Which method produced the figure, and how far it can be trusted on this corpus kind.
        policy, refusal, more = faithfulness_validity(store, [base_ref.run_id, cand_ref.run_id], policy)
        notes += more
    base_rows, cand_rows = store.paired_samples(base_ref, cand_ref)
    notes += precision_differences(base_rows, cand_rows, notes)
    machines = {r.get("hardware_sha256") for rows in (base_rows, cand_rows) for r in rows.values()} - {None}
    slot_machines = {r["hardware_sha256"] for ref in {base_ref.run_id, cand_ref.run_id} for r in store.slots(ref)}
    machines = (slot_machines - {None}) or machines  # latency comes from the slots where the runs have them
    if policy.latency and len(machines) > 1:
        # Rows timed on different machines (Ray workers on unlike nodes) compare the machines, not the settings.
        notes.append(f"latency not compared: the samples were timed on {len(machines)} different machines")
        policy = policy.model_copy(update={"latency": None})
        mismatch = mismatch or "latency cannot be compared across different hardware; rerun on like machines"
    speedups: dict[str, float] | None = None
    aa: tuple[float, float, float, int] | None = None
    check: LoadCheck | None = None
    if policy.latency and not mismatch:
        speedups, aa, more = paired_latency(store, base_ref, cand_ref, policy)
        notes += more
        if speedups is not None and base_ref.run_id == cand_ref.run_id:
            column = latency_column(policy.latency.metric)
            check = load_check(store, [base_ref.run_id], base_ref.setting_hash, cand_ref.setting_hash, column, policy)
    if mismatch:
        decision = GateDecision.make("undecided", [mismatch], labels, policy)
    else:
        decision = refused(decide(base_rows, cand_rows, policy, labels, speedups, aa, check), refusal)
    decision = decision.model_copy(update={"notes": notes})
    report = request.report_path
    if report is not None:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).write_text(markdown_report(decision))
    store.add_decision(decision_row(decision, base_ref.setting_hash, cand_ref.setting_hash, report))
    return decision


FAITHFULNESS = ("faithfulness", "faithfulness_model")
"""The faithfulness metrics: the rule checker's, the model verifier's."""


def faithfulness_validity(
    store: DuckDBStore, runs: Sequence[str], policy: GatePolicy
) -> tuple[GatePolicy, str | None, list[str]]:
    """The method and validity line of each faithfulness metric the policy names, per run; a deciding metric
    with a `min_validity` bar its method's stored figure for the run's corpus kind misses (or has none)
    refuses the gate (it cannot decide on a measure not shown to work here). Returns (policy, refusal, notes).
    """
    notes: list[str] = []
    refusal = None
    named = {m.name: m for m in policy.metrics if m.name in FAITHFULNESS}
    methods: dict[str, set[str]] = {}
    for run in dict.fromkeys(runs):
        meta = store.run_meta(run)
        stored = json.loads(meta.faithfulness_validity or "{}")
        for name, rule in named.items():
            entry = stored.get(name)
            if name == "faithfulness_model" and entry is None:
                notes.append(f"faithfulness_model of run {run}: {meta.verifier or 'no verifier ran (no values)'}")
            elif entry is not None:
                notes.append(f"run {run}: {entry['line']}")
            methods.setdefault(name, set()).add((entry or {}).get("method", "unknown"))
            if rule.advisory or rule.min_validity is None or refusal:
                continue
            refusal = validity_refusal(name, rule.min_validity, entry)
    for name, found in methods.items():
        if len(found) > 1 and not named[name].advisory and not refusal:
            # A refitted card or another verifier moves the figure by itself: no difference of settings.
            refusal = (
                f"{name} cannot decide: the two runs measured it with different methods ({', '.join(sorted(found))})"
            )
    if refusal:  # the other metrics still decide; the refused one is reported, and holds a pass back
        refused_name = refusal.split(" ", 1)[0]
        metrics = [m.model_copy(update={"advisory": True}) if m.name == refused_name else m for m in policy.metrics]
        policy = policy.model_copy(update={"metrics": metrics})
    return policy, refusal, notes


def validity_refusal(name: str, bar: float, entry: Mapping[str, Any] | None) -> str | None:
    """Why faithfulness metric `name` cannot decide under the bar `bar`, given its stored validity `entry` (a
    run's `faithfulness_validity[name]`; None: a run that stored none); None when its figure meets the bar.
    """
    figure = (entry or {}).get("balanced_accuracy")
    if figure is not None and figure >= bar:
        return None
    method = (entry or {}).get("method", "its method")
    kind = (entry or {}).get("corpus_kind") or "this corpus's"
    shown = "has no measured validity" if figure is None else f"reads {figure:.2f}"
    return (
        f"{name} cannot decide: {method} {shown} on {kind} answers, under the policy's min_validity {bar:.2f} "
        "(docs/faithfulness.md; a verifier that meets it, or make it advisory)"
    )


def refused(decision: GateDecision, refusal: str | None) -> GateDecision:
    """A decision with a faithfulness metric that could not decide (`refusal`): a FAIL of the others stands (a
    regression is a regression), a PASS or UNDECIDED becomes UNDECIDED with the refusal as its first reason.
    """
    if refusal is None:
        return decision
    if decision.decision == "fail":
        return decision.model_copy(update={"reasons": [*decision.reasons, refusal]})
    return decision.model_copy(
        update={"decision": "undecided", "exit_code": EXIT_CODES["undecided"], "reasons": [refusal, *decision.reasons]}
    )


def paired_latency(
    store: DuckDBStore, base: SettingRef, cand: SettingRef, policy: GatePolicy
) -> tuple[dict[str, float] | None, tuple[float, float, float, int] | None, list[str]]:
    """The latency the gate may read: per-question paired ratios baseline / candidate from the latency phase's
    slots (one run, one session, the same blocks) and the baseline's A/A twins; two settings timed in
    different runs give no pairs (an empty dict). None for the ratios: a store from before the latency phase
    (the rows' latency columns are read, and a note says so). Returns (ratios, A/A, notes).
    """
    if base.run_id != cand.run_id:
        note = (
            f"latency not compared: the two settings were timed in different runs ({base.run_id}, {cand.run_id}); "
            "latency pairs only within one run's latency phase"
        )
        return {}, None, [note]
    if not store.has_slots(base.run_id):
        return None, None, ["latency from the samples' columns: this run predates the latency phase (no slots)"]
    column = latency_column(policy.latency.metric if policy.latency else "e2e_cold_s")
    ratios = store.slot_pairs(base.run_id, base.setting_hash, 0, cand.run_id, cand.setting_hash, 0, column)
    twins = store.slot_pairs(base.run_id, base.setting_hash, 0, base.run_id, base.setting_hash, 1, column)
    return ratios, aa_figure(list(twins.values()), policy.confidence), []


def decision_row(
    decision: GateDecision,
    baseline_hash: str | None,
    candidate_hash: str | None,
    report: Path | None = None,
    results_json: str | None = None,
) -> GateDecisionRow:
    """The `gate_decisions` row of a decision (`results_json`: what to store instead of its metric table)."""
    return GateDecisionRow(
        decision_id=uuid.uuid4().hex[:12],
        created_at=decision.created_at,
        baseline=decision.baseline,
        candidate=decision.candidate,
        baseline_hash=baseline_hash,
        candidate_hash=candidate_hash,
        baseline_run=decision.baseline_run,
        candidate_run=decision.candidate_run,
        decision=decision.decision,
        exit_code=decision.exit_code,
        reasons=json.dumps(decision.reasons),
        n_questions=decision.n_questions,
        policy_json=decision.policy.model_dump_json(),
        policy_sha256=decision.policy.sha256(),
        results_json=results_json if results_json is not None else decision_json(decision),
        report_path=str(report) if report else None,
    )


def run_differences(b: RunMeta, c: RunMeta) -> list[str]:
    """What else differs between two runs (code, packages, config, index version): listed in the report."""
    out = []
    if b.git_commit != c.git_commit or b.git_dirty or c.git_dirty:
        out.append(
            f"code: {(b.git_commit or 'unknown')[:10]}{'+dirty' if b.git_dirty else ''} vs "
            f"{(c.git_commit or 'unknown')[:10]}{'+dirty' if c.git_dirty else ''}"
        )
    if b.config_hash != c.config_hash:
        out.append(f"sweep config: {cell(b.config_hash)} vs {cell(c.config_hash)}")
    if b.engine_precision and c.engine_precision and b.engine_precision != c.engine_precision:
        out.append(f"engine precision: {b.engine_precision} vs {c.engine_precision}")
    if b.index_version != c.index_version:
        out.append(f"index version: {cell(b.index_version)} vs {cell(c.index_version)}")
    pb, pc = json.loads(b.package_versions or "{}"), json.loads(c.package_versions or "{}")
    changed = sorted(k for k in set(pb) | set(pc) if pb.get(k) != pc.get(k))
    if changed:
        out.append("packages: " + ", ".join(f"{k} {cell(pb.get(k))} -> {cell(pc.get(k))}" for k in changed))
    return out


def precision_differences(
    base_rows: Mapping[str, Mapping[str, Any]], cand_rows: Mapping[str, Mapping[str, Any]], notes: Sequence[str]
) -> list[str]:
    """The engine precisions the samples were computed at, where the two settings' differ: each row's own (on
    Ray a run's rows come from several workers; the run's precision is its first worker's). Empty when the
    run-level note in `notes` already says it.
    """
    b, c = (
        sorted({str(r["engine_precision"]) for r in rows.values() if r.get("engine_precision")})
        for rows in (base_rows, cand_rows)
    )
    if not b or not c or b == c or any(n.startswith("engine precision") for n in notes):
        return []
    return [f"engine precision of the samples: {', '.join(b)} vs {', '.join(c)}"]


def watch_shipped(
    store: DuckDBStore, run_id: str, policy_path: Path, shipped: ShippedSetting | None = None
) -> GateDecision | None:
    """Tonight's rows of the shipped setting (`shipped`, else the policy's `shipped` block: a project file
    names its own) against the run it shipped on, on the questions both hold: a change of corpus, model or
    code that made it worse fails here, naming the metric. None when neither names a shipped setting. The
    decision row is stored like any gate's.
    """
    policy = GatePolicy.load(policy_path)
    shipped = shipped or policy.shipped
    if shipped is None:
        return None
    shipped_ref = store.resolve_setting(shipped.setting, shipped.run)
    tonight_ref = store.resolve_setting(shipped.setting, run_id)
    base, cand = store.paired_samples(shipped_ref, tonight_ref)
    common = sorted(set(base) & set(cand))
    labels = Labels(baseline=f"{shipped.setting}@{shipped.run}", candidate=f"{shipped.setting}@{run_id}",
                    baseline_run=shipped.run, candidate_run=run_id)  # fmt: skip
    notes = run_differences(store.run_meta(shipped.run), store.run_meta(run_id))
    speedups: dict[str, float] | None = None
    aa: tuple[float, float, float, int] | None = None
    check: LoadCheck | None = None
    twin: SettingRef | None = None
    if policy.latency:
        # Latency is never compared across days: tonight's run measures the shipped setting again, paired with
        # its uncompressed twin in the same blocks, and the policy's latency rule applies to that pair.
        twin = tonight_baseline(store, run_id, tonight_ref)
        if twin is None:
            speedups = {}
            notes.append("latency not compared: tonight's run holds no uncompressed twin of the shipped setting")
        else:
            speedups, aa, more = paired_latency(store, twin, tonight_ref, policy)
            notes += more + [f"latency: the shipped setting against {twin.setting_name}, both timed tonight"]
            column = latency_column(policy.latency.metric)
            check = load_check(store, [run_id], twin.setting_hash, tonight_ref.setting_hash, column, policy)
    refusal = None
    if any(m.name in FAITHFULNESS for m in policy.metrics):
        policy, refusal, more = faithfulness_validity(store, [shipped.run, run_id], policy)
        notes += more
    decision = refused(
        decide({q: base[q] for q in common}, {q: cand[q] for q in common}, policy, labels, speedups, aa, check),
        refusal,
    )
    if decision.latency is not None and twin is not None:
        decision = decision.model_copy(update={"latency": _pair_means(store, twin, tonight_ref, decision.latency)})
    notes.append(f"watch: {len(common)} questions held by both runs")
    decision = decision.model_copy(update={"notes": notes})
    store.add_decision(decision_row(decision, shipped_ref.setting_hash, tonight_ref.setting_hash))
    return decision


def _pair_means(store: DuckDBStore, twin: SettingRef, shipped: SettingRef, latency: Any) -> Any:
    """The watch's latency with the means of the pair its speed-up is of (tonight's twin, tonight's shipped
    setting, over the probe questions), not of the shipped run's rows against tonight's (review #16).
    """
    twin_rows, ship_rows = store.paired_samples(twin, shipped)
    metric = latency.metric
    probed = [
        q for q in twin_rows if q in ship_rows and None not in (twin_rows[q].get(metric), ship_rows[q].get(metric))
    ]
    if not probed:
        return latency.model_copy(update={"baseline_mean": None, "candidate_mean": None})
    return latency.model_copy(
        update={
            "baseline_mean": sum(twin_rows[q][metric] for q in probed) / len(probed),
            "candidate_mean": sum(ship_rows[q][metric] for q in probed) / len(probed),
        }
    )


def tonight_baseline(store: DuckDBStore, run_id: str, setting: SettingRef) -> SettingRef | None:
    """The uncompressed setting of `run_id` that shares `setting`'s baseline axes (None: the run has none)."""
    rows = store.leaderboard(run_id)
    mine = next((r for r in rows if r["setting_hash"] == setting.setting_hash), None)
    if mine is None:
        return None
    for r in rows:
        if r["compressor"] == "none" and baseline_key(r) == baseline_key(mine):
            return SettingRef(run_id=run_id, setting_hash=r["setting_hash"], setting_name=r["setting_name"])
    return None


def watch_line(d: GateDecision) -> str:
    """The watch's one line: a clean night says so; a regression names the metric that moved."""
    if d.decision == "pass":
        return f"shipped setting holds: {d.candidate} is no worse than {d.baseline} ({d.n_questions} questions)"
    return f"shipped setting {d.decision.upper()}: {d.candidate} vs {d.baseline}: {verdict_line(d)}"


def gate_each_compressed(store: DuckDBStore, run_id: str, policy_path: Path) -> list[GateDecision]:
    """Gate every compressed setting of a run against its baseline, the same setting without compression
    (`BASELINE_AXES`: same top-k, retrieval, reranker, layout, output and answer cache), a decision row each;
    settings without such a baseline are left out.
    """
    rows = store.leaderboard(run_id)
    baselines = {baseline_key(r): r["setting_name"] for r in rows if r["compressor"] == "none"}
    decisions = []
    for r in sorted(rows, key=lambda r: (r["top_k"], r["setting_name"])):
        baseline = baselines.get(baseline_key(r))
        if r["compressor"] == "none" or baseline is None:
            continue
        request = GateRequest(
            store_path=store.path, baseline=baseline, candidate=r["setting_name"], policy_path=policy_path, run=run_id
        )
        decisions.append(run_gate(request, store=store))
    return decisions


def verdict_line(d: GateDecision) -> str:
    """One line per candidate: the verdict and the metric that decided it."""
    # The deciding metric by its verdict, not by the wording of its reason (a latency reason ends "(fail)").
    deciders = [m.name for m in d.metrics if not m.advisory and m.verdict == d.decision]
    if d.latency is not None and d.latency.verdict == d.decision:
        deciders.append(d.latency.metric)
    deciding = [r for r in d.reasons if any(r.startswith(f"{name}:") for name in deciders)]
    why = (deciding or d.reasons or ["every gated metric passed"])[0]
    metric = why.split(":", 1)[0]
    if metric in FAITHFULNESS:  # which method said so, and how far it is trusted on this corpus kind
        said = next((n.split(f"{metric}: ", 1)[1] for n in d.notes if f": {metric}: " in n), None)
        why += f"; by {said}" if said else ""
    if d.decision == "pass" and d.latency is not None:
        why += f"; {d.latency.speedup:.2f}x as fast end to end"
    figures = latency_figures(d.latency) if d.latency is not None else ""
    if figures:
        why += f"; {figures}"
    return f"{d.candidate} vs {d.baseline}: {d.decision.upper()} ({why})"
