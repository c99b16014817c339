"""The load check both gates read: foreign CPU time per slot, the split-half drift of a pair's speed-up, failed
slots counted; the A/A twins cannot see any of these (review 2026-12-06 #3, #6, #7)."""

from __future__ import annotations

import datetime as dt
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import scipy.stats

from corpus.errors import CribsheetError
from eval.engine.generator import Probe
from eval.gate.decision import Labels, decide
from eval.gate.load_check import LoadCheck, latency_column, latency_reasons, load_check
from eval.gate.policy import GatePolicy, GateRequest, LatencyRule
from eval.gate.run import run_gate
from eval.gate.statistics import aa_misses
from eval.run.load import LoadMeter
from eval.run.sweep import run_sweep
from eval.store import DuckDBStore
from eval.store.load_figures import geometric_t_interval, split_half_drift
from eval.store.rows import LatencySlotRow
from tests.fakes import ExtractingGenerator
from tests.helpers import SweepSetup


class NeighbourGenerator(ExtractingGenerator):
    """A fake engine that a neighbour slows by a fixed 50 s a request after its first `switch_after` probes:
    a job that arrives half-way adds time to every request, which a short prompt feels more than a long one,
    so the speed-up moves (a proportional slow-down would move no ratio)."""

    def __init__(self, switch_after: int) -> None:
        super().__init__()
        self.switch_after = switch_after

    def probe(self, prompt: str, json_schema: dict[str, Any] | None = None) -> Probe:
        p = super().probe(prompt, json_schema)
        extra = 50.0 if len(self.probes) > self.switch_after else 0.0
        # 100 ms a word: the live retrieval's real milliseconds, under any load, are noise beside it.
        return p.model_copy(update={"ttft_s": 0.1 * p.prompt_tokens + extra})


def _pair(setup: SweepSetup, engine: ExtractingGenerator, store: str) -> tuple[Any, Any]:
    config, components = setup
    config = config.model_copy(
        update={"probe_questions": 4, "probe_repeats": 2, "store_path": config.store_path.with_name(store)}
    )
    result = run_sweep(config, components(engine))
    rows = {r["setting_name"]: r for r in result.leaderboard}
    base = next(n for n, r in rows.items() if r["compressor"] == "none" and r["top_k"] == 3)
    cand = next(n for n, r in rows.items() if r["compressor"] == "halving" and r["top_k"] == 3)
    policy = GatePolicy(metrics=[], min_questions=2, latency=LatencyRule(min_probes=4, min_speedup=0.5))
    request = GateRequest(store_path=config.store_path, baseline=base, candidate=cand, run=result.run_id)
    return result, run_gate(request, policy)


