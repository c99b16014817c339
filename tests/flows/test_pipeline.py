"""The Prefect flows end to end on fast CPU fakes registered by name: index -> sweep -> gate, driven by
typed configs and by config files, as deployments and the CLI drive them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tests.fakes  # noqa: F401  (registers the hash embedder, the fake generator and the halving compressor)
from corpus.errors import CribsheetError
from corpus.index import IndexConfig
from corpus.sources import SourceConfig
from eval.engine.generator import GeneratorConfig
from eval.gate import GateDecision, GateRequest
from eval.settings import CompressionSpec, GridConfig, SweepConfig
from eval.store import DuckDBStore
from flows.pipeline import gate_flow, index_flow, sweep_flow
from flows.progress import LineReporter, report, set_reporter
from tests.conftest import TINY_QUESTIONS


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from tests.conftest import TINY_DOCS, TINY_QUESTIONS, write_jsonl

    work = tmp_path_factory.mktemp("flows")
    corpus = write_jsonl(work / "corpus.jsonl", TINY_DOCS)
    questions = write_jsonl(work / "questions.jsonl", TINY_QUESTIONS)
    rep = index_flow(IndexConfig(source=SourceConfig(path=corpus), index_path=work / "idx.lancedb", embedder="hash"))
    assert rep.n_documents == 5 and rep.added == 5
    config = (work / "sweep.yaml").resolve()
    config.write_text(
        f"index_path: {work / 'idx.lancedb'}\nquestions_path: {questions}\nstore_path: {work / 'r.duckdb'}\n"
        "embedder: hash\nretrieve_n: 4\nprobe_questions: 2\ngenerator: {name: fake}\n"
        "grid: {compressions: [{compressor: none}, {compressor: halving, target_ratio: 2}], top_ks: [1, 3]}\n"
    )
    result = sweep_flow(config_file=config)
    return work / "r.duckdb", result.run_id


def test_sweep_flow_from_a_config_file_stores_every_sample(swept: tuple[Path, str]) -> None:
    path, run_id = swept
    store = DuckDBStore(path, read_only=True)
    board = {r["setting_name"]: r for r in store.leaderboard(run_id)}
    assert sorted(board) == [
        "halving-2x-k1-hybrid-dense",
        "halving-2x-k3-hybrid-dense",
        "none-k1-hybrid-dense",
        "none-k3-hybrid-dense",
    ]
    assert all(r["n"] == 4 and r["n_failed"] == 0 for r in board.values())
    assert 1.5 < board["halving-2x-k3-hybrid-dense"]["realized_ratio"] < 2.5
    # The fake answers with the first passage's first clause: right for Asia, wrong for the Eiffel Tower (1887).
    asia = store.paired_samples(
        store.resolve_setting("none-k1-hybrid-dense"), store.resolve_setting("none-k3-hybrid-dense")
    )
    assert asia[0]["q2"]["answer_contains"] == 1.0 and asia[0]["q4"]["answer_contains"] == 0.0
    assert store.run_meta(run_id).status == "ok"


def test_gate_flow_reads_its_request_and_cannot_decide_on_four_questions(
    swept: tuple[Path, str], tmp_path: Path
) -> None:
    path, run_id = swept
    request = GateRequest(
        store_path=path,
        baseline="none-k3-hybrid-dense",
        candidate="halving-2x-k3-hybrid-dense",
        run=run_id,
        report_path=tmp_path / "gate.md",
    )
    state = gate_flow(request, return_state=True)
    assert state.is_failed() and state.name == "Undecided"  # automations can tell it from a FAIL
    decision = state.result(raise_on_failure=False)
    assert isinstance(decision, GateDecision)
    assert (decision.decision, decision.exit_code) == ("undecided", 2)
    assert "only 4 paired questions" in decision.reasons[0]
    assert "Decision: UNDECIDED" in (tmp_path / "gate.md").read_text()
    assert "UNDECIDED" in (state.message or "")
    artifacts = _artifacts("cribsheet-gate-halving-2x-k3-hybrid-dense")
    assert artifacts and "Decision: UNDECIDED" in str(artifacts[0].data)


def test_sweep_flow_publishes_its_leaderboard_as_a_table(swept: tuple[Path, str]) -> None:
    path, run_id = swept
    artifacts = _artifacts("cribsheet-leaderboard")
    assert artifacts and run_id in str(artifacts[0].description)
    table = json.loads(artifacts[0].data) if isinstance(artifacts[0].data, str) else artifacts[0].data
    names = {row["setting_name"] for row in table}
    stored = {r["setting_name"] for r in DuckDBStore(path, read_only=True).leaderboard(run_id)}
    assert names == stored and len(names) == 4
    report = _artifacts("cribsheet-report")
    assert report and "data:image/svg+xml;base64," in str(report[0].data) and run_id in str(report[0].data)


def test_report_command_writes_the_pareto_plot_and_the_bill(swept: tuple[Path, str], tmp_path: Path) -> None:
    import subprocess
    import sys
    import xml.etree.ElementTree as ET

    path, run_id = swept
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "report", "--store", str(path), "--run", run_id, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    svg = ET.fromstring((out / "pareto.svg").read_text())
    assert sum((e.get("id") or "").startswith("point-") for e in svg.iter()) == 4  # every setting has a latency
    assert (out / "report.html").exists()
    md = (out / "report.md").read_text()
    assert f"run {run_id}" in md and "halving-2x-k3-hybrid-dense" in md and "(pareto.svg)" in md


def _artifacts(key: str) -> list[Any]:
    """Every version of a Prefect artifact, newest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])), sort=ArtifactSort.CREATED_DESC
        )
    return list(found)


