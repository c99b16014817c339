"""The sequential gate end to end on fakes: batch after batch until decided, every look stored under the
gate's identity; run again, it recomputes nothing and gives the same looks; killed with SIGKILL mid-batch and
run again, the same looks and decision, no stored sample computed again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eval.gate.policy import SequentialPlan
from eval.run.sequential_gate import SequentialGateRequest, draw_order, run_sequential_gate
from eval.store import DuckDBStore
from tests.conftest import write_jsonl
from tests.fakes import ExtractingGenerator
from tests.helpers import SweepSetup

FACTS = [
    ("How high is K2?", ["8,611 metres"], "K2"),
    ("What is the largest continent?", ["Asia"], "Asia"),
    ("Where did the Beatles form?", ["Liverpool"], "Liverpool"),
    ("When was the Eiffel Tower completed?", ["1889"], "Paris"),
    ("Where does the Nile flow into?", ["Mediterranean Sea"], "Nile"),
]
POLICY = """
version: 2
confidence: 0.9
min_questions: 2
metrics:
  - {name: answer_contains, margin: 0.02}
latency: null
"""
BUDGET = 100


def pool(n: int = BUDGET) -> list[dict[str, Any]]:
    return [
        {"id": f"s{i:03d}", "question": f"{q} (asked {i})", "answers": a, "gold_doc_ids": [d]}
        for i, (q, a, d) in ((i, FACTS[i % len(FACTS)]) for i in range(n))
    ]


def request(setup: SweepSetup, tmp_path: Path, store: Path) -> SequentialGateRequest:
    config, _ = setup
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    sweep = config.model_copy(
        update={"questions_path": write_jsonl(tmp_path / "pool.jsonl", pool()), "store_path": store}
    )
    return SequentialGateRequest(
        sweep=sweep,
        baseline="none-k1-hybrid-dense",
        candidate="halving-2x-k1-hybrid-dense",
        policy_path=policy,
        plan=SequentialPlan(batch=20, budget=BUDGET),
    )


def test_the_draw_order_is_fixed_by_the_seed_alone() -> None:
    from corpus.models import Question

    questions = [Question.model_validate(q) for q in pool(20)]
    assert [q.id for q in draw_order(questions, 0)] == [q.id for q in draw_order(list(reversed(questions)), 0)]
    assert [q.id for q in draw_order(questions, 0)] != [q.id for q in draw_order(questions, 1)]


def test_the_gate_sweeps_batch_after_batch_until_decided_and_a_rerun_computes_nothing(
    setup: SweepSetup, tmp_path: Path
) -> None:
    _, components = setup
    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    engine = ExtractingGenerator()
    outcome = run_sequential_gate(req, components(engine))
    # Halving mangles the first passage the fake answers from: clearly worse, decided before the budget.
    assert outcome.decision == "fail" and outcome.n_questions < BUDGET
    assert len(outcome.runs) == len({r.look for r in outcome.looks}) == outcome.n_questions // 20
    by_metric: dict[str, list[int]] = {}
    for row in outcome.looks:
        by_metric.setdefault(row.metric, []).append(row.n)
        assert row.lower is not None and row.upper is not None and row.lower <= row.upper
    assert all(ns == sorted(ns) for ns in by_metric.values())
    assert {r.decision for r in outcome.looks if r.look == len(outcome.runs)} == {outcome.decision}
    assert all(r.decision == "continue" for r in outcome.looks if r.look < len(outcome.runs))
    decided = [r for r in outcome.looks if r.look == len(outcome.runs) and r.verdict == outcome.decision]
    assert decided  # the metric that decided it is named at the last look
    # The release report shows the decision forming: bounds, boundary, and the look that decided, per metric.
    from eval.release_report import html_report

    page = html_report(DuckDBStore(req.sweep.store_path, read_only=True), outcome.runs[0])
    for part in ("bounds", "estimate", "boundary", "decided"):
        assert f'id="{part}-answer_contains"' in page, part
    # Run again: every look is found stored with its run; no prompt is generated again.
    again_engine = ExtractingGenerator()
    again = run_sequential_gate(req, components(again_engine))
    assert again_engine.batches == [] and again_engine.probes == []
    assert [r.model_dump(exclude={"created_at"}) for r in again.looks] == [
        r.model_dump(exclude={"created_at"}) for r in outcome.looks
    ]
    assert (again.decision, again.runs) == (outcome.decision, outcome.runs)
    decisions = DuckDBStore(req.sweep.store_path, read_only=True).query("SELECT decision FROM gate_decisions")
    assert [d["decision"] for d in decisions] == [outcome.decision] * 2  # each run of the gate records its decision


def test_a_rerun_of_a_gate_that_decided_early_starts_no_engine(
    setup: SweepSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every look up to the deciding one is stored: a rerun left to build its own components builds none."""
    import eval.run.wiring

    _, components = setup
    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    outcome = run_sequential_gate(req, components(ExtractingGenerator()))
    assert outcome.n_questions < BUDGET  # decided before the budget

    def no_engine(*args: object) -> None:
        raise AssertionError("a rerun of a decided gate built its components")

    monkeypatch.setattr(eval.run.wiring, "build_components", no_engine)
    again = run_sequential_gate(req)
    assert (again.decision, again.runs) == (outcome.decision, outcome.runs)


