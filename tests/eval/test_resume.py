"""A sweep killed with SIGKILL at a random point and run again resumes its run: the rows equal those of an
uninterrupted run, nothing is duplicated, and no finished setting is computed again (counted)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from corpus.chunk import SentenceChunker
from corpus.index import sync_index
from tests.fakes import HashEmbedder
from tests.helpers import load_documents

ROOT = Path(__file__).resolve().parents[2]
COMPARED = "answer, answer_contains, answer_token_recall, context_text, prompt_tokens, faithfulness, status"
N_SETTINGS = 6


def _script(index: Path, questions: Path, store: Path, top_ks: str = "[1, 2, 3]") -> str:
    """A sweep over fake components (6 settings); the generator says which batch it is on, then dawdles."""
    return textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from tests.fakes import HashEmbedder, ExtractingGenerator, count_words
        from corpus.retrieve import LanceRetriever
        from eval.compress import NoCompressor
        from eval.rerank import DenseReranker
        from eval.settings import GridConfig, SweepConfig
        from eval.run.wiring import Components
        from eval.run.sweep import run_sweep

        class SlowGenerator(ExtractingGenerator):
            def generate(self, prompts):
                out = super().generate(prompts)
                print("batch", len(self.batches), flush=True)
                time.sleep(0.3)
                return out

        index = Path({str(index)!r})
        emb = HashEmbedder()
        comps = Components(embedder=emb, retriever=LanceRetriever(index, emb),
                           rerankers={{"dense": DenseReranker(emb)}},
                           compressors={{"none": NoCompressor(count_words)}}, generator=SlowGenerator())
        config = SweepConfig(index_path=index, questions_path=Path({str(questions)!r}),
                             store_path=Path({str(store)!r}), embedder="hash", probe_questions=2, grid=GridConfig(
                                 compressions=[{{"compressor": "none"}}], top_ks={top_ks},
                                 layouts=["ranked", "edges"]))
        r = run_sweep(config, comps)
        print("result", json.dumps({{"run_id": r.run_id, "resumed": r.resumed, "kept": r.settings_kept,
                                     "computed": r.settings_computed, "reused": r.settings_reused}}), flush=True)
    """)


def _start(script: str, merge_stderr: bool = False) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    err = subprocess.STDOUT if merge_stderr else None
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, env=env
    )


def _run_until_batch(script: str, batch: int) -> subprocess.Popen[str]:
    """A sweep started and left running until its generator has begun batch `batch` (one per setting)."""
    proc = _start(script)
    assert proc.stdout is not None
    while (line := proc.stdout.readline()) and line.strip() != f"batch {batch}":
        pass
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()  # SIGKILL: no cleanup, no finally
    proc.wait(timeout=30)


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    line = next(x for x in out.splitlines() if x.startswith("result "))
    return dict(json.loads(line.removeprefix("result ")))