def test_flows_take_a_config_or_a_file_not_both(tmp_path: Path) -> None:
    with pytest.raises(CribsheetError, match="either a SweepConfig or a config file, not neither"):
        sweep_flow()
    missing = tmp_path / "missing.yaml"
    with pytest.raises(CribsheetError, match=f"{missing}: config file not found"):
        gate_flow(config_file=missing)


def test_misspelled_component_in_a_typed_config_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match="unknown generator 'fak'; known: fake, fake-cpu, fake-dead, fake-scoring, fake-stall, vllm"
    ):
        SweepConfig(
            index_path=tmp_path,
            questions_path=tmp_path / "q.jsonl",
            store_path=tmp_path / "r.duckdb",
            generator=GeneratorConfig(name="fak"),
        )
    with pytest.raises(ValueError, match="unknown compressor 'halvng'"):
        GridConfig(compressions=[CompressionSpec(compressor="halvng", target_ratio=2.0)])


class _Clock:
    """A clock that moves only when the test moves it: the seconds a reporter prints are known exactly."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_every_stage_logs_one_line_with_count_and_seconds() -> None:
    lines: list[str] = []
    reporter = LineReporter(lines.append)
    for done in range(1, 4):
        reporter("retrieve", done, 3)
    reporter("retrieve", 3, 3)  # a repeated final tick does not log twice
    reporter("index (documents)", 100, 0)  # a streaming stage whose total is not known yet
    reporter("setting none-k3", 4, 4)
    reporter.close()
    assert [line.split(" in ")[0] for line in lines] == ["retrieve: 3/3", "setting none-k3: 4/4"]
    assert all(line.endswith(" s") for line in lines)
    # With no reporter installed (a worker-run deployment), ticks go to the line logger.
    set_reporter(None)
    report("stage", 1, 1)  # must not raise outside a flow run


def test_a_long_stage_is_never_silent_for_longer_than_the_heartbeat() -> None:
    """Driven by a fake clock with no heartbeat thread, so the lines and their order are exact."""
    clock = _Clock()
    beat: list[str] = []
    slow = LineReporter(beat.append, every=1.0, clock=clock, thread=False)
    slow("embed", 10, 100)
    clock.now = 1.0
    slow("embed", 20, 100)  # silent for `every`: a heartbeat
    slow("embed", 21, 100)  # just after one: none
    clock.now = 2.0
    slow("index (documents)", 300, 0)
    clock.now = 3.0
    slow("index (documents)", 400, 0)  # total not known yet: "?"
    slow("embed", 100, 100)
    assert beat == ["embed: 20/100 after 1 s", "index (documents): 400/? after 1 s", "embed: 100/100 in 3.0 s"]
    # Between ticks, a beat speaks for every running stage silent for `every`, never for a finished one.
    slow.beat()
    clock.now = 4.0
    slow.beat()
    assert beat[3:] == ["index (documents): 400/? after 2 s"]
    # A call that reports nothing until it returns (one engine batch) still gets its heartbeat lines.
    quiet: list[str] = []
    batch = LineReporter(quiet.append, every=1.0, clock=clock, thread=False)
    batch("generate none-k8", 0, 1000)
    clock.now = 6.0
    batch.beat()
    batch.beat()  # just after one: none
    clock.now = 7.0
    batch.beat()
    assert quiet == ["generate none-k8: 0/1000 after 2 s", "generate none-k8: 0/1000 after 3 s"]


def test_the_heartbeat_thread_beats_while_no_tick_comes() -> None:
    import threading

    heard = threading.Event()
    quiet: list[str] = []

    def emit(line: str) -> None:
        quiet.append(line)
        heard.set()

    batch = LineReporter(emit, every=0.01)
    batch("generate none-k8", 0, 1000)  # then no tick at all: only the thread can speak
    assert heard.wait(timeout=60)  # a generous bound on a hang, not a measure of speed
    batch.close()
    assert quiet[0].startswith("generate none-k8: 0/1000 after ")


def test_each_setting_of_a_flow_sweep_is_one_prefect_task_run(swept: tuple[Path, str]) -> None:
    import duckdb
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterTags

    path, run_id = swept
    with duckdb.connect(str(path), read_only=True) as con:
        (key,) = con.execute("SELECT reuse_key FROM runs WHERE run_id = ?", [run_id]).fetchone() or (None,)
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(task_run_filter=TaskRunFilter(tags=TaskRunFilterTags(all_=[f"run:{key}"])))
    assert sorted(r.name for r in runs) == [
        "halving-2x-k1-hybrid-dense",
        "halving-2x-k3-hybrid-dense",
        "none-k1-hybrid-dense",
        "none-k3-hybrid-dense",
    ]
    assert all(r.state is not None and r.state.is_completed() for r in runs)


@pytest.fixture(scope="module")
def retried(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepConfig, str, list[str], list[list[str]]]:
    """A flow sweep of one pruned setting with its knobs off the defaults, whose task fails once after it
    computed everything (an engine that dropped the connection as it returned): the config, the run, the
    settings computed (one entry per attempt) and the setting hashes of each write to the store.
    """
    from corpus.table import IndexOptions
    from eval.run.runner import SettingRunner
    from eval.settings import CompressorConfig, Setting
    from flows import pipeline
    from tests.conftest import TINY_DOCS, TINY_QUESTIONS, write_jsonl

    work = tmp_path_factory.mktemp("retried")
    corpus = write_jsonl(work / "corpus.jsonl", TINY_DOCS)
    questions = write_jsonl(work / "questions.jsonl", TINY_QUESTIONS)
    index = work / "idx.lancedb"
    options = IndexOptions(sentence_vectors=True)
    index_flow(IndexConfig(source=SourceConfig(path=corpus), index_path=index, embedder="hash", options=options))
    config = SweepConfig(
        index_path=index,
        questions_path=questions,
        store_path=work / "r.duckdb",
        embedder="hash",
        retrieve_n=4,
        probe_questions=2,
        generator=GeneratorConfig(name="fake"),
        compressor=CompressorConfig(rank_prior=0.1),
        grid=GridConfig(compressions=[CompressionSpec(compressor="pruned", target_ratio=2.0)], top_ks=[3]),
    )
    computed: list[str] = []
    writes: list[list[str]] = []
    compute, add_samples = SettingRunner.compute, DuckDBStore.add_samples

    def computed_then_dropped(self: SettingRunner, setting: Setting, index: int = 1, total: int = 1) -> Any:
        out = compute(self, setting, index, total)
        computed.append(setting.name)
        if len(computed) == 1:
            raise ConnectionError("engine hiccup")
        return out

    def counted(self: DuckDBStore, rows: Any, claims: Any = (), owner: Any = None) -> None:
        writes.append(sorted({r.setting_hash for r in rows}))
        add_samples(self, rows, claims, owner)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SettingRunner, "compute", computed_then_dropped)
        patch.setattr(DuckDBStore, "add_samples", counted)
        patch.setattr(pipeline, "setting_task", pipeline.setting_task.with_options(retry_delay_seconds=0))
        result = sweep_flow(config)
    return config, result.run_id, computed, writes


def test_a_setting_that_fails_transiently_is_retried_and_stored_once(
    retried: tuple[SweepConfig, str, list[str], list[list[str]]],
) -> None:
    """Nothing is written inside the task: the attempt that failed left no rows, the retry's are stored once."""
    import duckdb

    config, run_id, computed, writes = retried
    (setting,) = config.grid.expand()
    stored = config.setting_hash(setting)
    assert computed == [setting.name, setting.name]  # computed in full, dropped, computed again
    assert writes == [[stored]]  # one write, after the retry
    with duckdb.connect(str(config.store_path), read_only=True) as con:
        samples = con.execute(
            "SELECT count(*), count(DISTINCT question_id), count(DISTINCT setting_hash) FROM samples WHERE run_id = ?",
            [run_id],
        ).fetchone()
        doubled = con.execute(
            "SELECT count(*) FROM (SELECT question_id, claim_idx FROM claims WHERE run_id = ? GROUP BY ALL "
            "HAVING count(*) > 1)",
            [run_id],
        ).fetchone()
        (status,) = con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone() or (None,)
    n = len(TINY_QUESTIONS)
    assert samples == (n, n, 1) and doubled == (0,) and status == "ok"


