"""The command line as users run it: one-line errors, non-zero exits, nothing half-written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from corpus.errors import CribsheetError

CLI = [sys.executable, "-m", "flows.cli"]
ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, tmp: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_LOGGING_LEVEL"}  # as a user's shell has it
    env |= {"PREFECT_HOME": str(tmp / "prefect"), "COLUMNS": "200"} | (extra_env or {})
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def run_with_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with exactly `env` (a machine set up otherwise than the tests' own)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "corpus.jsonl: corpus not found"),
        ('{"id": "a", "text": "ok"}\n{"id": "b", "text": \n', "corpus.jsonl:2: invalid JSON"),
        ('{"id": "a", "text": "ok"}\n{"id": "a", "text": "again"}\n', "corpus.jsonl:2: duplicate document id 'a'"),
    ],
)
def test_bad_corpus_one_line_error_and_no_index(tmp_path: Path, content: str | None, expected: str) -> None:
    corpus = tmp_path / "corpus.jsonl"
    if content is not None:
        corpus.write_text(content)
    proc = run("index", "--corpus", str(corpus), "--index", str(tmp_path / "idx.lancedb"), tmp=tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], proc.stderr
    assert not list(tmp_path.glob("*idx.lancedb*"))
    assert not list((tmp_path / "prefect").glob("*.db"))  # refused before any flow: no Prefect server started


def _refused_sweep(tmp_path: Path, questions_jsonl: str, *flags: str) -> str:
    """A sweep that must stop before any model loads: exit 2, one stderr line (returned), no store."""
    questions = tmp_path / "q.jsonl"
    questions.write_text(questions_jsonl)
    store = tmp_path / "r.duckdb"
    args = ["sweep", "--index", str(tmp_path / "idx"), "--questions", str(questions), "--store", str(store)]
    proc = run(*args, *flags, tmp=tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert not store.exists()
    assert not list((tmp_path / "prefect").glob("*.db"))  # refused before any flow: no Prefect server started
    return lines[0]


def test_bad_question_file_one_line_error_and_no_store(tmp_path: Path, tiny_corpus: Path) -> None:
    line = _refused_sweep(tmp_path, '{"id": "q1", "question": "?", "answers": ["a"]}\n{"id": "q2", "question": "?"}\n')
    assert "q.jsonl:2: field 'answers'" in line


COMMANDS = (
    "precompress", "init", "run", "demo", "dataset", "questions", "report", "gate", "export", "train-scorer",
    "index", "reclaim", "sweep", "warm", "tune-pruning",
)  # fmt: skip
"""Every command, in the order `--help` lists them (the order `flows/cli.py` imports the command modules)."""


def test_help_lists_every_command(tmp_path: Path) -> None:
    proc = run("--help", tmp=tmp_path)
    assert proc.returncode == 0
    listed = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("│ ") and line[2] != " "]
    assert [c for c in listed if c in COMMANDS] == list(COMMANDS), proc.stdout


def test_every_command_module_is_imported_by_the_entry_point() -> None:
    """A new `flows/cli_*.py` module registers its commands only when `flows/cli.py` imports it."""
    import ast

    tree = ast.parse((ROOT / "flows" / "cli.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules = {f"flows.{p.stem}" for p in (ROOT / "flows").glob("cli_*.py")}
    assert modules <= imported, sorted(modules - imported)


def test_help_in_a_pipe_is_readable_not_squeezed(tmp_path: Path) -> None:
    """No terminal and no COLUMNS (a CI log, `| less`): the options' help gets 120 columns, not 80."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH", "PREFECT_LOGGING_LEVEL")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    proc = subprocess.run([*CLI, "sweep", "--help"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    widths = [len(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0 and max(widths) == 120
    assert any("YAML file of this command's settings; flags override it." in line for line in proc.stdout.splitlines())


