"""The sequential recommendation on fakes: every candidate against the shipped setting batch by batch, Holm
over anytime-valid p-values at every look, candidates leaving the grid once decided, latency probes only
where a decision still needs them, and one recommendation stored under the project's run."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.gate.policy import GatePolicy, LatencyRule
from eval.run.sequential_grid import SequentialGridRequest, _Candidate, _Grid, cover_grid, run_sequential_grid
from eval.settings import Setting
from eval.store import DuckDBStore
from tests.conftest import write_jsonl
from tests.eval.test_sequential_gate import POLICY as GATE_POLICY
from tests.eval.test_sequential_gate import pool
from tests.fakes import ExtractingGenerator
from tests.helpers import SweepSetup

POLICY = GATE_POLICY + "sequential: {batch: 20, budget: 100}\n"  # the single gate's policy, batch by batch
SHIPPED = "none-k3-hybrid-dense"


def _request(setup: SweepSetup, tmp_path: Path, policy: str = POLICY) -> SequentialGridRequest:
    config, _ = setup
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    sweep = config.model_copy(
        update={"questions_path": write_jsonl(tmp_path / "pool.jsonl", pool()), "store_path": tmp_path / "g.duckdb"}
    )
    return SequentialGridRequest(sweep=sweep, shipped=SHIPPED, policy_path=path, run_id="project-run")


def test_every_candidate_is_gated_against_the_shipped_setting_and_leaves_the_grid_once_decided(
    setup: SweepSetup, tmp_path: Path
) -> None:
    _, components = setup
    req = _request(setup, tmp_path)
    out = run_sequential_grid(req, components(ExtractingGenerator()))
    rec = out.recommendation
    assert rec.procedure == "holm-anytime" and rec.shipped == SHIPPED
    names = {"none-k1-hybrid-dense", "halving-2x-k1-hybrid-dense", "halving-2x-k3-hybrid-dense"}
    assert {f.name for f in rec.family} == names
    # Halving mangles the passage the fake answers from: both halving candidates fail, early.
    assert out.outcomes["halving-2x-k1-hybrid-dense"].decision == "fail"
    assert rec.line().startswith("recommendation: ") and "anytime-valid Holm across 3 candidates" in rec.line()
    store = DuckDBStore(req.sweep.store_path)
    stored = store.recommendation("project-run")
    assert stored is not None and stored["procedure"] == "holm-anytime" and stored["n_questions"] == out.n_questions
    assert len(store.family_verdicts("project-run")) == 3
    # A candidate decided before the end is swept in no later batch: its rows stop at its last look.
    for name, o in out.outcomes.items():
        later = out.runs[len(o.runs) :]
        held = {r["setting_name"] for run in later for r in store.leaderboard(run)}
        assert name not in held, (name, later)
    assert any(len(o.runs) < len(out.runs) for o in out.outcomes.values()) or len(out.runs) == 1

    # Run again: every look's batch run is read back, nothing swept again, the same recommendation.
    again = run_sequential_grid(req, components(ExtractingGenerator()))
    assert again.runs == out.runs and again.recommendation.verdict == rec.verdict


def _grid(p_values: dict[str, float], own: dict[str, str], tmp_path: Path) -> _Grid:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY)
    cands = []
    for name, p in p_values.items():
        c = _Candidate(Setting(top_k=int(name[1:]), compressor="none"), name)
        c.p_value, c.own = p, own[name]
        cands.append(c)
    return _Grid(None, GatePolicy.load(policy), None, None, [], "g", None, None, cands)  # type: ignore[arg-type]


def test_a_candidate_that_passes_alone_is_held_until_holm_passes_it(tmp_path: Path) -> None:
    """Three candidates each passing its own test at a = 0.05: gated one by one all three would ship; Holm
    passes the smallest p-value only at a / 3 or below, so at 0.04 none passes yet (they continue); at 0.01 the
    first passes and the next needs a / 2 (step-down); once it is 0.02, all three pass."""
    grid = _grid({"k1": 0.04, "k2": 0.045, "k3": 0.049}, {"k1": "pass", "k2": "pass", "k3": "pass"}, tmp_path)
    grid._adjust(final=False)
    assert [c.state for c in grid.candidates] == ["continue"] * 3
    grid.candidates[0].p_value = 0.01
    grid._adjust(final=False)
    assert [c.state for c in grid.candidates] == ["pass", "continue", "continue"]  # 0.045 > a / 2
    grid.candidates[1].p_value = 0.02
    grid._adjust(final=False)
    assert [c.state for c in grid.candidates] == ["pass", "pass", "pass"]  # 0.02 <= a / 2, 0.049 <= a
    held = _grid({"k1": 0.04, "k2": 0.3, "k3": 0.049}, {"k1": "pass", "k2": "continue", "k3": "pass"}, tmp_path)
    held._adjust(final=True)
    assert [c.state for c in held.candidates] == ["undecided"] * 3  # held by Holm at the budget: never a pass


def test_a_candidate_passed_at_a_look_stays_passed_whatever_later_looks_do(tmp_path: Path) -> None:
    """k1 passes at a look where k2's p-value made Holm's second step a / 1; later k2's latency is refused (its
    p-value reads 1) and it stops undecided. Holm over the final p-values would hold k1 (0.04 > a / 2), but
    k1 was passed on p-values each at least 1 / sup K of its test: it stays passed, with the adjusted p-value
    it passed at."""
    grid = _grid({"k1": 0.04, "k2": 0.001}, {"k1": "pass", "k2": "continue"}, tmp_path)
    grid._adjust(final=False)
    assert [c.state for c in grid.candidates] == ["pass", "continue"]
    first, second = grid.candidates
    second.p_value, second.own = 1.0, "undecided"
    grid._adjust(final=True)
    one, two = grid._family()
    assert one.adjusted_verdict == "pass" and one.adjusted_p == pytest.approx(0.04)
    assert two.adjusted_verdict == "undecided"


def test_a_failed_candidate_keeps_its_p_value_in_the_family(tmp_path: Path) -> None:
    """k counts every candidate gated, failed ones included: one that failed still makes the step a / 2."""
    grid = _grid({"k1": 0.9, "k2": 0.04}, {"k1": "fail", "k2": "pass"}, tmp_path)
    grid._adjust(final=False)
    assert [c.state for c in grid.candidates] == ["fail", "continue"]  # 0.04 > a / 2 = 0.025
    grid.candidates[1].p_value = 0.02
    grid._adjust(final=False)
    assert [c.state for c in grid.candidates] == ["fail", "pass"]


def test_latency_is_timed_only_while_the_decision_needs_it(tmp_path: Path) -> None:
    """A candidate whose latency test failed, or passed with a p-value that clears Holm's strictest step a / k,
    is timed in no later batch; one that clears a alone but not a / k is timed again, and so is one whose
    p-value is small but whose test has not passed (too few probes for `min_probes`: stopping there would
    freeze a test that can never pass)."""
    from eval.gate.sequential import SequentialLook

    def look(verdict: str) -> dict[str, list[SequentialLook]]:
        return {"e2e_live_s": [SequentialLook(metric="e2e_live_s", n=5, estimate=2.0, lower=1.5, upper=3.0,
                                              threshold=0.95, verdict=verdict)]}  # fmt: skip

    grid = _grid({"k1": 1.0, "k2": 1.0}, {"k1": "continue", "k2": "continue"}, tmp_path)
    policy = grid.policy.model_copy(update={"latency": _latency_rule()})
    grid = _Grid(None, policy, None, None, [], "g", None, None, grid.candidates)  # type: ignore[arg-type]
    first, second = grid.candidates
    assert grid._needs_timing(first)  # never timed
    first.timed, first.latency_p, first.looks = ["r1"], 0.03, look("pass")  # below a = 0.05, above a / 2
    assert grid._needs_timing(first)
    first.latency_p = 0.02
    assert not grid._needs_timing(first)
    first.looks = look("continue")  # the same p-value before min_probes: the test must go on
    assert grid._needs_timing(first)
    first.looks, first.blocked = look("pass"), ["other processes used 40 % of the cores"]
    assert grid._needs_timing(first)  # a blocked measurement decided nothing
    second.timed, second.looks = ["r1"], look("fail")
    assert not grid._needs_timing(second)


def test_the_sweep_times_only_the_settings_the_grid_asks_for(
    setup: SweepSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_sweep(timed=...)` reaches the latency phase: a candidate the grid no longer needs timed has no
    latency slot in any batch run, while the shipped setting and the others have theirs."""
    skip = "halving-2x-k1-hybrid-dense"
    monkeypatch.setattr(_Grid, "_needs_timing", lambda self, c: c.setting.name != skip)
    _, components = setup
    latency = "latency: {metric: e2e_cold_s, min_speedup: 0.5, min_probes: 4}"
    req = _request(setup, tmp_path, POLICY.replace("latency: null", latency))
    out = run_sequential_grid(req, components(ExtractingGenerator()))
    store = DuckDBStore(req.sweep.store_path)
    hashes = {s.name: req.sweep.setting_hash(s) for s in req.sweep.grid.expand()}
    for run in out.runs:
        timed = {
            r["setting_hash"]
            for r in store.query("SELECT DISTINCT setting_hash FROM latency_slots WHERE run_id = ?", [run])
        }
        swept = {r["setting_name"] for r in store.leaderboard(run)}
        assert hashes[SHIPPED] in timed and hashes[skip] not in timed
        assert {hashes[n] for n in swept if n != skip} <= timed  # every other swept setting was timed