def test_a_neighbour_arriving_half_way_fires_the_drift_check_and_the_gate_gives_no_latency_verdict(
    setup: SweepSetup,
) -> None:
    """Before this check the gate passed such a run on a speed-up that was half one regime, half another."""
    counting = ExtractingGenerator()
    _pair(setup, counting, "dry.duckdb")  # counts the probes the phase makes: the neighbour comes half-way
    result, decision = _pair(setup, NeighbourGenerator(switch_after=len(counting.probes) // 2), "noisy.duckdb")
    assert decision.latency is not None and decision.latency.verdict == "undecided"
    assert decision.latency.drift is not None and decision.latency.drift > 1.1
    assert any("first half of the latency phase to the second" in r for r in decision.reasons), decision.reasons
    assert decision.decision == "undecided"
    # The run row carries the worst drift of the grid, with its setting.
    run = DuckDBStore(result.store_path).query("SELECT latency_drift, latency_drift_setting FROM runs")[0]
    assert run["latency_drift"] > 1.1 and run["latency_drift_setting"].startswith("halving")


def test_a_steady_engine_leaves_the_drift_check_silent(setup: SweepSetup) -> None:
    result, decision = _pair(setup, NeighbourGenerator(switch_after=10**9), "quiet.duckdb")
    assert decision.latency is not None and decision.latency.verdict == "pass", decision.reasons
    assert decision.latency.drift == pytest.approx(1.0, abs=0.05)
    # The gate's A/A and the run row's are Student t intervals over the stored twins (one rule, G155).
    store = DuckDBStore(result.store_path)
    run = result.run_id
    twins = {r["setting_name"]: r["setting_hash"] for r in store.query(
        "SELECT DISTINCT setting_name, setting_hash FROM latency_slots WHERE twin = 1")}  # fmt: skip
    base = twins[decision.baseline]
    gate_twins = list(store.slot_pairs(run, base, 0, run, base, 1).values())
    _, low, high = geometric_t_interval(gate_twins, 0.95)
    assert (decision.latency.aa_ci_low, decision.latency.aa_ci_high) == pytest.approx((low, high))
    per_question: dict[str, list[float]] = {}
    for h in twins.values():
        for q, r in store.slot_pairs(run, h, 0, run, h, 1).items():
            per_question.setdefault(q, []).append(math.log(r))
    _, low, high = geometric_t_interval([math.exp(sum(v) / len(v)) for v in per_question.values()], 0.95)
    row = store.query("SELECT aa_ci_low, aa_ci_high FROM runs")[0]
    assert (row["aa_ci_low"], row["aa_ci_high"]) == pytest.approx((low, high))


def test_foreign_load_over_the_policys_limit_gives_no_latency_verdict(
    setup: SweepSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each slot reads as if another job held one of the machine's cores the whole time."""
    monkeypatch.setattr("eval.run.load.LoadMeter.foreign", lambda self, mark: 1e9)
    _, decision = _pair(setup, NeighbourGenerator(switch_after=10**9), "busy.duckdb")
    assert decision.latency is not None and decision.latency.verdict == "undecided"
    assert any("other processes used" in r for r in decision.reasons), decision.reasons


def test_split_half_drift_pairs_each_question_with_itself() -> None:
    # Question q1 is slow to compress, q2 fast: different ratios, but each the same in both halves.
    steady = [("r", "q1", 0, 4.0), ("r", "q2", 0, 1.0), ("r", "q1", 1, 4.0), ("r", "q2", 1, 1.0)]
    drift = split_half_drift(steady)
    assert drift is not None and drift.ratio == pytest.approx(1.0) and drift.n == 2 and not drift.fires(0.1)
    moved = [("r", "q1", 0, 4.0), ("r", "q2", 0, 2.0), ("r", "q1", 1, 2.0), ("r", "q2", 1, 1.0)]
    drift = split_half_drift(moved)
    assert drift is not None and drift.ratio == pytest.approx(2.0)
    assert not drift.fires(0.1)  # two questions: shown, never fired (an interval over two proves nothing)
    three = [*moved[:2], ("r", "q3", 0, 2.0), *moved[2:], ("r", "q3", 1, 1.0)]
    drift = split_half_drift(three)
    assert drift is not None and drift.n == 3 and drift.fires(0.1)
    assert split_half_drift([("r", "q1", 0, 2.0)]) is None  # one block: nothing to compare


def test_the_drift_check_needs_its_interval_clear_of_one_not_only_a_point_past_the_tolerance() -> None:
    """Sampling noise moves the point estimate; a change of regime moves every question (review 2026-12-06
    #1: a point-only rule fired by chance on noisy machines)."""
    blocks = []
    for r in range(2):
        for q in range(30):  # the questions move apart both ways: the mean moves 13 %, its interval spans 1
            moved = (2.0 if q % 2 else 0.64) if r == 1 else 1.0
            blocks.append(("r", f"q{q}", r, 2.0 / moved))
    drift = split_half_drift(blocks)
    assert drift is not None and abs(drift.ratio - 1) > 0.1 and drift.low <= 1.0 <= drift.high, drift
    assert not drift.fires(0.1)
    together = [(s, q, r, x * (1.3 if r == 0 else 1.0)) for s, q, r, x in blocks if q not in ("q0",)]
    regime = split_half_drift([(s, q, r, 2.0 * (1.2 if r == 0 else 1.0)) for s, q, r, _ in together])
    assert regime is not None and regime.fires(0.1)  # every question moved 20 %: a change of regime


def test_over_four_probe_questions_the_checks_that_withhold_a_verdict_hold_their_level() -> None:
    """Four questions that moved unequally, all one way (log half-differences 0.07 to 0.33): a 99 % percentile
    bootstrap cannot pass the extreme values, reads [1.09, 1.35] and fired on such a quiet run (the fault row
    noisy_neighbour, 3 candidates in 16); Student's t spans 1. Every question moved 20 %: it still fires. An
    A/A over four twins that a bootstrap reads as missing 1 by more than 5 % is not a miss under t either."""
    uneven = [0.07, 0.15, 0.20, 0.33]
    blocks = [("r", f"q{i}", r, math.exp(d) if r == 0 else 1.0) for r in range(2) for i, d in enumerate(uneven)]
    drift = split_half_drift(blocks, 0.99)
    assert drift is not None and drift.n == 4 and drift.ratio > 1.1 and drift.low < 1.0 < drift.high, drift
    assert not drift.fires(0.1)
    moved = split_half_drift([("r", f"q{i}", r, 1.2 if r == 0 else 1.0) for r in range(2) for i in range(4)], 0.99)
    assert moved is not None and moved.fires(0.1)
    # The A/A over four twins: the percentile bootstrap read [0.82, 0.94], a miss; Student's t does not.
    twins = [0.80, 0.86, 0.90, 0.97]
    ratio, low, high = geometric_t_interval(twins, 0.95)
    assert low < 0.95 < high and not aa_misses((ratio, low, high), 0.05)
    logs = [math.log(x) for x in twins]  # pinned: n - 1 degrees of freedom, two-sided, the standard error
    mean, sem = sum(logs) / 4, statistics.stdev(logs) / 2
    expected = scipy.stats.t.interval(0.95, 3, loc=mean, scale=sem)
    assert (math.log(low), math.log(high)) == pytest.approx(expected, rel=1e-9)
    for bad in ([1.2], [1.2, 0.0], [1.2, math.nan], [1.2, math.inf]):
        with pytest.raises(CribsheetError, match="positive, finite ratios"):
            geometric_t_interval(bad, 0.95)


def test_each_session_is_split_on_its_own_clock() -> None:
    """On Ray every worker is a session: a worker whose clock runs ahead must not land wholly in one half."""
    blocks = [("r/w0", "q1", 0, 2.0), ("r/w0", "q1", 1, 1.0), ("r/w1", "q2", 0, 2.0), ("r/w1", "q2", 1, 1.0)]
    drift = split_half_drift(blocks)
    assert drift is not None and drift.n == 2 and drift.ratio == pytest.approx(2.0)


def _slot(question: str, setting: str, repeat: int, status: str, e2e: float | None) -> LatencySlotRow:
    return LatencySlotRow(
        run_id="r", session_id="s", setting_hash=setting, setting_name=setting, question_id=question, repeat=repeat,
        position=0, twin=0, measured_at=dt.datetime.now(dt.UTC), status=status, e2e_live_s=e2e,
        error=None if status == "ok" else "RuntimeError: engine gone", slot_s=1.0, foreign_cpu_s=0.0, cores=2,
    )  # fmt: skip


def test_a_question_whose_every_slot_failed_is_counted_and_leaves_latency_undecided(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "r.duckdb")
    ids = [f"q{i}" for i in range(6)]
    rows = []
    for q in ids:
        for r in range(2):
            rows.append(_slot(q, "base", r, "ok", 2.0))
            lost = q == "q5"  # the candidate's longest context fails in every repeat
            rows.append(_slot(q, "cand", r, "failed" if lost else "ok", None if lost else 1.0))
    store.add_slots(rows)
    check = load_check(store, ["r"], "base", "cand", "e2e_live_s")
    assert check.failed_slots == 2 and check.lost_questions == ["q5"]
    base = {q: {"status": "ok", "e2e_cold_s": 2.0} for q in ids}
    cand = {q: {"status": "ok", "e2e_cold_s": 1.0} for q in ids}
    speedups = store.slot_pairs("r", "base", 0, "r", "cand", 0)
    assert sorted(speedups) == ids[:5]  # the lost question has no pair: it must not vanish silently
    policy = GatePolicy(metrics=[], min_questions=2, latency=LatencyRule(min_probes=5))
    decision = decide(base, cand, policy, Labels(baseline="b", candidate="c", baseline_run="r", candidate_run="r"),
                      speedups, None, check)  # fmt: skip
    assert decision.decision == "undecided" and decision.latency is not None
    assert decision.latency.failed_slots == 2
    assert any("failed in every timed slot" in r and "q5" in r for r in decision.reasons), decision.reasons


def test_a_latency_metric_without_a_slot_column_is_refused_when_the_policy_is_loaded(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("latency: {metric: ttft_s}\n")  # the batch's TTFT: queueing included, no slot column
    with pytest.raises(CribsheetError, match="no column in the latency phase's slots"):
        GatePolicy.load(policy)
    assert latency_column("e2e_cold_s") == "e2e_live_s" and latency_column("probe_ttft_s") == "ttft_s"


def test_load_check_reasons_stay_silent_on_a_quiet_steady_phase() -> None:
    rule = LatencyRule()
    quiet = LoadCheck(foreign_load=0.02, foreign_load_p90=0.05, cores=2, drift=1.03, drift_low=0.99,
                      drift_high=1.07, drift_n=30, paired=30)  # fmt: skip
    assert latency_reasons(quiet, rule) == ([], [])
    busy = quiet.model_copy(update={"foreign_load": 0.5})
    assert len(latency_reasons(busy, rule)[0]) == 1
    burst = quiet.model_copy(update={"foreign_load_p90": 0.5})  # a tenth of the phase under load
    assert len(latency_reasons(burst, rule)[0]) == 1
    single = quiet.model_copy(update={"drift": None, "drift_low": None, "drift_high": None, "drift_n": 0})
    assert "probe_repeats 2 or more" in latency_reasons(single, rule)[0][0]


@pytest.mark.real_load
def test_the_meter_subtracts_its_own_tree_from_the_busy_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subtraction itself, on counters set by hand: busy 3 s, own tree 2.5 s (a child among them)."""
    meter = LoadMeter(cgroup=None, cores=2)
    busy = iter([10.0, 13.0])
    own = iter([{1: 1.0, 2: 0.0}, {1: 1.5, 2: 2.0}])
    monkeypatch.setattr(LoadMeter, "_busy", lambda self: next(busy))
    monkeypatch.setattr(LoadMeter, "_own", lambda self: next(own))
    mark = meter.start()
    assert meter.foreign(mark) == pytest.approx(0.5)


@pytest.mark.real_load
def test_the_meter_counts_a_process_outside_its_tree_and_not_its_own_children() -> None:
    """A busy process that is not ours (orphaned by its shell) is foreign: the meter counts at least its CPU
    time over the span; a busy child of ours is in the meter's own tree (subtracted from the machine's)."""
    import psutil

    def cpu(pid: int) -> float:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)

    meter = LoadMeter()
    busy = "import time\nt = time.time()\nwhile time.time() - t < 4: pass\n"
    started = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c '{busy}' >/dev/null 2>&1 & echo $!"], capture_output=True, text=True
    )
    orphan = int(started.stdout)
    mark, before = meter.start(), cpu(orphan)
    time.sleep(2.0)
    used = cpu(orphan) - before
    foreign = meter.foreign(mark)
    assert used > 0.2 and foreign >= 0.9 * used, (used, foreign)
    assert orphan not in meter._own()
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        deadline = time.monotonic() + 10
        while meter._own().get(child.pid, 0.0) < 0.2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert meter._own().get(child.pid, 0.0) >= 0.2  # our child's CPU is counted as ours
    finally:
        child.kill()
        child.wait()


def test_an_offline_budget_fails_a_candidate_whose_requests_read_more_precomputed_work() -> None:
    ids = [f"q{i}" for i in range(6)]
    rows = {q: {"status": "ok", "e2e_cold_s": 1.0} for q in ids}
    speedups = dict.fromkeys(ids, 2.0)
    labels = Labels(baseline="b", candidate="c", baseline_run="r", candidate_run="r")
    check = LoadCheck(foreign_load=0.0, cores=2, drift=1.0, drift_n=6, offline_s=0.8)
    free = GatePolicy(metrics=[], min_questions=2, latency=LatencyRule(min_probes=5))
    assert decide(rows, rows, free, labels, speedups, None, check).decision == "pass"
    budget = GatePolicy(metrics=[], min_questions=2, latency=LatencyRule(min_probes=5, max_offline_s=0.5))
    d = decide(rows, rows, budget, labels, speedups, None, check)
    assert d.decision == "fail" and any("offline budget of 0.5 s" in r for r in d.reasons), d.reasons