CHILD = """
import sys
from pathlib import Path
from eval.run.sequential_gate import SequentialGateRequest, run_sequential_gate
from tests.eval.test_sequential_gate import components_for, HoldingGenerator
req = SequentialGateRequest.model_validate_json(Path(sys.argv[1]).read_text())
run_sequential_gate(req, components_for(req, HoldingGenerator(Path(sys.argv[2]), int(sys.argv[3]))))
"""


class HoldingGenerator(ExtractingGenerator):
    """Touches `flag` at its `at`-th batch and then waits there until killed."""

    def __init__(self, flag: Path, at: int) -> None:
        super().__init__()
        self.flag, self.at = flag, at

    def generate(self, prompts: Any, json_schema: Any = None) -> Any:
        if len(self.batches) + 1 == self.at:
            self.flag.touch()
            time.sleep(600)
        return super().generate(prompts, json_schema)


def components_for(req: SequentialGateRequest, generator: ExtractingGenerator) -> Any:
    from corpus.retrieve import LanceRetriever
    from eval.compress import NoCompressor
    from eval.rerank import DenseReranker
    from eval.run.wiring import Components
    from tests.fakes import HalvingCompressor, HashEmbedder, count_words

    embedder = HashEmbedder()
    return Components(
        embedder=embedder,
        retriever=LanceRetriever(req.sweep.index_path, embedder),
        rerankers={"dense": DenseReranker(embedder)},
        compressors={"none": NoCompressor(count_words), "halving": HalvingCompressor()},
        generator=generator,
    )


def test_killed_mid_batch_then_run_again_gives_the_same_looks_and_computes_no_stored_sample_again(
    setup: SweepSetup, tmp_path: Path
) -> None:
    """Killed in the second batch's second setting: the first look is stored, the second batch's run holds
    its first setting; the rerun computes exactly the samples that were not stored."""
    _, components = setup
    reference = run_sequential_gate(request(setup, tmp_path, tmp_path / "ref.duckdb"), components())
    req = request(setup, tmp_path, tmp_path / "killed.duckdb")
    spec = tmp_path / "request.json"
    spec.write_text(req.model_dump_json())
    flag = tmp_path / "holding"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(spec), str(flag), "4"], cwd=root, env=env)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert child.poll() is None, "the gate ended before it reached the batch it holds in"
            assert time.monotonic() < deadline, "the gate never reached the batch it holds in"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    reader = DuckDBStore(req.sweep.store_path, read_only=True)
    stored = reader.query("SELECT count(*) AS n FROM samples")[0]["n"]
    looks_before = reader.query("SELECT count(DISTINCT look) AS n FROM gate_looks")[0]["n"]
    del reader
    assert stored == 3 * 20 and looks_before == 1  # batch 1 (2 settings) and batch 2's first setting
    engine = ExtractingGenerator()
    again = run_sequential_gate(req, components(engine))
    strip = {"created_at", "run_id", "sequence_id"}
    assert [r.model_dump(exclude=strip) for r in again.looks] == [r.model_dump(exclude=strip) for r in reference.looks]
    assert again.decision == reference.decision
    computed = sum(len(batch) for batch in engine.batches)
    assert computed == 2 * again.n_questions - stored  # every sample once: nothing stored is computed again