def _rows(store: Path) -> list[tuple[object, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(
            f"SELECT setting_name, question_id, {COMPARED} FROM samples ORDER BY setting_name, question_id"
        ).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def index_and_baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[tuple[object, ...]]]:
    from tests.conftest import TINY_DOCS, TINY_QUESTIONS, write_jsonl

    work = tmp_path_factory.mktemp("resume")
    corpus = write_jsonl(work / "corpus.jsonl", TINY_DOCS)
    questions = write_jsonl(work / "questions.jsonl", TINY_QUESTIONS)
    index = work / "idx.lancedb"
    sync_index(load_documents(corpus), SentenceChunker(), HashEmbedder(), index)
    result = _result(_start(_script(index, questions, work / "uninterrupted.duckdb")))
    assert result["computed"] == N_SETTINGS and result["kept"] == 0 and not result["resumed"]
    return index, questions, _rows(work / "uninterrupted.duckdb")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kill_9_then_rerun_equals_an_uninterrupted_run(
    seed: int, tmp_path: Path, index_and_baseline: tuple[Path, Path, list[tuple[object, ...]]]
) -> None:
    index, questions, baseline = index_and_baseline
    rng = random.Random(seed)
    store = tmp_path / "r.duckdb"
    script = _script(index, questions, store)
    kill_at = rng.randint(2, N_SETTINGS - 1)  # one batch per setting: dies inside setting `kill_at`
    proc = _run_until_batch(script, kill_at)
    time.sleep(rng.uniform(0.0, 0.25))  # anywhere in that setting's generation
    _kill(proc)

    con = duckdb.connect(str(store), read_only=True)
    (status,) = con.execute("SELECT status FROM runs").fetchall()[0]
    kept_before = con.execute("SELECT count(DISTINCT setting_hash) FROM samples").fetchall()[0][0]
    con.close()
    assert status == "running" and kept_before == kill_at - 1

    result = _result(_start(script))
    assert result["resumed"] and result["kept"] == kept_before and result["computed"] == N_SETTINGS - kept_before
    assert _rows(store) == baseline  # same answers and metrics, each (setting, question) once
    con = duckdb.connect(str(store), read_only=True)
    runs = con.execute("SELECT run_id, status, resumes, error FROM runs").fetchall()
    con.close()
    assert runs == [(result["run_id"], "ok", 1, None)]


def test_a_dead_runs_process_is_found_and_the_run_marked_killed(
    tmp_path: Path, index_and_baseline: tuple[Path, Path, list[tuple[object, ...]]]
) -> None:
    from eval.run.resume import claim_run
    from eval.store import DuckDBStore
    from tests.eval.test_store import _run

    index, questions, _ = index_and_baseline
    store = tmp_path / "r.duckdb"
    proc = _run_until_batch(_script(index, questions, store), 2)
    other = _run("other").model_copy(update={"fingerprint": "another sweep's inputs"})

    def runs() -> dict[str, dict[str, object]]:
        rows = DuckDBStore(store, read_only=True).query("SELECT run_id, status, finished_at, error FROM runs")
        return {str(r["run_id"]): r for r in rows}

    claim_run(DuckDBStore(store), other, [], [])  # any claim looks at the running runs first
    assert [r["status"] for r in runs().values()] == ["running", "running"]  # alive: left alone
    _kill(proc)
    claim_run(DuckDBStore(store), other.model_copy(update={"run_id": "other2", "fingerprint": "a third"}), [], [])
    row = next(r for run_id, r in runs().items() if not run_id.startswith("other"))
    assert row["status"] == "killed" and row["finished_at"] is not None
    assert f"process {proc.pid}" in row["error"] and "died" in row["error"]


def test_no_resume_starts_a_new_run_that_reuses_the_finished_settings_unless_told_not_to(
    tmp_path: Path, index_and_baseline: tuple[Path, Path, list[tuple[object, ...]]]
) -> None:
    index, questions, _ = index_and_baseline
    store = tmp_path / "r.duckdb"
    script = _script(index, questions, store)
    _kill(_run_until_batch(script, 3))
    fresh = script.replace("r = run_sweep(config, comps)", "r = run_sweep(config, comps, resume=False)")
    result = _result(_start(fresh))
    assert not result["resumed"] and result["reused"] == 2 and result["computed"] == N_SETTINGS - 2
    recomputed = _result(_start(fresh.replace("resume=False)", "resume=False, reuse=False)")))
    assert recomputed["reused"] == 0 and recomputed["computed"] == N_SETTINGS
    statuses = sorted(s for _, s in _run_statuses(store))
    assert statuses == ["killed", "ok", "ok"]
    con = duckdb.connect(str(store), read_only=True)
    marked = con.execute(
        "SELECT count(*), count(DISTINCT setting_hash) FROM samples WHERE run_id = ? AND reused_from_run IS NOT NULL",
        [result["run_id"]],
    ).fetchall()[0]
    con.close()
    assert marked == (2 * 4, 2)  # 4 questions x the 2 settings the killed run had finished


def test_adding_a_setting_to_the_grid_computes_only_that_setting(
    tmp_path: Path, index_and_baseline: tuple[Path, Path, list[tuple[object, ...]]]
) -> None:
    index, questions, baseline = index_and_baseline
    store = tmp_path / "r.duckdb"
    first = _result(_start(_script(index, questions, store, top_ks="[1, 2]")))
    assert first["computed"] == 4
    second = _result(_start(_script(index, questions, store)))  # top_ks [1, 2, 3]: two more settings
    assert second["reused"] == 4 and second["computed"] == 2 and not second["resumed"]
    con = duckdb.connect(str(store), read_only=True)
    mine = con.execute(
        f"SELECT setting_name, question_id, {COMPARED} FROM samples WHERE run_id = ? "
        "ORDER BY setting_name, question_id",
        [second["run_id"]],
    ).fetchall()
    con.close()
    assert mine == baseline and len(_rows(store)) == len(baseline) + 4 * 4  # the first run's rows stay too


def _run_statuses(store: Path) -> list[tuple[str, str]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return [(str(a), str(b)) for a, b in con.execute("SELECT run_id, status FROM runs").fetchall()]
    finally:
        con.close()


def test_two_identical_sweeps_started_together_compute_once_and_write_no_duplicate(
    tmp_path: Path, index_and_baseline: tuple[Path, Path, list[tuple[object, ...]]]
) -> None:
    index, questions, baseline = index_and_baseline
    store = tmp_path / "r.duckdb"
    same = _script(index, questions, store)
    other = _script(index, questions, store, top_ks="[4, 5]")
    procs = [_start(same, merge_stderr=True), _start(same, merge_stderr=True), _start(other, merge_stderr=True)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    codes = [p.returncode for p in procs]
    assert codes[2] == 0, outs[2]  # different inputs: waits for the lock between transactions, finishes
    refused = [i for i in (0, 1) if codes[i] != 0]
    for i in refused:  # the one that lost the claim says so in one clear line naming the live run
        assert "over the same inputs is still running" in outs[i], outs[i]
    results = [
        json.loads(line.split(" ", 1)[1]) for i in (0, 1) for line in outs[i].splitlines() if line.startswith("result ")
    ]
    # Never both: the claim is one transaction, so the second either is refused or finds the first finished
    # and copies its settings (reuse) without computing any.
    assert sum(r["computed"] for r in results) == N_SETTINGS, outs
    con = duckdb.connect(str(store), read_only=True)  # never a corrupted file
    per_run = con.execute(
        "SELECT run_id, count(*), count(DISTINCT (setting_hash, question_id)) FROM samples GROUP BY 1"
    ).fetchall()
    statuses = [s for (s,) in con.execute("SELECT status FROM runs").fetchall()]
    con.close()
    assert statuses.count("ok") == 3 - len(refused) and all(n == distinct for _, n, distinct in per_run)
    other_rows = 2 * 2 * 4  # 2 top-k x 2 layouts x 4 questions
    assert sorted(n for _, n, _ in per_run) == sorted([other_rows] + [N_SETTINGS * 4] * (2 - len(refused)))
