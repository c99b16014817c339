"""The sequential gate's latency: the slots' paired ratios (not the rows' summaries) and the fixed-n gate's load
check, over every batch run (review 2026-12-06 #7, #19)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.gate.policy import SequentialPlan
from eval.run.sequential_gate import _speedups, run_sequential_gate
from eval.store import DuckDBStore
from tests.eval.test_sequential_gate import POLICY, request
from tests.fakes import ExtractingGenerator
from tests.helpers import SweepSetup

LATENCY = "latency: {metric: e2e_cold_s, min_speedup: 0.5, min_probes: 4}"


def _gate(setup: SweepSetup, tmp_path: Path, name: str) -> tuple[object, DuckDBStore]:
    _, components = setup
    req = request(setup, tmp_path, tmp_path / f"{name}.duckdb")
    req.policy_path.write_text(POLICY.replace("latency: null", LATENCY))
    req = req.model_copy(update={"plan": SequentialPlan(batch=10, budget=20)})
    outcome = run_sequential_gate(req, components(ExtractingGenerator()))
    return (outcome, req), DuckDBStore(req.sweep.store_path)


def test_the_sequential_gate_reads_the_slots_not_the_rows_summaries(setup: SweepSetup, tmp_path: Path) -> None:
    """The rows' e2e_cold_s are the slots' medians, so a test that compares them cannot tell which was read:
    here the candidate's slots are made twice as slow after the sweep, and only a reader of the slots sees it."""
    (outcome, req), store = _gate(setup, tmp_path, "r")
    config = req.sweep
    hashes = {s.name: config.setting_hash(s) for s in config.grid.expand()}
    bh, ch = hashes[req.baseline], hashes[req.candidate]
    before = _speedups(store, outcome.runs, bh, ch)
    store.query("UPDATE latency_slots SET e2e_live_s = e2e_live_s * 2 WHERE setting_hash = ?", [ch])
    after = _speedups(store, outcome.runs, bh, ch)
    assert before and set(after) == set(before)
    assert all(after[q] == pytest.approx(before[q] / 2) for q in before)


def test_a_busy_machine_leaves_the_sequential_gates_latency_undecided(
    setup: SweepSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixed-n gate's load check, read by the sequential gate over every batch run: another job held the
    cores through every slot, so no latency decision, and the reason names the load."""
    monkeypatch.setattr("eval.run.load.LoadMeter.foreign", lambda self, mark: 1e9)
    (outcome, _), _ = _gate(setup, tmp_path, "busy")
    assert outcome.decision in ("undecided", "fail")  # a quality FAIL would stand; latency cannot pass
    assert any("other processes used" in r for r in outcome.reasons), outcome.reasons
    if outcome.decision == "fail":
        assert not any(r.startswith("e2e_cold_s: fail") for r in outcome.reasons)
