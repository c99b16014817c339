"""The latency phase: every setting of a run timed back to back per probe question, in seeded blocks, the
whole request live in its slot, with an A/A twin per baseline; pairs never span two runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from eval.engine.generator import Probe
from eval.gate.decision import Labels, decide
from eval.gate.policy import GatePolicy, GateRequest, LatencyRule, MetricRule
from eval.gate.run import run_gate
from eval.run.latency import LatencyPhase, LiveRequest, block_order, measure_run, probe_questions
from eval.run.precompute import precompress, records
from eval.run.runner import SettingRunner
from eval.run.sweep import load_questions, run_sweep
from eval.run.wiring import index_identity
from eval.settings import CompressionSpec, GridConfig
from eval.store import DuckDBStore
from tests.fakes import ExtractingGenerator, HalvingCompressor
from tests.helpers import SweepSetup


class DriftingGenerator(ExtractingGenerator):
    """A fake engine whose prefill gets `factor` times slower after its first `switch_after` probes: a
    neighbour that starts a CPU-bound job half-way through the run."""

    def __init__(self, switch_after: int, factor: float = 3.0) -> None:
        super().__init__()
        self.switch_after, self.factor = switch_after, factor

    def probe(self, prompt: str, json_schema: dict[str, Any] | None = None) -> Probe:
        p = super().probe(prompt, json_schema)
        slow = self.factor if len(self.probes) > self.switch_after else 1.0
        # 10 ms a word: the live retrieval's real milliseconds are noise beside it.
        return p.model_copy(update={"ttft_s": 0.01 * p.prompt_tokens * slow})


def _twin_layouts(setup: SweepSetup, probes: int = 4) -> Any:
    """The grid of two settings with the same prefill: no compression at top-3, ranked and edges."""
    config, _ = setup
    grid = GridConfig(compressions=[CompressionSpec()], top_ks=[3], layouts=["ranked", "edges"])
    return config.model_copy(update={"grid": grid, "probe_questions": probes})


def test_a_speed_change_half_way_moves_no_ratio(setup: SweepSetup) -> None:
    """Two settings with identical prefill read 1.0 apart although the engine got 3x slower half-way through
    the probes. Probed setting by setting (the design before the latency phase), the second setting took
    every slow probe and the ratio read about 3x."""
    config = _twin_layouts(setup)
    _, components = setup
    n = config.probe_questions
    counting = ExtractingGenerator()  # a dry run counts the probes the run makes: the switch comes half-way
    run_sweep(config.model_copy(update={"store_path": config.store_path.with_name("dry.duckdb")}), components(counting))
    engine = DriftingGenerator(switch_after=len(counting.probes) // 2)
    result = run_sweep(config, components(engine))
    policy = GatePolicy(metrics=[], min_questions=2, latency=LatencyRule(min_probes=n))
    names = [r["setting_name"] for r in sorted(result.leaderboard, key=lambda r: r["layout"])]
    request = GateRequest(store_path=config.store_path, baseline=names[0], candidate=names[1], run=result.run_id)
    decision = run_gate(request, policy)
    assert decision.latency is not None
    assert decision.latency.speedup == pytest.approx(1.0, abs=0.1)
    with duckdb.connect(str(config.store_path), read_only=True) as con:
        aa = con.execute("SELECT aa_ratio, aa_ci_low, aa_ci_high FROM runs").fetchone()
    # The A/A floor reads the same: two identical requests 1.0 apart (the fake's only noise is the live
    # retrieval's milliseconds, so its interval is tight around 1).
    assert aa is not None and aa[0] == pytest.approx(1.0, abs=0.02) and 0.98 <= aa[1] <= aa[2] <= 1.02


def test_every_setting_is_timed_in_every_block_and_each_slot_is_the_whole_request(setup: SweepSetup) -> None:
    config, components = setup
    config = config.model_copy(update={"probe_questions": 3, "probe_repeats": 2})
    result = run_sweep(config, components())
    store = DuckDBStore(config.store_path)
    slots = store.slots(result.run_id)
    settings = config.grid.expand()
    baselines = [s for s in settings if s.compressor == "none"]
    assert len(slots) == 3 * 2 * (len(settings) + len(baselines))
    assert {r["status"] for r in slots} == {"ok"} and len({r["session_id"] for r in slots}) == 1
    for r in slots:  # retrieve + rerank + compress + TTFT, all measured in the slot: nothing stored added
        parts = r["retrieve_s"] + r["rerank_s"] + r["compress_s"] + r["ttft_s"]
        assert r["e2e_live_s"] == pytest.approx(parts, abs=2e-3) and r["e2e_live_s"] >= parts
    orders = {(r["question_id"], r["repeat"]): [] for r in slots}
    for r in sorted(slots, key=lambda r: r["position"]):
        orders[r["question_id"], r["repeat"]].append((r["setting_hash"], r["twin"]))
    assert len({tuple(o) for o in orders.values()}) > 1  # a seeded random order, not the grid's order each time
    twins = [r for r in slots if r["twin"] == 1]
    assert {r["setting_hash"] for r in twins} == {config.setting_hash(s) for s in baselines}
    # Each probe question's sample row holds the median over its blocks; other questions hold no latency.
    rows = store.query(
        "SELECT s.question_id, s.setting_hash, s.e2e_cold_s, s.latency_n, s.latency_session, "
        "(SELECT median(e2e_live_s) FROM latency_slots l WHERE l.run_id = s.run_id AND l.twin = 0 "
        " AND l.setting_hash = s.setting_hash AND l.question_id = s.question_id) AS m FROM samples s"
    )
    probed = {q.id for q in probe_questions(load_questions(config), 3)}
    for r in rows:
        if r["question_id"] in probed:
            assert r["e2e_cold_s"] == pytest.approx(r["m"]) and r["latency_n"] == 2
            assert r["latency_session"] == slots[0]["session_id"]
        else:
            assert r["e2e_cold_s"] is None and r["latency_n"] is None


def test_block_order_is_seeded_and_holds_every_setting_once_and_each_baseline_twice() -> None:
    order = block_order(4, [0, 2], "q1", 0, seed=7)
    assert sorted(order) == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (3, 0)]
    assert order == block_order(4, [0, 2], "q1", 0, seed=7)
    assert {tuple(block_order(4, [0, 2], "q1", r, seed=7)) for r in range(6)} != {tuple(order)}


def test_every_compressor_computes_its_context_in_its_slot_unless_a_recorded_precompute_made_it(
    setup: SweepSetup,
) -> None:
    """The extractive selector keeps sentence vectors across requests; a slot embeds them again. The agnostic
    compressor's per-passage compressions, which the answers phase cached on exactly these passages, are not
    read either: its model runs in the slot, as a first request pays it (review 2026-12-06 #2). Only a
    recorded precompute step lets a request read them, and then its bill stands beside the live figure."""
    from eval.compress.extractive import ExtractiveCompressor
    from tests.fakes import CountingEmbedder, count_words

    config, components = setup
    grid = config.grid.model_copy(
        update={"compressions": [*config.grid.compressions, CompressionSpec(compressor="extractive", target_ratio=2)]}
    )

    def sweep(probes: int, store: str, halving: HalvingCompressor | None = None) -> tuple[int, DuckDBStore]:
        embedder = CountingEmbedder()
        comps = components(halving=halving or HalvingCompressor(delay_s=0.002))
        comps.compressors["extractive"] = ExtractiveCompressor(count_words, embedder)
        path = config.store_path.with_name(store)
        run_sweep(config.model_copy(update={"grid": grid, "probe_questions": probes, "probe_repeats": 1,
                                            "store_path": path}), comps)  # fmt: skip
        return embedder.documents_embedded, DuckDBStore(path)

    answers_only, _ = sweep(0, "answers.duckdb")
    with_latency, store = sweep(2, "latency.duckdb")
    assert with_latency > answers_only  # the slots embedded their sentences again: computed from nothing
    slots = store.query("SELECT * FROM latency_slots WHERE twin = 0")
    halving = [r for r in slots if r["setting_name"].startswith("halving")]
    assert len(halving) == 2 * 2
    for r in halving:  # computed live: the delay of every passage is in the slot, nothing is offline
        assert r["compress_s"] >= 0.002 and r["offline_s"] is None and r["precomputed"] is None
        assert r["e2e_live_s"] == pytest.approx(
            r["retrieve_s"] + r["rerank_s"] + r["compress_s"] + r["ttft_s"], abs=2e-3
        )
    # The precompute step over the whole snapshot, recorded in the index: now the requests read its work.
    halving = HalvingCompressor(delay_s=0.002)
    record = precompress(config.index_path, index_identity(config), "halving", halving, 2.0)
    assert record.chunks == record.computed > 0 and record.seconds_per_chunk >= 0.002
    assert [r.identity for r in records(config.index_path)] == [halving.identity]
    _, read = sweep(2, "precomputed.duckdb", halving)
    slots = read.query("SELECT * FROM latency_slots WHERE twin = 0 AND setting_name LIKE 'halving%'")
    assert len(slots) == 4
    for r in slots:  # read from the precompute: the live bill is the lookup, the offline bill beside it
        assert r["precomputed"] is True and r["offline_s"] > 0 and r["compress_s"] < r["offline_s"]
    (run,) = read.query("SELECT precomputes_json FROM runs")
    assert json.loads(run["precomputes_json"])[0]["chunks"] == record.chunks  # the bill, with the run
    # Another compressor identity (new weights, new code) is not covered by that record: timed live again.
    other = HalvingCompressor(delay_s=0.002)
    other.identity = "halving-retrained"
    _, live = sweep(2, "other.duckdb", other)
    assert {r["precomputed"] for r in live.query("SELECT precomputed FROM latency_slots")} == {None}


def test_a_reused_setting_is_timed_again_tonight(setup: SweepSetup) -> None:
    config, components = setup
    config = config.model_copy(update={"probe_questions": 2, "probe_repeats": 1})
    first = run_sweep(config, components())
    second = run_sweep(config, components())
    assert second.settings_reused == len(config.grid.expand()) and second.settings_computed == 0
    store = DuckDBStore(config.store_path)
    for run in (first.run_id, second.run_id):
        (n,) = store.query("SELECT count(DISTINCT setting_hash) AS n FROM latency_slots WHERE run_id = ?", [run])
        assert n["n"] == len(config.grid.expand())
    rows = store.query(
        "SELECT s.reused_from_run, s.latency_session, r.latency_session AS tonight FROM samples s "
        "JOIN runs r USING (run_id) WHERE s.run_id = ? AND s.latency_n IS NOT NULL",
        [second.run_id],
    )
    assert rows and all(r["reused_from_run"] == first.run_id for r in rows)
    assert {r["latency_session"] for r in rows} == {rows[0]["tonight"]}  # tonight's session, not the first run's


def test_the_phase_resumes_after_the_last_stored_block(setup: SweepSetup) -> None:
    config, components = setup
    config = config.model_copy(update={"probe_questions": 3, "probe_repeats": 1})
    result = run_sweep(config, components())
    store = DuckDBStore(config.store_path)
    settings = config.grid.expand()
    hashes = [config.setting_hash(s) for s in settings]
    runner = SettingRunner(config, components(), result.run_id, load_questions(config), 4)
    runner.warm()
    probes = probe_questions(load_questions(config), 3)
    store.query("DELETE FROM latency_slots WHERE question_id = ?", [probes[-1].id])  # as if killed in its block
    phase = LatencyPhase(LiveRequest(runner.comps, runner.layout, runner.prefix, 4), settings, hashes,
                         result.run_id, 1, 0)  # fmt: skip
    measured, floor = measure_run(store, phase, probes)
    assert measured == 1  # only the missing block
    assert store.measured_questions(result.run_id, hashes, 1) == {q.id for q in probes}
    assert floor is not None and floor.n == 3  # one A/A value per probe question, its baselines averaged first


def _rows(values: dict[str, float]) -> dict[str, dict[str, Any]]:
    return {q: {"status": "ok", "answerable": True, "e2e_cold_s": v} for q, v in values.items()}


def test_the_gate_gives_no_latency_verdict_when_the_noise_floor_misses_one() -> None:
    ids = [f"q{i}" for i in range(30)]
    base, cand = _rows(dict.fromkeys(ids, 2.0)), _rows(dict.fromkeys(ids, 1.0))
    policy = GatePolicy(metrics=[MetricRule(name="answer_contains", margin=0.1, advisory=True)])
    labels = Labels(baseline="a", candidate="b", baseline_run="r", candidate_run="r")
    speedups = dict.fromkeys(ids, 2.0)
    steady = decide(base, cand, policy, labels, speedups, aa=(1.01, 0.98, 1.04, 30))
    assert steady.decision == "pass" and steady.latency is not None and steady.latency.aa_ratio == 1.01
    shaky = decide(base, cand, policy, labels, speedups, aa=(1.2, 1.1, 1.3, 30))
    assert shaky.decision == "undecided" and shaky.latency is not None and shaky.latency.verdict == "undecided"
    assert "A/A twins read 1.200x" in shaky.reasons[0]


def test_the_gate_refuses_latency_pairs_from_two_runs(setup: SweepSetup, tmp_path: Path) -> None:
    config, components = setup
    config = config.model_copy(update={"probe_questions": 4, "probe_repeats": 1})
    first = run_sweep(config, components())
    second = run_sweep(config, components())
    policy = GatePolicy(metrics=[], min_questions=2, latency=LatencyRule(min_probes=2))
    names = sorted({r["setting_name"] for r in first.leaderboard if r["top_k"] == 3})
    base, cand = [n for n in names if n.startswith("none")][0], [n for n in names if n.startswith("halving")][0]
    within = run_gate(GateRequest(store_path=config.store_path, baseline=base, candidate=cand, run=second.run_id),
                      policy)  # fmt: skip
    assert within.latency is not None and within.latency.n == 4
    across = GateRequest(
        store_path=config.store_path, baseline=base, candidate=cand, baseline_run=first.run_id,
        candidate_run=second.run_id,
    )  # fmt: skip
    decision = run_gate(across, policy)
    assert decision.decision == "undecided" and decision.latency is None
    assert any("timed in different runs" in n for n in decision.notes)


def test_the_break_even_view_reads_the_slots_own_times_not_stored_bills(setup: SweepSetup) -> None:
    """A stored answers-phase bill (here an absurd 100 s a context) no longer enters the model: R and k come
    from what each request did in its slot, and the measured speed-up pairs the slots' medians per question
    (review 2026-12-06 #8)."""
    config, components = setup
    config = config.model_copy(update={"probe_questions": 4, "probe_repeats": 1})
    result = run_sweep(config, components(halving=HalvingCompressor(delay_s=0.002)))
    store = DuckDBStore(config.store_path)
    store.query("UPDATE samples SET compress_cold_seconds = 100.0 WHERE compressor = 'halving'")
    rows = store.query("SELECT * FROM v_break_even WHERE run_id = ?", [result.run_id])
    assert rows, "no break-even row"
    slots = store.query(
        "SELECT setting_hash, sum(compress_s) AS c, sum(retrieve_s + rerank_s) AS rr FROM latency_slots "
        "WHERE twin = 0 AND status = 'ok' GROUP BY setting_hash"
    )
    by_hash = {r["setting_hash"]: r for r in slots}
    for r in rows:
        assert r["retrieve_rerank_s"] >= 0  # a stored 100 s bill subtracted from a live median read negative
        assert r["cold_s_per_token"] < 1e-2  # seconds a token from the slots (ms), not 100 s a context
        assert r["measured_speedup"] is not None and r["measured_speedup"] > 0
        assert by_hash[r["setting_hash"]]["c"] > 0