def test_a_settings_task_run_is_tagged_with_the_hash_the_store_keeps(
    retried: tuple[SweepConfig, str, list[str], list[list[str]]],
) -> None:
    """The tag is the stored `setting_hash`, which for a compressor's knobs off their defaults is not the
    setting's own hash: a task run can be found from a stored row."""
    import duckdb
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterTags

    config, run_id, _, _ = retried
    (setting,) = config.grid.expand()
    with duckdb.connect(str(config.store_path), read_only=True) as con:
        hashes = con.execute("SELECT DISTINCT setting_hash FROM samples WHERE run_id = ?", [run_id]).fetchall()
        (key,) = con.execute("SELECT reuse_key FROM runs WHERE run_id = ?", [run_id]).fetchone() or (None,)
    assert len(hashes) == 1 and hashes[0][0] != setting.config_hash()  # the knobs are in the stored hash
    tags = [f"setting:{hashes[0][0]}", f"run:{key}"]
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(task_run_filter=TaskRunFilter(tags=TaskRunFilterTags(all_=tags)))
    assert [r.name for r in runs] == [setting.name]
    assert runs[0].state is not None and runs[0].state.is_completed() and runs[0].run_count == 2


def test_the_gate_flow_until_decided_sweeps_batches_and_ends_failed_on_a_clear_loser(
    swept: tuple[Path, str], tmp_path: Path
) -> None:
    from tests.conftest import write_jsonl
    from tests.eval.test_sequential_gate import POLICY, pool

    path, _ = swept
    work = path.parent
    questions = write_jsonl(tmp_path / "pool.jsonl", pool())
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"index_path: {work / 'idx.lancedb'}\nquestions_path: {questions}\nstore_path: {tmp_path / 'unused.duckdb'}\n"
        "embedder: hash\nretrieve_n: 4\ngenerator: {name: fake}\n"
        "grid: {compressions: [{compressor: none}, {compressor: halving, target_ratio: 2}], top_ks: [1]}\n"
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    request = GateRequest(
        store_path=tmp_path / "seq.duckdb",
        baseline="none-k1-hybrid-dense",
        candidate="halving-2x-k1-hybrid-dense",
        policy_path=policy,
        until_decided=True,
        sweep_config=sweep,
        batch=20,
        max_questions=100,
        report_path=tmp_path / "looks.md",
    )
    state = gate_flow(request, return_state=True)
    decision = state.result(raise_on_failure=False)
    assert isinstance(decision, GateDecision) and state.is_failed() and decision.decision == "fail"
    assert decision.n_questions < 100 and decision.reasons[0].startswith("answer_contains: fail at n=")
    looks = (tmp_path / "looks.md").read_text()
    assert "| 1 | answer_contains | 20 |" in looks and "FAIL" in looks
    artifacts = _artifacts("cribsheet-looks-halving-2x-k1-hybrid-dense")
    assert artifacts and "| 1 | answer_contains | 20 |" in str(artifacts[0].data)


