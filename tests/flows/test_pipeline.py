"""The Prefect flows end to end on fast CPU fakes registered by name: index -> sweep -> gate, driven by
typed configs and by config files, as deployments and the CLI drive them."""

from __future__ import annotations

import json
import time
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
    with pytest.raises(ValueError, match="unknown generator 'fak'; known: fake, fake-dead, fake-stall, vllm"):
        SweepConfig(
            index_path=tmp_path,
            questions_path=tmp_path / "q.jsonl",
            store_path=tmp_path / "r.duckdb",
            generator=GeneratorConfig(name="fak"),
        )
    with pytest.raises(ValueError, match="unknown compressor 'halvng'"):
        GridConfig(compressions=[CompressionSpec(compressor="halvng", target_ratio=2.0)])


def test_without_a_terminal_every_stage_logs_one_line_with_count_and_seconds() -> None:
    lines: list[str] = []
    reporter = LineReporter(lines.append)
    for done in range(1, 4):
        reporter("retrieve", done, 3)
    reporter("retrieve", 3, 3)  # a repeated final tick does not log twice
    reporter("index (documents)", 100, 0)  # a streaming stage whose total is not known yet
    reporter("setting none-k3", 4, 4)
    assert [line.split(" in ")[0] for line in lines] == ["retrieve: 3/3", "setting none-k3: 4/4"]
    assert all(line.endswith(" s") for line in lines)
    # A long stage is never silent for longer than the heartbeat: a line with its counts while it runs.
    beat: list[str] = []
    slow = LineReporter(beat.append, every=0.05)
    slow("embed", 10, 100)
    time.sleep(0.06)
    slow("embed", 20, 100)  # silent for longer than `every`: a heartbeat
    slow("embed", 21, 100)  # just after one: none
    time.sleep(0.06)
    slow("index (documents)", 300, 0)
    time.sleep(0.06)
    slow("index (documents)", 400, 0)
    slow("embed", 100, 100)
    assert any(b.startswith("embed: ") and " after " in b for b in beat)  # a heartbeat while it ran
    assert any(b.startswith("index (documents): ") and "/? after " in b for b in beat)  # total not known
    assert beat[-1].startswith("embed: 100/100 in ") and sum(" in " in b for b in beat) == 1
    slow.close()
    # A call that reports nothing until it returns (one engine batch) still gets its heartbeat lines.
    quiet: list[str] = []
    batch = LineReporter(quiet.append, every=0.05)
    batch("generate none-k8", 0, 1000)
    time.sleep(0.3)  # no tick at all meanwhile
    batch.close()
    assert quiet and all(q.startswith("generate none-k8: 0/1000 after ") for q in quiet)
    # With no reporter installed (a worker-run deployment), ticks go to the line logger.
    set_reporter(None)
    report("stage", 1, 1)  # must not raise outside a flow run


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


def test_a_setting_that_fails_transiently_is_retried_and_stored_once(tmp_path: Path) -> None:
    from prefect import flow

    from eval.run.runner import SettingOutput
    from eval.settings import Setting
    from flows.pipeline import setting_task

    calls: list[int] = []
    setting = Setting(top_k=1, reranker="dense", retrieval="hybrid", layout="ranked", compressor="none")

    def flaky() -> SettingOutput:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("engine hiccup")
        return SettingOutput(setting, [], [])

    @flow
    def one_setting() -> SettingOutput:
        return setting_task.with_options(retry_delay_seconds=0)(setting, "key", flaky)

    out = one_setting()
    assert len(calls) == 2 and out.setting == setting