def test_the_verdict_line_of_a_sequential_decision_names_a_deciding_metric_first(
    setup: SweepSetup, tmp_path: Path
) -> None:
    from eval.gate import GatePolicy, verdict_line
    from eval.run.sequential_gate import as_decision

    _, components = setup
    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    policy = tmp_path / "advisory-first.yaml"
    policy.write_text(
        POLICY.replace("metrics:\n", "metrics:\n  - {name: answer_token_recall, margin: 0.5, advisory: true}\n")
    )
    req = req.model_copy(update={"policy_path": policy})
    outcome = run_sequential_gate(req, components())
    line = verdict_line(as_decision(outcome, GatePolicy.load(policy), req.baseline, req.candidate))
    assert outcome.reasons[0].startswith("answer_contains: fail") and "answer_contains: fail" in line
    assert any(r.startswith("answer_token_recall (advisory):") for r in outcome.reasons)


def test_a_question_failed_in_either_setting_stops_the_gate_undecided(setup: SweepSetup, tmp_path: Path) -> None:
    """As the fixed-n gate refuses to decide: a failed question is never silently dropped (it may be the very
    question the candidate would lose), and the looks say how many failed."""
    from tests.fakes import HalvingCompressor

    _, components = setup
    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    req = req.model_copy(update={"sweep": req.sweep.model_copy(update={"max_failed_fraction": 0.5})})
    comps = components(halving=HalvingCompressor(fail_on="K2"))  # every K2 context fails to compress
    outcome = run_sequential_gate(req, comps)
    assert outcome.decision == "undecided" and len(outcome.runs) == 1
    assert "failed in a setting" in outcome.reasons[0]
    assert {r.n_failed for r in outcome.looks} and all((r.n_failed or 0) > 0 for r in outcome.looks)


def test_an_unbounded_policy_metric_is_refused_before_anything_is_swept(setup: SweepSetup, tmp_path: Path) -> None:
    from corpus.errors import CribsheetError

    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    req.policy_path.write_text(POLICY.replace("answer_contains, margin: 0.02", "prompt_tokens, margin: 10"))
    with pytest.raises(CribsheetError, match=r"prompt_tokens: not bounded in \[0, 1\]"):
        run_sequential_gate(req)
    assert not req.sweep.store_path.exists()  # nothing swept, nothing stored


def test_a_faithfulness_metric_under_its_validity_bar_is_refused_before_anything_is_swept(
    setup: SweepSetup, tmp_path: Path
) -> None:
    """The single sequential gate checks the bar as the grid does (G149): the hash embedder's run has no
    measured validity for the rule checker, so a deciding faithfulness metric cannot decide, and nothing runs."""
    from corpus.errors import CribsheetError

    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    req.policy_path.write_text(
        POLICY.replace(
            "  - {name: answer_contains, margin: 0.02}\n",
            "  - {name: answer_contains, margin: 0.02}\n  - {name: faithfulness, margin: 0.05, min_validity: 0.7}\n",
        )
    )
    with pytest.raises(CribsheetError, match=rf"policy {req.policy_path}: faithfulness cannot decide: rule checker"):
        run_sequential_gate(req)
    assert not req.sweep.store_path.exists()  # nothing swept, nothing stored


def test_a_deciding_metric_without_values_leaves_the_gate_undecided_at_its_budget_and_says_why(
    setup: SweepSetup, tmp_path: Path
) -> None:
    """As the fixed-n gate: abstention has values on unanswerable questions only, and this pool has none."""
    _, components = setup
    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    req.policy_path.write_text(POLICY.replace("answer_contains, margin: 0.02", "abstained, margin: 0.02"))
    req = req.model_copy(update={"plan": SequentialPlan(batch=10, budget=20)})
    ticks: list[tuple[str, int, int]] = []
    outcome = run_sequential_gate(req, components(ExtractingGenerator()), lambda *t: ticks.append(t))
    assert outcome.decision == "undecided" and len(outcome.runs) == 2
    assert outcome.reasons[0] == "abstained: no paired values in 20 questions: undecided"
    # Every stage that started ends, so a heartbeat never reports a finished batch as running.
    started = {stage for stage, done, _ in ticks if done == 0 and stage.startswith("sequential gate: batch")}
    assert len(started) == 2 and all((stage, 1, 1) in ticks for stage in started)