def test_a_regression_of_the_shipped_setting_ends_the_sweep_flow_failed_naming_the_metric(
    swept: tuple[Path, str], tmp_path: Path
) -> None:
    """The flow, not only the library: tonight's rows of the shipped setting are worse than the run it
    shipped on (that run's answers made better by hand), so the flow run ends Failed with the metric."""
    import duckdb
    import yaml
    from prefect.states import State

    from flows.pipeline import ShippedSettingRegressed

    path, run_id = swept
    shipped = "halving-2x-k1-hybrid-dense"
    with duckdb.connect(str(path)) as con:  # as if it had shipped on a night it answered everything
        con.execute(
            "UPDATE samples SET answer_contains = 1, answer_token_recall = 1 WHERE run_id = ? AND setting_name = ?",
            [run_id, shipped],
        )
    policy = tmp_path / "watch.yaml"
    policy.write_text(yaml.safe_dump({
        "min_questions": 2, "confidence": 0.6, "metrics": [{"name": "answer_contains", "margin": 0.0}], "latency": None,
        "shipped": {"setting": shipped, "run": run_id},
    }))  # fmt: skip
    config = path.parent / "sweep.yaml"
    state: State[object] = sweep_flow(config_file=config, reuse=False, watch_policy=policy, return_state=True)
    assert state.is_failed()
    with pytest.raises(ShippedSettingRegressed, match="shipped setting FAIL: .*answer_contains"):
        state.result()