def test_fresh_machine_without_cache_folder(tmp_path: Path) -> None:
    """No PREFECT_HOME and no cache folder yet: the CLI creates what Prefect needs."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_LOGGING_LEVEL", "PREFECT_HOME")}
    env |= {"CRIBSHEET_CACHE": str(tmp_path / "not" / "there" / "yet")}
    proc = run_with_env(env, "index", "--corpus", str(tmp_path / "c.jsonl"), "--index", str(tmp_path / "i"))
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        f"error: {tmp_path / 'c.jsonl'}: corpus not found"
    ]
    assert (tmp_path / "not" / "there" / "yet" / "prefect").is_dir()


def test_no_prefect_chatter_on_a_machine_without_a_prefect_folder(tmp_path: Path) -> None:
    """A home without ~/.prefect: Prefect's temporary server warned between our lines that it could not write
    its memo store there, and the flow's results landed in ~/.prefect. The gate starts that server, then
    refuses the unknown setting: its one error line is all the output, and nothing lands in the home.
    """
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"HOME": str(home), "CRIBSHEET_CACHE": str(tmp_path / "cache")}
    proc = run_with_env(env, "gate", "--store", str(tmp_path / "r.duckdb"), "--baseline", "a", "--candidate", "b")
    assert proc.returncode == 2
    assert "memo_store" not in proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "error: setting 'a' not found in any run; known: none"
    ], proc.stderr
    assert (tmp_path / "cache" / "prefect" / "memo_store.toml").is_file()  # the server did start and write it
    assert not list(home.iterdir())


def test_seconds_are_printed_for_people() -> None:
    from flows.terminal import seconds as _seconds

    assert _seconds(0.21444082260131836) == "0.214 s"
    assert _seconds(None) == "n/a"


@pytest.mark.parametrize(
    ("flag", "value", "known"),
    [
        ("--compression", "llmlingau:4", "known: engine-lingua, extractive, llmlingua, longllmlingua, none"),
        ("--reranker", "dense2", "known: bi-encoder, cross-encoder, dense, none, query-likelihood"),
        ("--reranker", "cross-encoder", "cross-encoder:MODEL"),
    ],
)
def test_misspelled_component_fails_fast_before_any_model_loads(
    tmp_path: Path, tiny_questions: Path, flag: str, value: str, known: str
) -> None:
    proc = run(
        "sweep",
        "--index",
        str(tmp_path / "idx"),
        "--questions",
        str(tiny_questions),
        "--store",
        str(tmp_path / "r.duckdb"),
        flag,
        value,
        tmp=tmp_path,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and known in lines[0], proc.stderr
    # Nothing was started: no store, no engine log, and no Prefect server ever ran (its database is absent).
    assert not (tmp_path / "r.duckdb").exists() and not (tmp_path / "logs").exists()
    assert not list((tmp_path / "prefect").glob("*.db"))


def test_config_file_with_flag_override_and_named_errors(tmp_path: Path, tiny_questions: Path) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text(
        f"index_path: {tmp_path / 'idx'}\nquestions_path: {tiny_questions}\nstore_path: {tmp_path / 'r.duckdb'}\n"
        "grid:\n  compressions: [{compressor: nope, target_ratio: 2}]\n"
    )
    proc = run("sweep", "--config", str(config), tmp=tmp_path)
    assert proc.returncode == 2 and f"{config}: invalid SweepConfig: grid.compressions.0.compressor" in proc.stderr
    # A flag overrides the file: with a valid compression the next problem is the missing index.
    proc = run("sweep", "--config", str(config), "--compression", "none", tmp=tmp_path)
    assert proc.returncode == 2 and "no index here" in proc.stderr, proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: [1, 2\n")
    proc = run("sweep", "--config", str(bad), tmp=tmp_path)
    assert proc.returncode == 2 and f"{bad}:2: invalid YAML" in proc.stderr, proc.stderr
    assert not list((tmp_path / "prefect").glob("*.db"))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--judge", "vllm", "--judge-url", "http://gpu:8000/v1"], "--judge serves a model itself"),
        (["--judge", "oracle:gpt"], "unknown judge 'oracle'; known: ragas-faithfulness, vllm"),
    ],
)
def test_bad_judge_flags_one_line_error_before_any_model_loads(tmp_path: Path, flags: list[str], expected: str) -> None:
    assert expected in _refused_sweep(tmp_path, '{"id": "q1", "question": "?", "answers": ["a"]}\n', *flags)


def _fake_sweep_config(tmp_path: Path, tiny_corpus: Path, tiny_questions: Path, store: Path) -> Path:
    """A sweep config over a hash-embedded index and the fake generator (registered via CRIBSHEET_PLUGINS)."""
    from corpus.chunk import SentenceChunker
    from corpus.index import sync_index
    from tests.fakes import HashEmbedder
    from tests.helpers import load_documents

    index = tmp_path / "idx.lancedb"
    sync_index(load_documents(tiny_corpus), SentenceChunker(), HashEmbedder(), index)
    config = tmp_path / "sweep.yaml"
    config.write_text(
        f"index_path: {index}\nquestions_path: {tiny_questions}\nstore_path: {store}\nembedder: hash\n"
        "generator: {name: fake}\n"
    )
    return config


@pytest.mark.parametrize("content", [b"col1,col2\n1,2\n", b"DUCK" * 100])
def test_a_broken_results_file_is_one_line_error_before_any_flow_and_left_untouched(
    tmp_path: Path, tiny_corpus: Path, tiny_questions: Path, content: bytes
) -> None:
    store = tmp_path / "r.duckdb"
    store.write_bytes(content)
    config = _fake_sweep_config(tmp_path, tiny_corpus, tiny_questions, store)
    proc = run("sweep", "--config", str(config), tmp=tmp_path, extra_env={"CRIBSHEET_PLUGINS": "tests.fakes"})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "cannot open results store" in lines[0], proc.stderr
    assert store.read_bytes() == content and not list((tmp_path / "prefect").glob("*.db"))


def test_an_unreachable_prefect_api_is_one_line_error_and_nothing_is_written(
    tmp_path: Path, tiny_corpus: Path, tiny_questions: Path
) -> None:
    store = tmp_path / "r.duckdb"
    config = _fake_sweep_config(tmp_path, tiny_corpus, tiny_questions, store)
    unreachable = {"CRIBSHEET_PLUGINS": "tests.fakes", "PREFECT_API_URL": "http://127.0.0.1:9/api"}
    proc = run("sweep", "--config", str(config), tmp=tmp_path, extra_env=unreachable)
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "error" in line]
    assert proc.returncode == 2 and len(lines) == 1 and "Failed to reach API at http://127.0.0.1:9/api" in lines[0]
    assert not store.exists()


def test_tune_pruning_refuses_the_sweeps_own_questions_and_needs_an_index(tmp_path: Path, tiny_questions: Path) -> None:
    """Tuning on the questions a sweep judges would choose the knobs on the evaluation set: refused by content
    (a copy under another name too), exit 2."""
    config = tmp_path / "sweep.yaml"
    config.write_text(
        f"index_path: {tmp_path / 'idx'}\nquestions_path: {tiny_questions}\nstore_path: {tmp_path / 'r.duckdb'}\n"
    )
    copy = tmp_path / "tune-copy.jsonl"
    copy.write_text(tiny_questions.read_text())
    for given in (tiny_questions, copy):
        proc = run("tune-pruning", "--config", str(config), "--questions", str(given), "--limit", "2", tmp=tmp_path)
        assert proc.returncode == 2 and f"are also questions of {tiny_questions}" in proc.stderr, proc.stderr
    flags = ("--index", str(tmp_path / "idx"), "--not-on", str(tiny_questions), "--limit", "2")
    proc = run("tune-pruning", "--questions", str(copy), *flags, tmp=tmp_path)
    assert proc.returncode == 2 and f"are also questions of {tiny_questions}" in proc.stderr, proc.stderr
    proc = run("tune-pruning", "--questions", str(tiny_questions), tmp=tmp_path)
    assert proc.returncode == 2 and "give --index or a sweep --config" in proc.stderr, proc.stderr


def test_gate_until_decided_sweeps_batches_prints_the_decision_and_exits_with_its_code(
    tmp_path: Path, tiny_corpus: Path
) -> None:
    from tests.conftest import write_jsonl
    from tests.eval.test_sequential_gate import POLICY, pool

    questions = write_jsonl(tmp_path / "pool.jsonl", pool())
    config = _fake_sweep_config(tmp_path, tiny_corpus, questions, tmp_path / "unused.duckdb")
    config.write_text(
        config.read_text()
        + "retrieve_n: 4\n"
        + "grid: {compressions: [{compressor: none}, {compressor: halving, target_ratio: 2}], top_ks: [1]}\n"
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    store = tmp_path / "seq.duckdb"
    proc = run(
        "gate", "--until-decided", "--sweep-config", str(config), "--store", str(store), "--policy", str(policy),
        "--baseline", "none-k1-hybrid-dense", "--candidate", "halving-2x-k1-hybrid-dense", "--batch", "20",
        "--max-questions", "100", tmp=tmp_path, extra_env={"CRIBSHEET_PLUGINS": "tests.fakes"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # FAIL: halving mangles the answers the fake reads
    assert "decision: FAIL" in proc.stdout and "answer_contains: fail at n=" in proc.stdout
    assert "┏" not in proc.stdout  # no empty fixed-n table above a sequential decision
    assert list(tmp_path.glob("logs/gate-*.log"))  # the engines' output went to a log, not the terminal


def _shipped_store(tmp_path: Path) -> tuple[Path, Path]:
    """A results store with two runs of one grid, and a policy file: in r1 (80 questions) a top-3 as good as the
    shipped none-k8 and twice as fast passes against it; in r2, the latest, 20 questions decide nothing."""
    import numpy as np

    from eval.store import DuckDBStore
    from tests.eval.test_gate import N, baseline_values, fill
    from tests.eval.test_recommend import SHIPPED_POLICY

    store = DuckDBStore(tmp_path / "r.duckdb")
    base = baseline_values()
    ttft = np.array(base["probe_ttft_s"])
    grid = {"none-k8": base, "none-k3": base | {"probe_ttft_s": (ttft / 2).tolist()}}
    meta: dict[str, dict[str, object]] = {"none-k8": {"top_k": 8}}
    fill(store, "r1", grid, meta=meta)
    fill(store, "r2", grid, questions=[f"q{i}" for i in range(N // 4)], meta=meta)
    policy = tmp_path / "policy.yaml"
    policy.write_text(SHIPPED_POLICY.model_dump_json())  # JSON is YAML
    return store.path, policy


def test_gate_shipped_gates_every_other_setting_ends_with_the_recommendation_and_exits_on_it(tmp_path: Path) -> None:
    import duckdb

    store, policy = _shipped_store(tmp_path)
    flags = ("gate", "--store", str(store), "--policy", str(policy), "--shipped", "none-k8")
    for given_run, verdict, code in ((["--run", "r1"], "ship", 0), ([], "undecided", 2)):  # r2: the latest
        proc = run(*flags, *given_run, tmp=tmp_path)
        lines = proc.stdout.strip().splitlines()
        assert proc.returncode == code, proc.stdout + proc.stderr
        assert lines[-1].startswith(f"recommendation: {verdict} "), proc.stdout
        assert lines[-2].strip().startswith("none-k3 vs none-k8: "), proc.stdout  # each candidate's line above it
    with duckdb.connect(str(store), read_only=True) as con:
        stored = con.execute("SELECT run_id, verdict FROM recommendations ORDER BY run_id").fetchall()
    assert stored == [("r1", "ship"), ("r2", "undecided")]


def test_gate_shipped_refuses_a_candidate_or_baseline_in_one_line(tmp_path: Path) -> None:
    store, policy = _shipped_store(tmp_path)
    flags = ("gate", "--store", str(store), "--policy", str(policy), "--shipped", "none-k8")
    for pair in (["--candidate", "none-k3"], ["--baseline", "none-k8", "--candidate", "none-k3"]):
        proc = run(*flags, *pair, tmp=tmp_path)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and not proc.stdout, proc.stdout + proc.stderr
        drop = ", ".join(flag for flag in ("--baseline", "--candidate") if flag in pair)
        assert lines[0] == f"error: --shipped gates every other setting of the run against none-k8: drop {drop}"


def _nightly_index(index: Path, nights: int, apart: tuple[int, ...] = (1,)) -> list[Any]:
    """An index synced on `nights` nights (one document changed each), with each night's snapshot; the nights
    in `apart` start past reclaim's margin after the one before (LanceDB removes by age)."""
    from corpus.chunk import SentenceChunker
    from corpus.index import sync_index
    from corpus.models import Document
    from corpus.reclaim import MARGIN
    from corpus.snapshot import read_snapshot
    from tests.fakes import HashEmbedder

    snapshots = []
    for night in range(nights):
        if night in apart:
            time.sleep(MARGIN.total_seconds() + 0.5)
        docs = [Document(id=f"d{i}", title="T", text=f"Doc {i} on night {night if i == 0 else 0}.") for i in range(4)]
        sync_index(docs, SentenceChunker(), HashEmbedder(), index)
        snapshots.append(read_snapshot(index))
    return snapshots


