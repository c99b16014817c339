"""A sweep killed with SIGKILL at a random point and run again resumes its run: the rows equal those of an
uninterrupted run, nothing is duplicated, and no finished setting is computed again (counted)."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import threading
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


def _script(
    index: Path,
    questions: Path,
    store: Path,
    top_ks: str = "[1, 2, 3]",
    *,
    hold: str = "",
    release: Path | None = None,
    then_fail: bool = False,
    dawdle_s: float = 0.3,
    setup: str = "",
    run_args: str = "",
) -> str:
    """A sweep over fake components (6 settings); the generator says which batch it is on, then dawdles.

    `hold` stops the child at a known point, after printing a `holding ...` line, until `release` exists
    (never, without one: the parent kills it there): "batch:K" inside setting K's generation, before its rows
    are stored; "stored:K" just after setting K's rows are stored; "reset:K" in the first engine cache reset
    after K batches (before setting K+1's batch: setting K stored, K+1 not), where `then_fail` makes the
    engine fail past the setting, as a dead engine's reset does.
    `setup` is code run before the sweep; `run_args` are more arguments to `run_sweep` (", resume=False").
    """
    return (
        textwrap.dedent(f"""
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

        HOLD = list({hold!r}.partition(":")[::2])
        RELEASE = {str(release) if release else None!r}

        def hold(where):
            print("holding", where, flush=True)  # the parent acts while this process provably waits here
            while not (RELEASE and Path(RELEASE).exists()):
                time.sleep(0.01)
            if {then_fail!r}:
                raise RuntimeError("engine died while held " + where)

        class SlowGenerator(ExtractingGenerator):
            def reset_cache(self):
                if HOLD == ["reset", str(len(self.batches))]:
                    HOLD[:] = []  # once
                    hold(f"in the engine reset after batch {{len(self.batches)}}")
                super().reset_cache()

            def generate(self, prompts, json_schema=None):
                out = super().generate(prompts, json_schema)
                print("batch", len(self.batches), flush=True)
                if HOLD == ["batch", str(len(self.batches))]:
                    hold(f"in batch {{len(self.batches)}}")
                time.sleep({dawdle_s!r})
                return out

        stored = []

        def tick(stage, done, total):
            if stage.startswith("stored "):
                stored.append(stage)
                if HOLD == ["stored", str(len(stored))]:
                    hold(f"after storing setting {{len(stored)}}")

        index = Path({str(index)!r})
        emb = HashEmbedder()
        comps = Components(embedder=emb, retriever=LanceRetriever(index, emb),
                           rerankers={{"dense": DenseReranker(emb)}},
                           compressors={{"none": NoCompressor(count_words)}}, generator=SlowGenerator())
        config = SweepConfig(index_path=index, questions_path=Path({str(questions)!r}),
                             store_path=Path({str(store)!r}), embedder="hash", probe_questions=2, grid=GridConfig(
                                 compressions=[{{"compressor": "none"}}], top_ks={top_ks},
                                 layouts=["ranked", "edges"]))
    """)
        + textwrap.dedent(setup)
        + textwrap.dedent(f"""
        r = run_sweep(config, comps, progress=tick{run_args})
        print("result", json.dumps({{"run_id": r.run_id, "resumed": r.resumed, "kept": r.settings_kept,
                                     "computed": r.settings_computed, "reused": r.settings_reused}}), flush=True)
    """)
    )


def _start(script: str, merge_stderr: bool = False) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    err = subprocess.STDOUT if merge_stderr else None
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, env=env
    )


def _run_until_held(script: str) -> subprocess.Popen[str]:
    """A sweep started and left running until it is held (the script's `hold`): it waits there, provably."""
    proc = _start(script)
    assert proc.stdout is not None
    lines = []
    while (line := proc.stdout.readline()) and not line.startswith("holding "):
        lines.append(line)
    assert line, f"the sweep ended before it was held: {''.join(lines)}"
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
    # Dies inside setting k's generation (rows of k - 1 settings stored) or just after k's rows are stored:
    # the child is held there, provably, when the parent kills it.
    k, where = rng.randint(2, N_SETTINGS - 1), rng.choice(["batch", "stored"])
    _kill(_run_until_held(_script(index, questions, store, hold=f"{where}:{k}")))
    stored = k - 1 if where == "batch" else k

    con = duckdb.connect(str(store), read_only=True)
    (status,) = con.execute("SELECT status FROM runs").fetchall()[0]
    kept_before = con.execute("SELECT count(DISTINCT setting_hash) FROM samples").fetchall()[0][0]
    con.close()
    assert status == "running" and kept_before == stored

    result = _result(_start(_script(index, questions, store)))
    assert result["resumed"] and result["kept"] == stored and result["computed"] == N_SETTINGS - stored
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
    from tests.helpers import run_row

    index, questions, _ = index_and_baseline
    store = tmp_path / "r.duckdb"
    proc = _run_until_held(_script(index, questions, store, hold="batch:2"))
    other = run_row("other").model_copy(update={"fingerprint": "another sweep's inputs"})

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
    _kill(_run_until_held(_script(index, questions, store, hold="batch:3")))  # 2 settings stored
    result = _result(_start(_script(index, questions, store, run_args=", resume=False")))
    assert not result["resumed"] and result["reused"] == 2 and result["computed"] == N_SETTINGS - 2
    recomputed = _result(_start(_script(index, questions, store, run_args=", resume=False, reuse=False")))
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


class _Output:
    """A child's output lines, read on a thread, so that the test waits for a line with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._lines: list[str] = []
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._reader.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                with self._seen:
                    self._lines.append(line)
                    self._seen.notify_all()
        finally:
            with self._seen:
                self._seen.notify_all()

    def text(self) -> str:
        with self._seen:
            return "".join(self._lines)

    def wait_for(self, text: str, timeout_s: float = 120.0) -> None:
        """Until a line holds `text` (a generous deadline: a line that never comes fails, naming it)."""
        with self._seen:
            self._seen.wait_for(lambda: text in "".join(self._lines) or not self._reader.is_alive(), timeout_s)
        assert text in self.text(), f"no {text!r} in the child's output:\n{self.text()}"

    def all(self) -> str:
        """Everything, once the child has closed its output."""
        self._reader.join(timeout=120)
        return self.text()


def _freeze_outside_the_store(proc: subprocess.Popen[str], store: Path) -> dt.datetime:
    """SIGSTOP `proc` at a moment it holds no lock on `store` (its heartbeat opens it several times a second);
    returns its run's last heartbeat, which stays put while it is frozen.
    """
    deadline = time.monotonic() + 60
    while True:
        os.kill(proc.pid, signal.SIGSTOP)
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), f"the sweep ended instead of stopping (status {status})"
        try:
            con = duckdb.connect(str(store), read_only=True)
        except duckdb.IOException as exc:  # frozen inside a heartbeat's transaction: let it finish, try again
            assert "lock" in str(exc).lower() and time.monotonic() < deadline, exc
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.02)
            continue
        try:
            row = con.execute("SELECT heartbeat_at FROM runs").fetchone()
        finally:
            con.close()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]


FAST_HEARTBEAT = """
    import functools, logging
    import eval.run.sweep as sweep
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(name)s: %(message)s")
    sweep.Heartbeat = functools.partial(sweep.Heartbeat, every_s=0.1)
    sweep.claim_run = functools.partial(sweep.claim_run, stale_after_s=1.0)
"""
"""The real heartbeat thread, beating every 0.1 s; a run silent for 1 s may be taken over."""


def test_a_frozen_owner_whose_run_was_taken_over_can_neither_write_to_it_nor_close_it(
    tmp_path: Path, index_and_baseline: tuple[Path, Path, list[tuple[object, ...]]]
) -> None:
    """Process A runs a sweep and is frozen (SIGSTOP: a laptop asleep) past the stale limit; B takes the run
    over and finishes it; A wakes (SIGCONT): its heartbeat is refused, its engine then fails, and its closing
    write (`failed`) is refused too. A exits saying it was taken over; the run is B's, `ok`, rows complete."""
    index, questions, baseline = index_and_baseline
    store, release = tmp_path / "r.duckdb", tmp_path / "release"
    # A is held in the engine reset before setting 2's batch (setting 1 stored), to fail there once released.
    owner = _start(
        _script(index, questions, store, hold="reset:1", release=release, then_fail=True, setup=FAST_HEARTBEAT),
        merge_stderr=True,
    )
    out = _Output(owner)
    try:
        out.wait_for("holding in the engine reset after batch 1")
        last_beat = _freeze_outside_the_store(owner, store)
        while dt.datetime.now(dt.UTC).replace(tzinfo=None) - last_beat < dt.timedelta(seconds=1.5):
            time.sleep(0.05)  # A is frozen: its heartbeat cannot move, only the clock
        taker = _result(_start(_script(index, questions, store, dawdle_s=0.0, setup=FAST_HEARTBEAT)))
        assert taker["resumed"] and taker["kept"] == 1 and taker["computed"] == N_SETTINGS - 1
        os.kill(owner.pid, signal.SIGCONT)
        out.wait_for(f"heartbeat of run {taker['run_id']} refused")  # A's first write after waking
        release.touch()  # now A's engine fails, and A tries to mark the run failed
        assert owner.wait(timeout=120) != 0
    finally:
        if owner.poll() is None:
            os.kill(owner.pid, signal.SIGCONT)
            _kill(owner)
    text = out.all()
    assert "RuntimeError: engine died while held" in text, text
    assert f"RunTakenOver: run {taker['run_id']} is no longer this process's" in text, text
    assert "it was taken over; nothing written" in text.splitlines()[-1], text  # the error it exits with

    con = duckdb.connect(str(store), read_only=True)
    runs = con.execute("SELECT run_id, status, pid, taken_over_from, resumes, error FROM runs").fetchall()
    con.close()
    (run_id, status, pid, taken_from, resumes, error), *others = runs
    assert others == [] and run_id == taker["run_id"]
    assert (status, resumes, error) == ("ok", 1, None) and pid != owner.pid
    assert taken_from == f"{owner.pid}@{socket.gethostname()}"
    assert _rows(store) == baseline  # A's setting 1 and B's five, each once: nothing of A's after waking
