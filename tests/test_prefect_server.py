"""Prefect as it is used: a real local Prefect server on loopback, the process work pool, `prefect deploy --all`
of prefect.yaml, a worker, and the index, sweep and gate deployments triggered with small parameters (fake
components, registered through CRIBSHEET_PLUGINS) until their final states."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.conftest import TINY_DOCS, TINY_QUESTIONS, write_jsonl
from tests.prefect_server import PREFECT, ROOT, prefect_server, start, stop

TRIGGER = """
import json, sys
from prefect.deployments import run_deployment
name, params = sys.argv[1], json.loads(sys.argv[2])
run = run_deployment(name, parameters=params, timeout=600)
print(json.dumps({"type": run.state.type.value, "name": run.state.name}))
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A Prefect server on a free loopback port, its own home, the process pool created; yields the env."""
    with prefect_server(tmp_path) as (env, _):
        subprocess.run(
            [PREFECT, "work-pool", "create", "cribsheet", "--type", "process"], env=env, check=True, capture_output=True
        )
        yield env


@pytest.mark.slow
def test_deployments_run_through_a_real_server_and_worker_to_their_final_states(
    server: dict[str, str], tmp_path: Path
) -> None:
    env = server
    deploy = subprocess.run(
        [PREFECT, "--no-prompt", "deploy", "--all"], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert deploy.returncode == 0, deploy.stdout[-2000:] + deploy.stderr[-2000:]
    worker = start([PREFECT, "worker", "start", "--pool", "cribsheet"], env, tmp_path / "worker.log")
    try:
        corpus = write_jsonl(tmp_path / "corpus.jsonl", TINY_DOCS)
        questions = write_jsonl(tmp_path / "questions.jsonl", TINY_QUESTIONS)
        index, store = str(tmp_path / "idx.lancedb"), str(tmp_path / "r.duckdb")
        sweep = {
            "index_path": index,
            "questions_path": str(questions),
            "store_path": store,
            "embedder": "hash",
            "generator": {"name": "fake"},
            "probe_questions": 2,
            "grid": {
                "compressions": [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}],
                "top_ks": [2],
            },
        }
        runs = {
            "cribsheet-index/index-nightly": {
                "config_file": None,
                "config": {"source": {"path": str(corpus)}, "index_path": index, "embedder": "hash"},
            },
            "cribsheet-sweep/sweep-nightly": {"config_file": None, "config": sweep},
            "cribsheet-gate/gate": {
                "config_file": None,
                "request": {
                    "store_path": store,
                    "baseline": "none-k2-hybrid-dense",
                    "candidate": "halving-2x-k2-hybrid-dense",
                    "report_path": str(tmp_path / "gate.md"),
                },
            },
        }
        states = {}
        for name, params in runs.items():
            proc = subprocess.run(
                [sys.executable, "-c", TRIGGER, name, json.dumps(params)],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=660,
            )
            assert proc.returncode == 0, proc.stderr[-2000:]
            states[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        stop(worker)
    log = (tmp_path / "worker.log").read_text()[-3000:]
    assert states["cribsheet-index/index-nightly"] == {"type": "COMPLETED", "name": "Completed"}, log
    assert states["cribsheet-sweep/sweep-nightly"] == {"type": "COMPLETED", "name": "Completed"}, log
    # Four questions cannot decide anything: the gate ends Failed, named Undecided (automations can tell).
    assert states["cribsheet-gate/gate"] == {"type": "FAILED", "name": "Undecided"}, log
    assert "halving-2x-k2-hybrid-dense" in (tmp_path / "gate.md").read_text()
    with duckdb.connect(store, read_only=True) as con:
        assert con.execute("SELECT count(*), count(DISTINCT setting_hash) FROM samples").fetchone() == (8, 2)