def test_reclaim_keeps_the_snapshots_a_store_names(tmp_path: Path) -> None:
    """`cribsheet reclaim` keeps the snapshot a stored run read (here: the second of four) and those after it;
    without a store it refuses unless told `--keep-only-latest`; a store that is not there is a one-line error."""
    from corpus.snapshot import read_snapshot
    from eval.store import DuckDBStore
    from tests.helpers import run_row

    index = tmp_path / "idx.lancedb"
    snaps = _nightly_index(index, 4)
    versions = [s.chunk_version for s in snaps]
    store = tmp_path / "r.duckdb"
    DuckDBStore(store).start_run(
        run_row(index_path=str(index), index_version=versions[1], index_sha256=snaps[1].index_sha256,
                index_build_id=snaps[1].build_id)
    )  # fmt: skip
    proc = run("reclaim", "--index", str(index), "--store", str(store), tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"kept snapshots {versions[1:]} (claimed {versions[1:2]})" in proc.stdout
    assert read_snapshot(index, versions[1]) == snaps[1]
    with pytest.raises(CribsheetError, match=f"chunk version {versions[0]} .* was reclaimed"):
        read_snapshot(index, versions[0])
    proc = run("reclaim", "--index", str(index), tmp=tmp_path)
    assert proc.returncode == 2 and "no --store named" in proc.stderr and "--keep-only-latest" in proc.stderr
    assert read_snapshot(index, versions[1]) == snaps[1]  # refused before anything was removed
    proc = run("reclaim", "--index", str(index), "--store", str(store), "--keep-only-latest", tmp=tmp_path)
    assert proc.returncode == 2 and "not both" in proc.stderr, proc.stderr
    proc = run("reclaim", "--index", str(index), "--store", str(tmp_path / "none.duckdb"), tmp=tmp_path)
    assert proc.returncode == 2 and "none.duckdb: no results store here" in proc.stderr
    proc = run("reclaim", "--index", str(index), "--keep-only-latest", tmp=tmp_path)
    assert proc.returncode == 0 and f"kept snapshots [{versions[-1]}]" in proc.stdout, proc.stderr


def test_reclaim_keeps_the_snapshot_of_a_run_stored_from_another_folder(tmp_path: Path) -> None:
    """A run started in `proj/` stores its index path as the config wrote it, relative (`runs/idx.lancedb`);
    a reclaim run from elsewhere, naming the index by its absolute path, still keeps that run's snapshot: runs
    are matched on the index's build id and digest. A store from before those columns is matched on its path,
    resolved against the store's folder too."""
    from corpus.snapshot import read_snapshot
    from eval.store import DuckDBStore
    from tests.helpers import run_row

    index = tmp_path / "proj" / "runs" / "idx.lancedb"
    snaps = _nightly_index(index, 4, apart=(1, 2))  # the run's snapshot is older than the latest by the margin
    store = tmp_path / "proj" / "results.duckdb"
    snap = snaps[1]
    DuckDBStore(store).start_run(
        run_row(index_path="runs/idx.lancedb", index_version=snap.chunk_version, index_sha256=snap.index_sha256,
                index_build_id=snap.build_id)
    )  # fmt: skip
    legacy = tmp_path / "proj" / "old.duckdb"
    DuckDBStore(legacy).start_run(run_row(index_path="runs/idx.lancedb", index_version=snaps[2].chunk_version))
    assert Path.cwd() != tmp_path / "proj"  # the CLI runs from the repository, not from proj/

    proc = run("reclaim", "--index", str(index), "--store", str(store), "--store", str(legacy), tmp=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert read_snapshot(index, snap.chunk_version) == snap
    assert f"(claimed {[snap.chunk_version, snaps[2].chunk_version]})" in proc.stdout
    with pytest.raises(CribsheetError, match=f"chunk version {snaps[0].chunk_version} .* was reclaimed"):
        read_snapshot(index, snaps[0].chunk_version)


def test_precompress_refuses_a_missing_index_or_no_compression_in_one_line(tmp_path: Path) -> None:
    proc = run("precompress", "--index", str(tmp_path / "none.lancedb"), "--compression", "llmlingua:4", tmp=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "no index here" in lines[0], proc.stderr
    proc = run("precompress", "--index", str(tmp_path / "none.lancedb"), tmp=tmp_path)
    assert proc.returncode == 2 and "--compression" in proc.stderr
    assert not (tmp_path / "none.lancedb").exists()