def _latency_rule() -> LatencyRule:
    return LatencyRule(metric="e2e_live_s", min_speedup=1.0)


def test_cover_grid_holds_exactly_the_open_settings() -> None:
    from eval.settings import CompressionSpec, GridConfig

    full = GridConfig(
        compressions=[CompressionSpec(), CompressionSpec(compressor="halving", target_ratio=2.0)], top_ks=[1, 3, 8]
    ).expand()
    wanted = [s for s in full if (s.compressor, s.top_k) in {("none", 8), ("none", 1), ("halving", 3)}]
    assert {s.name for s in cover_grid(wanted).expand()} == {s.name for s in wanted}


def test_a_busy_machine_stops_the_grid_undecided_never_passing_on_latency(
    setup: SweepSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another job held the cores through every slot: the load check refuses each candidate's latency verdict,
    so none passes (a quality FAIL still stands), each stops undecided or failed with the reason named."""
    monkeypatch.setattr("eval.run.load.LoadMeter.foreign", lambda self, mark: 1e9)
    _, components = setup
    latency = "latency: {metric: e2e_cold_s, min_speedup: 0.5, min_probes: 4}"
    req = _request(setup, tmp_path, POLICY.replace("latency: null", latency))
    out = run_sequential_grid(req, components(ExtractingGenerator()))
    assert out.recommendation.verdict != "ship"
    for o in out.outcomes.values():
        assert o.decision in ("undecided", "fail")
        assert any("other processes used" in r for r in o.reasons), o.reasons
    assert {f.p_value for f in out.recommendation.family} == {1.0}  # a refused latency verdict is no evidence


def test_a_faithfulness_metric_whose_method_misses_its_validity_bar_refuses_the_grid_before_any_batch(
    setup: SweepSetup, tmp_path: Path
) -> None:
    from corpus.errors import CribsheetError

    _, components = setup
    policy = POLICY.replace(
        "  - {name: answer_contains, margin: 0.02}\n",
        "  - {name: answer_contains, margin: 0.02}\n  - {name: faithfulness, margin: 0.05, min_validity: 0.99}\n",
    )
    req = _request(setup, tmp_path, policy)
    req = req.model_copy(update={"sweep": req.sweep.model_copy(update={"corpus_kind": "documentation"})})
    refusal = (
        r"faithfulness cannot decide: rule checker \(with embedder hash; its figures are for minilm-l6-v2\) has no "
        r"measured validity on documentation answers, under the policy's min_validity 0.99"
    )
    with pytest.raises(CribsheetError, match=refusal):
        run_sequential_grid(req, components(ExtractingGenerator()))
    assert not (tmp_path / "g.duckdb").exists()  # refused before the first batch wrote anything
