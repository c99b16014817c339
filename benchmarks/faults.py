"""The fault suite: every way a run could end with confident but wrong or stale results, provoked on purpose.

Each row names a fault, the outcome the product promises, what was observed, and whether the promise held.
Fake backends (hash embedder, extracting generator, registered like the real ones) keep it to a minute;
the behaviour under test is the run machinery's, not a model's. The cheap rows are tests as well
(tests/eval/test_run_identity.py, test_sweep.py, test_store.py, test_resume.py, test_cli.py); this script
shows them together, through the command line where an exit code is part of the promise.

Usage: python benchmarks/faults.py   (last line: one JSON object with every row's verdict)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.fakes: the fake backends, registered by name

Row = tuple[str, str, str, bool]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`cribsheet ARGS` as a user runs it, with the fake backends registered (CRIBSHEET_PLUGINS)."""
    full = os.environ | {"CRIBSHEET_PLUGINS": "tests.fakes", "COLUMNS": "200"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The error line of a failed command (stage lines of a log without a terminal aside)."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    return lines[0] if len(lines) == 1 else f"{len(lines)} error lines: {proc.stderr[-300:]!r}"


class Suite:
    """A tiny corpus indexed with the hash embedder, questions, and a sweep config over fake backends."""

    def __init__(self, work: Path) -> None:
        from corpus.chunk import SentenceChunker
        from corpus.index import sync_index
        from tests.conftest import TINY_DOCS, TINY_QUESTIONS, write_jsonl
        from tests.fakes import HashEmbedder
        from tests.helpers import load_documents

        self.work = work
        self.corpus = write_jsonl(work / "corpus.jsonl", TINY_DOCS)
        self.questions = write_jsonl(work / "questions.jsonl", TINY_QUESTIONS)
        self.docs = load_documents(self.corpus)
        self.index = work / "index.lancedb"
        sync_index(self.docs, SentenceChunker(), HashEmbedder(), self.index)

    def config(self, store: str, **generator: Any) -> Any:
        from eval.settings import GridConfig, SweepConfig

        return SweepConfig(
            index_path=self.index,
            questions_path=self.questions,
            store_path=self.work / store,
            embedder="hash",
            retrieve_n=4,
            generator={"name": "fake", **generator},
            probe_questions=2,
            grid=GridConfig(compressions=[{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]),
        )

    def config_file(self, config: Any, name: str) -> Path:
        path = self.work / name
        path.write_text(json.dumps(config.model_dump(mode="json")))  # JSON is YAML
        return path


def reindex_then_sweep(s: Suite) -> Row:
    from corpus.chunk import ChunkerConfig, SentenceChunker
    from corpus.index import IndexOptions, sync_index
    from eval.run.sweep import run_sweep
    from tests.fakes import HashEmbedder

    config = s.config("reindex.duckdb")
    n = len(config.grid.expand())
    first, again = run_sweep(config), run_sweep(config, resume=False)
    sync_index(
        s.docs, SentenceChunker(ChunkerConfig(max_tokens=8)), HashEmbedder(), s.index, IndexOptions(rebuild=True)
    )
    after = run_sweep(config, resume=False)
    observed = (
        f"same inputs: {again.settings_reused}/{n} reused; after re-index: {after.settings_reused}/{n} reused, "
        f"{after.settings_computed} computed"
    )
    holds = first.settings_computed == n and again.settings_reused == n and after.settings_reused == 0
    return "re-index with another chunker, then sweep", "100 % reuse before, 0 % after", observed, holds


def rebuild_during_sweep(s: Suite) -> Row:
    from corpus.chunk import ChunkerConfig, SentenceChunker
    from corpus.index import IndexOptions, sync_index
    from eval.run.sweep import run_sweep
    from eval.store import DuckDBStore
    from tests.fakes import HashEmbedder

    columns = "setting_hash, question_id, answer, context_chunk_ids, context_text, prompt_tokens"
    calm = s.config("calm.duckdb")
    run_sweep(calm)

    class Rebuilding(HashEmbedder):
        """Starts a full rebuild of the index the first time the sweep embeds a question."""

        done = False

        def embed_query(self, text: str) -> Any:
            if not Rebuilding.done:
                Rebuilding.done = True
                chunker = SentenceChunker(ChunkerConfig(max_tokens=8))
                sync_index(s.docs, chunker, HashEmbedder(), s.index, IndexOptions(rebuild=True))
            return super().embed_query(text)

    from eval.run.wiring import build_components

    stormy = s.config("stormy.duckdb")
    result = run_sweep(stormy, build_components(stormy, stormy.grid.expand(), embedder=Rebuilding(64)))
    rows = [
        DuckDBStore(p, read_only=True).query(f"SELECT {columns} FROM samples ORDER BY ALL")
        for p in (calm.store_path, stormy.store_path)
    ]
    status = DuckDBStore(stormy.store_path, read_only=True).query("SELECT status FROM runs")[0]["status"]
    observed = f"rebuilt mid-sweep: {Rebuilding.done}; run {status}; rows equal to the calm run: {rows[0] == rows[1]}"
    return (
        "index rebuilt while a sweep reads it",
        "finishes on its snapshot, same rows",
        observed,
        (Rebuilding.done and status == "ok" and rows[0] == rows[1] and result.n_samples == len(rows[0])),
    )


def dead_engine(s: Suite) -> Row:
    from eval.run.sweep import run_sweep
    from eval.run.wiring import build_components
    from eval.store import DuckDBStore
    from flows.pipeline import sweep_flow
    from tests.fakes import ExtractingGenerator

    state = sweep_flow(s.config("dead-flow.duckdb", name="fake-dead"), return_state=True)  # as a deployment runs it
    proc = _cli("sweep", "--config", str(s.config_file(s.config("dead-cli.duckdb", name="fake-dead"), "dead.yaml")))
    config = s.config("dead.duckdb")  # the same inputs; the engine dies under the first setting, then is back
    try:
        run_sweep(config, build_components(config, config.grid.expand(), generator=ExtractingGenerator(fail=True)))
        raised = "nothing"
    except Exception as exc:
        raised = type(exc).__name__
    run = DuckDBStore(config.store_path, read_only=True).query("SELECT status, error FROM runs")[0]
    kept = DuckDBStore(config.store_path, read_only=True).query("SELECT count(*) AS n FROM samples")[0]["n"]
    resumed = run_sweep(config)
    ok = DuckDBStore(config.store_path, read_only=True).query(
        "SELECT count(*) AS n, count(*) FILTER (WHERE status = 'ok') AS ok FROM samples"
    )[0]
    observed = (
        f"Prefect {state.type.value}; CLI exit {proc.returncode} ({_one_line(proc)[:60]}...); library raised "
        f"{raised}, run {run['status']}, {kept} failed rows kept; resume: {resumed.settings_computed} computed, "
        f"{ok['ok']}/{ok['n']} ok"
    )
    holds = (
        state.is_failed()
        and proc.returncode != 0
        and raised == "SettingFailed"
        and run["status"] == "failed"
        and kept > 0
        and resumed.resumed
        and ok["n"] == ok["ok"] > 0
    )
    return "engine dead mid-setting", "run failed, exit != 0, Prefect Failed, resume recomputes", observed, holds


def two_writers(s: Suite) -> Row:
    from eval.store import DuckDBStore

    config = s.config_file(s.config("twins.duckdb"), "twins.yaml")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "sweep", "--config", str(config)],
            cwd=ROOT,
            # Each its own Prefect home: two temporary servers must not migrate one database at once.
            env=os.environ | {"CRIBSHEET_PLUGINS": "tests.fakes", "PREFECT_HOME": str(s.work / f"prefect-{i}")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    store = DuckDBStore(s.work / "twins.duckdb", read_only=True)
    computed = store.query(
        "SELECT count(DISTINCT run_id) AS runs, count(*) AS n, count(DISTINCT (run_id, setting_hash, question_id)) "
        "AS distinct_rows FROM samples WHERE reused_from_run IS NULL"
    )[0]
    refused = sum("over the same inputs is still running" in err for _, err in outs)
    observed = (
        f"exit codes {[p.returncode for p in procs]}, {refused} refused; runs that computed rows: {computed['runs']}; "
        f"duplicate rows: {computed['n'] - computed['distinct_rows']}"
    )
    holds = computed["runs"] == 1 and computed["n"] == computed["distinct_rows"] and 0 in [p.returncode for p in procs]
    return "two identical sweeps started together", "one computes, no duplicate rows", observed, holds


def vanished_host(s: Suite) -> Row:
    from eval.run.provenance import new_run_id
    from eval.run.resume import claim_run
    from eval.store import DuckDBStore
    from eval.store.rows import RunRow
    from tests.eval.test_store import _run

    path = s.work / "vanished.duckdb"

    def row(run_id: str, pid: int, host: str) -> RunRow:
        return _run(run_id).model_copy(update={"fingerprint": "same inputs", "pid": pid, "host": host})

    DuckDBStore(path).start_run(row("ghost", 4242, "a-container-that-no-longer-exists"))
    try:
        claim_run(DuckDBStore(path), row(new_run_id(), os.getpid(), "here"), [], [], stale_after_s=3600)
        early = "taken over at once"
    except Exception as exc:  # refused while the ghost might still be alive
        early = "refused" if "still running" in str(exc) else f"error {exc}"
    claim = claim_run(DuckDBStore(path), row(new_run_id(), os.getpid(), "here"), [], [], stale_after_s=0)
    after = DuckDBStore(path, read_only=True).query("SELECT taken_over_from FROM runs WHERE run_id = 'ghost'")[0]
    observed = f"before the timeout: {early}; after: resumed {claim.run_id}, taken over from {after['taken_over_from']}"
    holds = early == "refused" and claim.run_id == "ghost" and claim.resumed
    return "a run left running by a vanished host", "refused until silent too long, then taken over", observed, holds


def kill_9(s: Suite) -> Row:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/eval/test_resume.py", "-k", "kill_9"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-200:]
    return "kill -9 at random points, then run again", "rows equal an uninterrupted run", summary, proc.returncode == 0


def broken_store(s: Suite) -> Row:
    observed, holds = [], True
    good = s.config("good.duckdb")
    from eval.run.sweep import run_sweep

    run_sweep(good)
    blob = good.store_path.read_bytes()
    for name, data in (("truncated", blob[: len(blob) // 3]), ("not a DuckDB file", b"col1,col2\n1,2\n")):
        bad = s.work / f"{name.replace(' ', '-')}.duckdb"
        bad.write_bytes(data)
        proc = _cli("sweep", "--config", str(s.config_file(good.model_copy(update={"store_path": bad}), "b.yaml")))
        line = _one_line(proc)
        ok = proc.returncode == 2 and line.startswith("error: ") and "cannot open results store" in line
        ok &= bad.read_bytes() == data  # nothing written over it
        observed.append(f"{name}: exit {proc.returncode}, {line[:90]}")
        holds &= ok
    return "results file truncated or not DuckDB", "one-line error, exit 2, file untouched", "; ".join(observed), holds


def prefect_unreachable(s: Suite) -> Row:
    from eval.store import DuckDBStore

    config = s.config("unreachable.duckdb")
    proc = _cli(
        "sweep", "--config", str(s.config_file(config, "u.yaml")), env={"PREFECT_API_URL": "http://127.0.0.1:9/api"}
    )
    line = _one_line(proc)
    consistent = (
        not config.store_path.exists()
        or DuckDBStore(config.store_path, read_only=True).query(
            "SELECT count(*) AS n FROM runs WHERE status = 'running'"
        )[0]["n"]
        == 0
    )
    observed = f"exit {proc.returncode}: {line[:110]}; store consistent: {consistent}"
    holds = proc.returncode == 2 and "Failed to reach API" in line and consistent
    return "Prefect API unreachable when the flow starts", "one-line error, exit 2, store consistent", observed, holds


def prefect_lost_mid_flow(s: Suite) -> Row:
    """A real Prefect server, stopped while the sweep's first setting is generating (the stalling fake
    generator touches a file and waits 5 s); then the same command again on a temporary server."""
    from eval.store import DuckDBStore
    from tests.conftest import TINY_QUESTIONS
    from tests.prefect_server import prefect_server, stop

    stall = s.work / "stalled"
    config = s.config("lost.duckdb", name="fake-stall")
    path = s.config_file(config, "lost.yaml")
    cmd = [sys.executable, "-m", "flows.cli", "sweep", "--config", str(path)]
    with prefect_server(s.work) as (env, server):
        env |= {"PREFECT_LOGGING_LEVEL": "CRITICAL", "COLUMNS": "200", "CRIBSHEET_FAKE_STALL_FILE": str(stall)}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not stall.exists() and proc.poll() is None:
            time.sleep(0.1)
        stop(server)  # the API is gone while the flow runs
        _, stderr = proc.communicate(timeout=600)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    store = DuckDBStore(config.store_path, read_only=True)
    run = store.query("SELECT run_id, status FROM runs")[0]
    per_setting = store.query("SELECT count(*) AS n FROM samples GROUP BY setting_hash")
    whole = all(r["n"] == per_setting[0]["n"] for r in per_setting) if per_setting else True
    del store
    again = _cli("sweep", "--config", str(path), env={"CRIBSHEET_FAKE_STALL_FILE": str(s.work / "again")})
    after = DuckDBStore(config.store_path, read_only=True).query(
        "SELECT count(DISTINCT run_id) AS runs, count(*) AS n, count(*) FILTER (WHERE status = 'ok') AS ok, "
        "(SELECT status FROM runs) AS status FROM samples"
    )[0]
    observed = (
        f"exit {proc.returncode}: {errors[0][:100] if len(errors) == 1 else f'{len(errors)} error lines'}...; run "
        f"{run['status']}, {len(per_setting)} whole settings kept; again: exit {again.returncode}, run "
        f"{after['status']}, {after['ok']}/{after['n']} rows ok in {after['runs']} run"
    )
    holds = (
        proc.returncode == 2
        and len(errors) == 1
        and "lost the Prefect API" in errors[0]
        and run["status"] == "failed"
        and whole
        and again.returncode == 0
        and after["status"] == "ok"
        and after["runs"] == 1
        and after["ok"] == after["n"] == len(config.grid.expand()) * len(TINY_QUESTIONS)
    )
    return "Prefect API lost mid-flow", "one-line error, exit 2, whole settings kept, resume completes", observed, holds


FAULTS: list[Callable[[Suite], Row]] = [
    reindex_then_sweep,
    rebuild_during_sweep,
    dead_engine,
    two_writers,
    vanished_host,
    kill_9,
    broken_store,
    prefect_unreachable,
    prefect_lost_mid_flow,
]


def main() -> None:
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PREFECT_HOME", str(Path(tmp) / "prefect"))
        for fault in FAULTS:
            work = Path(tmp) / fault.__name__
            work.mkdir()
            start = time.perf_counter()
            try:
                rows.append(fault(Suite(work)))
            except Exception as exc:  # a fault that crashes the suite is a row that does not hold
                rows.append((fault.__name__, "(see the fault)", f"crashed: {type(exc).__name__}: {exc}"[:200], False))
            print(f"  {fault.__name__}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    width = max(len(r[0]) for r in rows)
    print(f"{'fault':<{width}}  holds  expected / observed")
    for fault, expected, observed, holds in rows:
        print(f"{fault:<{width}}  {'yes' if holds else 'NO':<5}  {expected}\n{'':<{width}}         {observed}")
    print(
        json.dumps(
            {
                "faults": len(rows),
                "held": sum(r[3] for r in rows),
                "rows": [{"fault": f, "expected": e, "observed": o, "holds": h} for f, e, o, h in rows],
            }
        )
    )


if __name__ == "__main__":
    main()
