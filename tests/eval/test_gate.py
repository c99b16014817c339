"""The release gate on planted cases: identical passes, corrupted fails naming the metric, faster passes,
mismatched question sets cannot be decided."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from corpus.errors import CribsheetError
from eval.gate import (
    DECISION_COLUMNS,
    FAIL,
    PASS,
    UNDECIDED,
    GateDecision,
    GatePolicy,
    GateRequest,
    LatencyRule,
    MetricRule,
    decision_rows,
    markdown_report,
    run_gate,
)
from eval.store import DuckDBStore
from eval.store.rows import RunRow, SampleRow, SettingRow

ROOT = Path(__file__).resolve().parents[2]
N = 80


def fill(
    store: DuckDBStore,
    run_id: str,
    settings: dict[str, dict[str, list[float]]],
    questions: list[str] | None = None,
    questions_sha: str = "q",
    corpus_sha: str = "c",
    unanswerable: set[str] = frozenset(),  # type: ignore[assignment]
    hardware: str | None = None,
    packages: str = "{}",
    meta: dict[str, dict[str, object]] | None = None,
) -> None:
    """`meta`: per setting, its axes where not none/1.0/3/hybrid/dense/ranked (output, answer_cache too)."""
    qids = questions or [f"q{i}" for i in range(N)]
    meta = meta or {}

    def described(name: str) -> dict[str, object]:
        axes = {"top_k": 3, "compressor": "none", "target_ratio": 1.0}
        return axes | {"retrieval": "hybrid", "reranker": "dense", "layout": "ranked"} | meta.get(name, {})

    store.start_run(
        RunRow(
            run_id=run_id,
            started_at=dt.datetime.now(dt.UTC),
            status="ok",
            config_json="{}",
            config_hash="h",
            package_versions=packages,
            hardware_json=hardware,
            hardware_sha256=hardware and f"sha-{hardware}",
            questions_path="q.jsonl",
            questions_sha256=questions_sha,
            index_path="i",
            corpus_sha256=corpus_sha,
            n_questions=len(qids),
            n_settings=len(settings),
        ),
        [
            SettingRow(
                run_id=run_id,
                setting_hash=f"h-{name}",
                setting_name=name,
                setting_json="{}",
                **described(name),  # type: ignore[arg-type]
            )
            for name in settings
        ],
    )
    for name, cols in settings.items():
        rows = [
            SampleRow(
                run_id=run_id,
                setting_hash=f"h-{name}",
                setting_name=name,
                setting_json="{}",
                question_id=q,
                question="?",
                answerable=q not in unanswerable,
                gold_answers="[]",
                status="ok",
                **described(name),  # type: ignore[arg-type]
                **{k: float(v[i]) for k, v in cols.items()},
            )
            for i, q in enumerate(qids)
        ]
        store.add_samples(rows)


def baseline_values(seed: int = 1) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    return {
        "answer_contains": (rng.random(N) < 0.6).astype(float).tolist(),
        "context_answer_recall": (rng.random(N) < 0.8).astype(float).tolist(),
        "probe_ttft_s": (0.5 + 0.1 * rng.random(N)).tolist(),
    }


POLICY = GatePolicy(
    resamples=2000,
    min_questions=30,
    metrics=[
        MetricRule(name="answer_contains", margin=0.02),
        MetricRule(name="context_answer_recall", margin=0.05, advisory=True),
    ],
    latency=LatencyRule(metric="probe_ttft_s", min_speedup=1.0),
)


def gate(store: DuckDBStore, baseline: str, candidate: str, policy: GatePolicy, **request: object) -> GateDecision:
    """The gate over `store` with an inline policy (the request names the store's file, like the CLI)."""
    req = GateRequest(store_path=store.path, baseline=baseline, candidate=candidate, **request)  # type: ignore[arg-type]
    return run_gate(req, policy=policy, store=store)


@pytest.fixture
def store(tmp_path: Path) -> DuckDBStore:
    return DuckDBStore(tmp_path / "r.duckdb")


def test_identical_candidate_passes_and_decision_is_stored(store: DuckDBStore, tmp_path: Path) -> None:
    base = baseline_values()
    fill(store, "r1", {"base": base, "cand": dict(base)})
    d = gate(store, "base", "cand", POLICY, run="r1", report_path=tmp_path / "gate.md")
    assert (d.decision, d.exit_code) == ("pass", PASS)
    assert d.metrics[0].ci_low == d.metrics[0].ci_high == 0.0
    row = store.query("SELECT * FROM gate_decisions")[0]
    assert row["decision"] == "pass" and row["n_questions"] == N and row["baseline_hash"] == "h-base"
    assert json.loads(row["results_json"])["metrics"][0]["name"] == "answer_contains"
    assert "**Decision: PASS**" in (tmp_path / "gate.md").read_text()


def test_corrupted_answers_fail_naming_the_metric(store: DuckDBStore) -> None:
    base = baseline_values()
    corrupted = list(base["answer_contains"])
    right = [i for i, v in enumerate(corrupted) if v == 1.0]
    for i in right[: len(right) // 3]:  # a third of the correct answers become wrong
        corrupted[i] = 0.0
    fill(store, "r1", {"base": base, "cand": base | {"answer_contains": corrupted}})
    d = gate(store, "base", "cand", POLICY, run="r1")
    assert (d.decision, d.exit_code) == ("fail", FAIL)
    assert any(r.startswith("answer_contains: fail") for r in d.reasons)
    assert d.metrics[0].ci_high < -0.02


def test_faster_candidate_with_equal_quality_passes(store: DuckDBStore) -> None:
    base = baseline_values()
    fast = base | {"probe_ttft_s": [t / 3 for t in base["probe_ttft_s"]]}
    fill(store, "r1", {"base": base, "fast": fast})
    policy = POLICY.model_copy(update={"latency": LatencyRule(metric="probe_ttft_s", min_speedup=2.0)})
    d = gate(store, "base", "fast", policy, run="r1")
    assert d.exit_code == PASS and d.latency is not None and d.latency.ci_low > 2.0
    slow = gate(store, "fast", "base", policy, run="r1")
    assert slow.exit_code == FAIL and any(r.startswith("probe_ttft_s") for r in slow.reasons)


def test_mismatched_question_sets_cannot_be_decided(store: DuckDBStore) -> None:
    base = baseline_values()
    fill(store, "r1", {"base": base})
    fill(store, "r2", {"cand": base}, questions=[f"x{i}" for i in range(N)])
    d = gate(store, "base", "cand", POLICY, baseline_run="r1", candidate_run="r2")
    assert d.exit_code == UNDECIDED and "question sets differ" in d.reasons[0]
    fill(store, "r3", {"cand3": base}, questions_sha="other")
    d = gate(store, "base", "cand3", POLICY, baseline_run="r1", candidate_run="r3")
    assert d.exit_code == UNDECIDED and "questions_sha256" in d.reasons[0]


def test_too_few_questions_and_unknown_settings(store: DuckDBStore) -> None:
    base = baseline_values()
    fill(store, "r1", {"base": base, "cand": dict(base)})
    d = gate(store, "base", "cand", POLICY.model_copy(update={"min_questions": 500}), run="r1")
    assert d.exit_code == UNDECIDED and "needs at least 500" in d.reasons[0]
    with pytest.raises(CribsheetError, match="setting 'nope' not found in run r1; known: base, cand"):
        gate(store, "base", "nope", POLICY, run="r1")


def test_bundled_policy_file_loads_and_bad_ones_are_named(tmp_path: Path) -> None:
    policy = GatePolicy.load(ROOT / "policies" / "gate.yaml")
    assert [m.name for m in policy.metrics if not m.advisory] == ["answer_token_recall", "context_token_recall"]
    assert policy.seed == 0 and policy.latency is not None and policy.latency.min_probes == 30
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics:\n  - {name: answer_contains, margin: -1}\n")
    with pytest.raises(CribsheetError, match=r"bad\.yaml: invalid gate policy"):
        GatePolicy.load(bad)
    bad.write_text("metrics:\n  - {name: vibes, margin: 0.1}\n")
    with pytest.raises(CribsheetError, match=r"bad\.yaml: unknown metric\(s\) \['vibes'\]"):
        GatePolicy.load(bad)


def test_decision_is_reproducible(store: DuckDBStore) -> None:
    base = baseline_values()
    noisy = list(base["answer_contains"])
    for i in range(0, N, 9):
        noisy[i] = 1.0 - noisy[i]
    fill(store, "r1", {"base": base, "cand": base | {"answer_contains": noisy}})
    a = gate(store, "base", "cand", POLICY, run="r1")
    b = gate(store, "base", "cand", POLICY, run="r1")
    assert (a.metrics[0].ci_low, a.metrics[0].ci_high) == (b.metrics[0].ci_low, b.metrics[0].ci_high)
    report = markdown_report(a)
    rows = decision_rows(a)
    assert rows[0][0] == "answer_contains (answerable)" and rows[-1][0].endswith("speed-up")
    assert all("| " + " | ".join(row) + " |" in report for row in rows)  # the terminal table shows the same rows


def test_answer_metrics_compare_answerable_questions_only(store: DuckDBStore) -> None:
    """An unanswerable question has no right answer to contain: flipping those must not move the verdict."""
    base = baseline_values()
    unanswerable = {f"q{i}" for i in range(60, N)}
    cand = dict(base) | {"answer_contains": [v if i < 60 else 1 - v for i, v in enumerate(base["answer_contains"])]}
    fill(store, "r1", {"base": base, "cand": cand}, unanswerable=unanswerable)
    d = gate(store, "base", "cand", POLICY, run="r1")
    gated = d.metrics[0]
    assert (gated.population, gated.n, gated.diff, gated.verdict) == ("answerable", 60, 0.0, "pass")


def test_undecided_states_its_power_and_the_questions_that_would_decide(store: DuckDBStore) -> None:
    rng = np.random.default_rng(7)
    base = baseline_values()
    # A true drop of about one margin, with noise: too close to the boundary to decide on 80 questions.
    flips = rng.random(N) < 0.15
    cand_ans = [1 - v if f else v for v, f in zip(base["answer_contains"], flips, strict=True)]
    fill(store, "r1", {"base": base, "cand": dict(base) | {"answer_contains": cand_ans}})
    d = gate(store, "base", "cand", POLICY.model_copy(update={"latency": None}), run="r1")
    m = d.metrics[0]
    assert m.verdict == "undecided" and m.mdd is not None and m.mdd > 0
    assert m.n_to_decide is not None and m.n_to_decide > N
    assert f"~{m.n_to_decide} paired questions would decide it" in d.reasons[0]
    row = decision_rows(d)[0]
    assert row[DECISION_COLUMNS.index("n to decide")] == str(m.n_to_decide)


def test_latency_is_not_compared_across_hardware_and_run_differences_are_listed(store: DuckDBStore) -> None:
    base = baseline_values()
    fill(store, "r1", {"base": base}, hardware='{"cpu": "EPYC", "cores": 2}', packages='{"vllm": "0.32.0"}')
    fill(store, "r2", {"cand": base}, hardware='{"cpu": "Xeon", "cores": 2}', packages='{"vllm": "0.33.0"}')
    d = gate(store, "base", "cand", POLICY, baseline_run="r1", candidate_run="r2")
    assert d.decision == "undecided" and d.latency is None
    assert "latency cannot be compared across different hardware" in d.reasons[0]
    assert any("EPYC, 2 cores vs Xeon, 2 cores" in n for n in d.notes)
    assert "packages: vllm 0.32.0 -> 0.33.0" in d.notes
    assert "Differences between the runs:" in markdown_report(d)
    fill(store, "r3", {"cand": base}, hardware='{"cpu": "EPYC", "cores": 2}', packages='{"vllm": "0.32.0"}')
    same = gate(store, "base", "cand", POLICY, baseline_run="r1", candidate_run="r3")
    # Same machine, other run: the latency of two runs never pairs (each run's latency phase timed its own).
    assert same.decision == "undecided" and same.latency is None
    assert same.notes == ["latency not compared: the two settings were timed in different runs (r1, r3); latency "
                          "pairs only within one run's latency phase"]  # fmt: skip
    assert gate(store, "base", "cand", POLICY.model_copy(update={"latency": None}), baseline_run="r1",
                candidate_run="r3").decision == "pass"  # fmt: skip


def test_a_failed_sample_makes_the_gate_undecided_not_a_pass(store: DuckDBStore) -> None:
    base = baseline_values()
    fill(store, "r1", {"base": base, "cand": dict(base)})
    assert gate(store, "base", "cand", POLICY, run="r1").decision == "pass"
    fill(store, "r2", {"base": base, "cand": dict(base)})
    with store.transaction() as con:  # as a request that crashed leaves its row
        con.execute(
            "UPDATE samples SET status = 'failed' WHERE run_id = 'r2' AND setting_name = 'cand' AND question_id = 'q3'"
        )
    failed = gate(store, "base", "cand", POLICY, run="r2")
    assert (failed.decision, failed.exit_code) == ("undecided", UNDECIDED)
    assert "1 question(s) failed in a setting (e.g. ['q3'])" in failed.reasons[0]


def test_latency_needs_the_policys_probe_count(store: DuckDBStore) -> None:
    base = baseline_values()
    fill(store, "r1", {"base": base, "fast": base | {"probe_ttft_s": [t / 3 for t in base["probe_ttft_s"]]}})
    policy = POLICY.model_copy(update={"latency": LatencyRule(metric="probe_ttft_s", min_probes=N + 1)})
    d = gate(store, "base", "fast", policy, run="r1")
    assert d.decision == "undecided" and d.latency is None
    assert any(f"the policy needs {N + 1}" in r and "--probe-questions" in r for r in d.reasons), d.reasons
    assert gate(store, "base", "fast", POLICY, run="r1").decision == "pass"


def test_latency_timed_on_two_machines_inside_one_run_is_not_compared(store: DuckDBStore) -> None:
    """On Ray, rows of one run may be timed by workers on unlike nodes: the run's (driver's) hardware says
    nothing about them; each row's own machine decides."""
    base = baseline_values()
    fill(store, "r1", {"base": base, "cand": dict(base)}, hardware='{"cpu": "EPYC", "cores": 2}')
    assert gate(store, "base", "cand", POLICY, run="r1").latency is not None  # rows without a machine: as before
    with store.transaction() as con:  # the candidate's rows were timed by a worker on another machine
        con.execute("UPDATE samples SET hardware_sha256 = 'node-a' WHERE setting_name = 'base'")
        con.execute("UPDATE samples SET hardware_sha256 = 'node-b' WHERE setting_name = 'cand'")
    d = gate(store, "base", "cand", POLICY, run="r1")
    assert d.decision == "undecided" and d.latency is None
    assert "latency cannot be compared across different hardware" in d.reasons[0]
    assert any("timed on 2 different machines" in n for n in d.notes)


def test_each_compressed_setting_is_gated_against_no_compression_at_its_own_top_k(store: DuckDBStore) -> None:
    from eval.gate import gate_each_compressed, verdict_line

    base = baseline_values()
    worse = base | {"answer_contains": [0.0] * N}
    fill(
        store,
        "r1",
        {"none-k3": base, "none-k8": base, "small-k3": base, "bad-k8": worse},
        meta={
            "none-k8": {"top_k": 8},
            "small-k3": {"compressor": "pruned", "target_ratio": 4.0},
            "bad-k8": {"compressor": "llmlingua", "target_ratio": 4.0, "top_k": 8},
        },
    )
    policy = store.path.parent / "policy.yaml"
    policy.write_text(POLICY.model_dump_json())  # JSON is YAML
    decisions = gate_each_compressed(store, "r1", policy)
    assert [(d.candidate, d.baseline, d.decision) for d in decisions] == [
        ("small-k3", "none-k3", "pass"),
        ("bad-k8", "none-k8", "fail"),
    ]
    lines = [verdict_line(d) for d in decisions]
    assert lines[0].startswith("small-k3 vs none-k3: PASS (every gated metric passed; ")
    assert lines[1].startswith("bad-k8 vs none-k8: FAIL (answer_contains: fail")
    assert len(store.decisions_for_run("r1")) == 2  # a decision row each


def test_each_compressed_setting_is_gated_against_its_own_uncompressed_twin(store: DuckDBStore) -> None:
    """Two retrievals × answer cache off and 0.8 at one top-k: every candidate meets the uncompressed setting
    that differs from it only in compression, not another of the same retrieval (an unmatched answer cache
    once made both caches' candidates meet whichever baseline the leaderboard listed last)."""
    from eval.gate import gate_each_compressed

    rng = np.random.default_rng(7)
    settings: dict[str, dict[str, list[float]]] = {}
    meta: dict[str, dict[str, object]] = {}
    twins: dict[str, str] = {}
    for retrieval in ("hybrid", "vector"):
        for cache in (None, 0.8):
            suffix = f"k3-{retrieval}-dense" + ("" if cache is None else f"-cache{cache:g}")
            values = baseline_values() | {"answer_contains": (rng.random(N) < 0.5).astype(float).tolist()}
            settings[f"none-{suffix}"] = settings[f"pruned-4x-{suffix}"] = values
            meta[f"none-{suffix}"] = {"retrieval": retrieval, "answer_cache": cache}
            meta[f"pruned-4x-{suffix}"] = meta[f"none-{suffix}"] | {"compressor": "pruned", "target_ratio": 4.0}
            twins[f"pruned-4x-{suffix}"] = f"none-{suffix}"
    fill(store, "r1", settings, meta=meta)
    policy = store.path.parent / "policy.yaml"
    policy.write_text(POLICY.model_copy(update={"latency": None}).model_dump_json())  # JSON is YAML
    decisions = gate_each_compressed(store, "r1", policy)
    assert {d.candidate: d.baseline for d in decisions} == twins and len(decisions) == len(twins)
    assert all(d.decision == "pass" for d in decisions)  # each against an identical twin
    others = {n: v for n, v in settings.items() if n.startswith("none-")}
    assert len({tuple(v["answer_contains"]) for v in others.values()}) == len(others)


def test_latency_tolerance_is_the_same_slack_whatever_speed_up_is_demanded() -> None:
    """A floor of min_speedup * (1 - tolerance) for 1.0 and for 1.01 alike: no jump at 1.0."""
    from eval.gate import judge_latency

    rng = np.random.default_rng(3)
    base = 1.0 + 0.01 * rng.random(200)
    cand = base / 0.985  # 1.5 % slower, tightly
    policy = GatePolicy(resamples=2000)
    hold = judge_latency(LatencyRule(min_speedup=1.0, tolerance=0.05), base / cand, policy)
    nudge = judge_latency(LatencyRule(min_speedup=1.01, tolerance=0.05), base / cand, policy)
    assert hold.verdict == nudge.verdict == "pass"  # 0.985 clears 0.95 and 0.9595
    strict = judge_latency(LatencyRule(min_speedup=1.01, tolerance=0.0), base / cand, policy)
    assert strict.verdict == "fail"


def test_engine_precision_of_the_samples_is_noted_where_the_run_level_one_cannot_see_it(store: DuckDBStore) -> None:
    """On Ray the run's precision is its first worker's; each row's own says what the setting ran at."""
    base = baseline_values()
    fill(store, "r1", {"base": base, "cand": dict(base)})
    assert not any("precision" in n for n in gate(store, "base", "cand", POLICY, run="r1").notes)
    with store.transaction() as con:  # the candidate's rows came from a worker that ran float32
        con.execute("UPDATE samples SET engine_precision = 'bfloat16' WHERE setting_name = 'base'")
        con.execute("UPDATE samples SET engine_precision = 'float32' WHERE setting_name = 'cand'")
    notes = gate(store, "base", "cand", POLICY, run="r1").notes
    assert "engine precision of the samples: bfloat16 vs float32" in notes


def test_verdict_line_names_latency_when_the_speed_up_decided_a_fail() -> None:
    """An LLMLingua-like candidate: answer quality undecided, end to end four times slower. The line names
    the latency metric that failed it, not the first reason (the undecided quality metric)."""
    from eval.gate import Labels, decide, verdict_line

    n = 100
    rng = np.random.default_rng(11)
    base_recall = (rng.random(n) < 0.5).astype(float)
    cand_recall = base_recall.copy()
    ones, zeros = np.flatnonzero(base_recall == 1), np.flatnonzero(base_recall == 0)
    cand_recall[ones[:13]] = 0.0  # 13 answers lost, 10 gained: -0.03, on the margin, so undecided
    cand_recall[zeros[:10]] = 1.0
    latency = 1.0 + 0.1 * rng.random(n)
    ids = [f"q{i}" for i in range(n)]
    base = {
        q: {"status": "ok", "answer_token_recall": base_recall[i], "e2e_cold_s": latency[i]} for i, q in enumerate(ids)
    }
    cand = {
        q: {"status": "ok", "answer_token_recall": cand_recall[i], "e2e_cold_s": 4 * latency[i]}
        for i, q in enumerate(ids)
    }
    policy = GatePolicy(resamples=2000, metrics=[MetricRule(name="answer_token_recall", margin=0.03)])
    labels = Labels(baseline="none-k8", candidate="llmlingua-4x-k8", baseline_run="r1", candidate_run="r1")
    d = decide(base, cand, policy, labels)
    assert d.decision == "fail" and [m.verdict for m in d.metrics] == ["undecided"]
    assert d.reasons[0].startswith("answer_token_recall: undecided")  # the first reason is not the decider
    line = verdict_line(d)
    assert line.startswith("llmlingua-4x-k8 vs none-k8: FAIL (e2e_cold_s: speed-up 0.2"), line
    assert line.endswith("needs 1.00x (fail))")


def test_the_watch_gates_tonights_rows_of_the_shipped_setting_against_the_run_it_shipped_on(
    store: DuckDBStore, tmp_path: Path
) -> None:
    import yaml

    from eval.gate import watch_line, watch_shipped

    shipped = baseline_values()
    worse = dict(shipped, answer_contains=[0.0] * 40 + shipped["answer_contains"][40:])
    fill(store, "r-shipped", {"pruned": shipped}, hardware="cpu")
    fill(store, "r-clean", {"pruned": shipped}, corpus_sha="c2", hardware="cpu")  # another corpus, same rows
    fill(store, "r-worse", {"pruned": worse}, questions=[f"q{i}" for i in range(N)], hardware="cpu")
    policy = tmp_path / "policy.yaml"
    raw = POLICY.model_dump(mode="json") | {"shipped": {"setting": "pruned", "run": "r-shipped"}}
    policy.write_text(yaml.safe_dump(raw))
    clean = watch_shipped(store, "r-clean", policy)
    assert clean is not None and clean.decision == "pass"
    assert watch_line(clean).startswith("shipped setting holds: pruned@r-clean is no worse than pruned@r-shipped")
    bad = watch_shipped(store, "r-worse", policy)
    assert bad is not None and bad.decision == "fail" and "answer_contains" in watch_line(bad)
    rows = store.query("SELECT candidate_run, decision FROM gate_decisions ORDER BY created_at")
    assert [(r["candidate_run"], r["decision"]) for r in rows] == [("r-clean", "pass"), ("r-worse", "fail")]
    unwatched = tmp_path / "plain.yaml"
    unwatched.write_text(yaml.safe_dump(POLICY.model_dump(mode="json")))
    assert watch_shipped(store, "r-clean", unwatched) is None


def test_the_watch_takes_the_shipped_setting_it_is_given_over_the_policys_block(
    store: DuckDBStore, tmp_path: Path
) -> None:
    """A project file names its own shipped setting and run (`shipped: {setting, run}`): given, it is watched
    whatever the policy's `shipped` block says, and with a policy that has none."""
    import yaml

    from eval.gate import watch_shipped
    from eval.gate.policy import ShippedSetting

    shipped = baseline_values()
    worse = dict(shipped, answer_contains=[0.0] * 40 + shipped["answer_contains"][40:])
    fill(store, "r-shipped", {"pruned": shipped, "other": shipped}, hardware="cpu")
    fill(store, "r-worse", {"pruned": worse, "other": shipped}, hardware="cpu")
    elsewhere = tmp_path / "elsewhere.yaml"  # the policy watches another setting, which holds
    elsewhere.write_text(
        yaml.safe_dump(POLICY.model_dump(mode="json") | {"shipped": {"setting": "other", "run": "r-shipped"}})
    )
    unwatched = tmp_path / "plain.yaml"
    unwatched.write_text(yaml.safe_dump(POLICY.model_dump(mode="json")))
    assert (by_policy := watch_shipped(store, "r-worse", elsewhere)) is not None and by_policy.decision == "pass"
    given = ShippedSetting(setting="pruned", run="r-shipped")
    for policy in (elsewhere, unwatched):
        d = watch_shipped(store, "r-worse", policy, given)
        assert d is not None and (d.baseline, d.candidate) == ("pruned@r-shipped", "pruned@r-worse")
        assert d.decision == "fail" and any(r.startswith("answer_contains: fail") for r in d.reasons)


def test_run_differences_name_what_is_unknown_never_none() -> None:
    import re

    from eval.cells import EMPTY
    from eval.gate.run import run_differences
    from eval.store import RunMeta

    same = {"run_id": "r", "status": "done", "questions_sha256": "q", "corpus_sha256": None}
    b = RunMeta(**same, index_version=None, git_commit=None, package_versions='{"vllm": "0.32.0", "torch": null}')
    c = RunMeta(
        **same, index_version=3, git_commit="abcdef1234567", config_hash="h2",
        package_versions='{"vllm": "0.33.0", "torch": "2.13.0"}',
    )  # fmt: skip
    notes = run_differences(b, c)
    assert not re.search(r"\b(NULL|None|nan)\b", " ".join(notes)), notes
    assert notes == [
        "code: unknown vs abcdef1234",
        f"sweep config: {EMPTY} vs h2",
        f"index version: {EMPTY} vs 3",
        f"packages: torch {EMPTY} -> 2.13.0, vllm 0.32.0 -> 0.33.0",
    ]


def test_the_watchs_latency_means_are_of_the_pair_its_speed_up_is_of(store: DuckDBStore) -> None:
    """Review 2026-12-06 #16: the speed-up is tonight's twin over tonight's shipped setting, and so are its
    means now (they were the shipped run's rows against tonight's)."""
    from eval.gate.run import _pair_means
    from eval.gate.statistics import LatencyResult
    from eval.store import SettingRef

    twin = {"probe_ttft_s": [2.0] * N}
    shipped = {"probe_ttft_s": [1.0] * N}
    fill(store, "tonight", {"none": twin, "pruned": shipped}, meta={"pruned": {"compressor": "pruned"}})
    refs = {r["setting_name"]: r for r in store.leaderboard("tonight")}
    ref = {n: SettingRef(run_id="tonight", setting_hash=r["setting_hash"], setting_name=n) for n, r in refs.items()}
    lat = LatencyResult(metric="probe_ttft_s", n=N, baseline_mean=9.0, candidate_mean=9.0, speedup=2.0,
                        ci_low=1.9, ci_high=2.1, min_speedup=1.0, verdict="pass")  # fmt: skip
    fixed = _pair_means(store, ref["none"], ref["pruned"], lat)
    assert (fixed.baseline_mean, fixed.candidate_mean) == (pytest.approx(2.0), pytest.approx(1.0))


def _validity(store: DuckDBStore, run_id: str, figure: float | None, method: str = "rule checker") -> None:
    """Store the rule checker's validity on documentation for `run_id`, as a sweep does (None: not measured)."""
    import duckdb

    line = f"faithfulness: {method}, balanced accuracy {figure} on documentation answers"
    stored = {"faithfulness": {"method": method, "corpus_kind": "documentation", "balanced_accuracy": figure}}
    con = duckdb.connect(str(store.path))
    stored["faithfulness"]["line"] = line
    con.execute("UPDATE runs SET faithfulness_validity = ? WHERE run_id = ?", [json.dumps(stored), run_id])
    con.close()


def test_a_deciding_faithfulness_metric_must_state_the_validity_its_method_needs() -> None:
    with pytest.raises(ValueError, match="a deciding faithfulness metric states min_validity"):
        MetricRule(name="faithfulness_model", margin=0.05)
    assert MetricRule(name="faithfulness", margin=0.05, advisory=True).min_validity is None


@pytest.mark.parametrize(
    ("figure", "bar", "expected"),
    [
        (
            0.631,
            0.70,
            "faithfulness cannot decide: rule checker reads 0.63 on documentation answers, under the "
            "policy's min_validity 0.70",
        ),
        (None, 0.70, "faithfulness cannot decide: rule checker has no measured validity on documentation answers"),
        (0.631, 0.60, None),  # the bar is met: the metric decides
    ],
)
def test_faithfulness_decides_only_where_its_methods_stored_validity_meets_the_bar(
    store: DuckDBStore, figure: float | None, bar: float, expected: str | None
) -> None:
    base = baseline_values() | {"faithfulness": [1.0] * N}
    fill(store, "r1", {"base": base, "cand": dict(base)})
    _validity(store, "r1", figure)
    rule = MetricRule(name="faithfulness", margin=0.05, min_validity=bar)
    policy = POLICY.model_copy(update={"metrics": [*POLICY.metrics, rule], "latency": None})
    d = gate(store, "base", "cand", policy, run="r1")
    assert any(n.startswith("run r1: faithfulness: rule checker") for n in d.notes)
    if expected is None:
        assert d.decision == "pass" and any(m.name == "faithfulness" for m in d.metrics)
    else:
        assert d.decision == "undecided" and d.reasons[0].startswith(expected), d.reasons
    advisory = policy.model_copy(update={"metrics": [*POLICY.metrics, rule.model_copy(update={"advisory": True})]})
    assert gate(store, "base", "cand", advisory, run="r1").decision == "pass"  # reported, never refused


def test_a_verdict_faithfulness_decided_names_the_method_and_its_validity(store: DuckDBStore) -> None:
    from eval.gate import verdict_line

    base = baseline_values() | {"faithfulness": [1.0] * N}
    worse = [0.0 if i % 2 else 1.0 for i in range(N)]  # half the answers lose their support
    fill(store, "r1", {"base": base, "cand": base | {"faithfulness": worse}})
    _validity(store, "r1", 0.8)
    rule = MetricRule(name="faithfulness", margin=0.05, min_validity=0.7)
    d = gate(store, "base", "cand", POLICY.model_copy(update={"metrics": [rule], "latency": None}), run="r1")
    line = verdict_line(d)
    assert d.decision == "fail" and line.startswith("cand vs base: FAIL (faithfulness: fail")
    assert line.endswith("; by rule checker, balanced accuracy 0.8 on documentation answers)"), line


def test_fields_added_unset_keep_every_earlier_hash() -> None:
    """A policy without `min_validity` and a sweep without `corpus_kind` hash as before those fields existed
    (measured at f89a0ad), so stored sequential gates resume and earlier runs' settings are reused."""
    from eval.settings import SweepConfig

    root = Path(__file__).resolve().parents[2]
    assert GatePolicy.load(root / "policies" / "demo-gate.yaml").sha256().startswith("d1aee75baadf28f4")
    config = SweepConfig(index_path=Path("i"), questions_path=Path("q"), store_path=Path("s"))
    assert (config.config_hash(), config.samples_hash()) == ("62ffc3788bb41751", "2d7970b867118963")
    assert config.model_copy(update={"corpus_kind": "documentation"}).config_hash() == "62ffc3788bb41751"
    nli = SweepConfig.model_validate(config.model_dump() | {"verifier": {"name": "nli", "model": "m"}})
    assert (nli.config_hash(), nli.samples_hash()) == ("abb63be0d8b70f91", "d4edc267614adb01")


def test_the_watch_honours_the_validity_bar_and_refuses_a_figure_two_methods_measured(
    store: DuckDBStore, tmp_path: Path
) -> None:
    import yaml

    from eval.gate import watch_shipped

    shipped = baseline_values() | {"faithfulness": [1.0] * N}
    worse = shipped | {"faithfulness": [0.0 if i % 2 else 1.0 for i in range(N)]}
    fill(store, "r-shipped", {"pruned": shipped})
    fill(store, "r-tonight", {"pruned": worse}, corpus_sha="c2")
    rule = MetricRule(name="faithfulness", margin=0.05, min_validity=0.7)
    policy = tmp_path / "policy.yaml"
    raw = POLICY.model_dump(mode="json", exclude_none=True) | {"latency": None}
    raw["metrics"] = [rule.model_dump(mode="json")]
    policy.write_text(yaml.safe_dump(raw | {"shipped": {"setting": "pruned", "run": "r-shipped"}}))
    for run in ("r-shipped", "r-tonight"):
        _validity(store, run, 0.5)
    d = watch_shipped(store, "r-tonight", policy)
    assert d is not None and d.decision == "undecided" and d.reasons[0].startswith("faithfulness cannot decide")
    for run in ("r-shipped", "r-tonight"):
        _validity(store, run, 0.8)
    d = watch_shipped(store, "r-tonight", policy)
    assert d is not None and d.decision == "fail"  # a valid method: the regression fails the watch
    _validity(store, "r-tonight", 0.8, method="likelihood card 0123456789ab")
    d = watch_shipped(store, "r-tonight", policy)
    assert d is not None and d.decision == "undecided", d.reasons
    assert d.reasons[0] == (
        "faithfulness cannot decide: the two runs measured it with different methods (likelihood card "
        "0123456789ab, rule checker)"
    )
    # A refused faithfulness metric hides no other regression: answers that got worse still fail the watch.
    worst = worse | {"answer_contains": [0.0] * N}
    fill(store, "r-worst", {"pruned": worst}, corpus_sha="c3")
    _validity(store, "r-worst", 0.5)
    contains = MetricRule(name="answer_contains", margin=0.02)
    raw["metrics"] = [contains.model_dump(mode="json"), rule.model_dump(mode="json")]
    policy.write_text(yaml.safe_dump(raw | {"shipped": {"setting": "pruned", "run": "r-shipped"}}))
    d = watch_shipped(store, "r-worst", policy)
    assert d is not None and d.decision == "fail" and d.reasons[0].startswith("answer_contains: fail"), d.reasons
    assert d.reasons[-1].startswith("faithfulness cannot decide")


def test_the_rule_checkers_figure_under_the_bar_refuses_and_over_it_decides_with_the_bundled_embedder() -> None:
    """`run`'s pre-flight on a sweep with the bundled embedder: the rule checker's packaged documentation figure
    (0.63) is read against the bar; another embedder has none (G156)."""
    from eval.run.provenance import faithfulness_bar
    from eval.settings import SweepConfig

    config = SweepConfig(
        index_path=Path("i"), questions_path=Path("q"), store_path=Path("s"), corpus_kind="documentation"
    )
    assert config.embedder == "minilm-l6-v2"
    strict = GatePolicy(metrics=[MetricRule(name="faithfulness", margin=0.05, min_validity=0.7)])
    assert faithfulness_bar(config, strict) == (
        "faithfulness cannot decide: rule checker reads 0.63 on documentation answers, under the policy's "
        "min_validity 0.70 (docs/faithfulness.md; a verifier that meets it, or make it advisory)"
    )
    assert (
        faithfulness_bar(config, GatePolicy(metrics=[MetricRule(name="faithfulness", margin=0.05, min_validity=0.6)]))
        is None
    )


def test_an_nli_verifier_has_no_measured_validity_so_its_figure_cannot_decide() -> None:
    """What a sweep with `--verifier nli:MODEL` stores, read back by the bar: nobody here measured an NLI model,
    so a deciding faithfulness_model metric is refused before any work (and the gate would refuse it too)."""
    from eval.run.provenance import faithfulness_bar, faithfulness_validity
    from eval.settings import SweepConfig

    config = SweepConfig(
        index_path=Path("i"), questions_path=Path("q"), store_path=Path("s"), corpus_kind="documentation",
        verifier={"name": "nli", "model": "/models/minicheck"},  # type: ignore[arg-type]
    )  # fmt: skip
    stored = faithfulness_validity(config)
    assert stored["faithfulness_model"]["method"] == "nli:/models/minicheck"
    assert stored["faithfulness_model"]["balanced_accuracy"] is None
    policy = GatePolicy(metrics=[MetricRule(name="faithfulness_model", margin=0.05, min_validity=0.5)])
    assert faithfulness_bar(config, policy) == (
        "faithfulness_model cannot decide: nli:/models/minicheck has no measured validity on documentation answers, "
        "under the policy's min_validity 0.50 (docs/faithfulness.md; a verifier that meets it, or make it advisory)"
    )
    advisory = GatePolicy(metrics=[MetricRule(name="faithfulness_model", margin=0.05, advisory=True)])
    assert faithfulness_bar(config, advisory) is None