def test_the_gate_pairs_latency_from_each_batchs_latency_phase(setup: SweepSetup, tmp_path: Path) -> None:
    """With a `latency:` rule every question of a batch is probed (no `probes`): the latency test reads one
    paired ratio per question, from the batch run's own blocks, and looks at the same n as the metrics."""
    _, components = setup
    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    req.policy_path.write_text(
        POLICY.replace("latency: null", "latency: {metric: e2e_cold_s, min_speedup: 0.5, min_probes: 4}")
    )
    req = req.model_copy(update={"plan": SequentialPlan(batch=10, budget=20)})
    outcome = run_sequential_gate(req, components(ExtractingGenerator()))
    lat = [r for r in outcome.looks if r.metric == "e2e_cold_s"]
    # One ratio per probed question: 10 at the first look; the second reads its batch's too (checked at every
    # n, its look stops where the latency test decided).
    assert [r.look for r in lat] == [1, 2] and lat[0].n == 10 and 10 < lat[1].n <= 20
    store = DuckDBStore(req.sweep.store_path, read_only=True)
    slots = store.query("SELECT run_id, count(DISTINCT question_id) AS n FROM latency_slots GROUP BY run_id")
    assert {r["run_id"]: r["n"] for r in slots} == {run: 10 for run in outcome.runs}


def test_a_reranker_retrained_in_place_is_another_gate_and_its_old_looks_are_not_read(
    setup: SweepSetup, tmp_path: Path
) -> None:
    """REVIEW #5: the gate's identity covers the weights of a setting's own models (here the cross-encoder both
    settings rerank with), not only the shared ones of the run's reuse key: a rerun after the reranker was
    retrained into the same folder sweeps again instead of returning the looks of the old weights."""
    from eval.rerank import DenseReranker
    from tests.fakes import HashEmbedder

    _, components = setup
    ce = tmp_path / "ce"
    ce.mkdir()
    (ce / "model.safetensors").write_bytes(b"a cross-encoder")
    reranker = f"cross-encoder:{ce}"
    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    grid = req.sweep.grid.model_copy(update={"rerankers": [reranker], "top_ks": [1]})
    req = req.model_copy(
        update={
            "sweep": req.sweep.model_copy(update={"grid": grid}),
            "baseline": f"none-k1-hybrid-{reranker}",
            "candidate": f"halving-2x-k1-hybrid-{reranker}",
            "plan": SequentialPlan(batch=10, budget=20),
        }
    )

    def comps(engine: ExtractingGenerator) -> Any:
        built = components(engine)
        built.rerankers[reranker] = DenseReranker(HashEmbedder())  # stands in for the model
        return built

    first = run_sequential_gate(req, comps(ExtractingGenerator()))
    same = ExtractingGenerator()
    assert run_sequential_gate(req, comps(same)).sequence_id == first.sequence_id and same.batches == []
    (ce / "model.safetensors").write_bytes(b"the cross-encoder retrained")  # same folder, new weights
    engine = ExtractingGenerator()
    again = run_sequential_gate(req, comps(engine))
    assert again.sequence_id != first.sequence_id
    assert engine.batches  # swept with the new weights, not the old looks returned
    assert not set(again.runs) & set(first.runs)


def test_a_rerun_sweeps_again_a_batch_whose_question_failed_transiently(setup: SweepSetup, tmp_path: Path) -> None:
    """A transient failure leaves the gate UNDECIDED once, not forever: the rerun sweeps that batch again (its
    failed setting computed afresh, not copied: `reusable_source`) and goes on to a decision."""
    from tests.fakes import HalvingCompressor

    _, components = setup
    req = request(setup, tmp_path, tmp_path / "r.duckdb")
    req = req.model_copy(update={"sweep": req.sweep.model_copy(update={"max_failed_fraction": 0.5})})
    flaky = run_sequential_gate(req, components(halving=HalvingCompressor(fail_on="K2")))
    assert flaky.decision == "undecided" and "failed in a setting" in flaky.reasons[0]
    again = run_sequential_gate(req, components(ExtractingGenerator()))
    assert again.decision == "fail" and all(not r.n_failed for r in again.looks)
