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
import signal
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
"""(the fault, the outcome promised, the outcome observed, whether the promise held)"""
SAMPLE_COLUMNS = "setting_hash, question_id, answer, context_chunk_ids, context_text, prompt_tokens"
"""What a sweep answered, from what: compared between a disturbed run and a calm one."""


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


def _python(script: str, *args: str, log: Path) -> subprocess.Popen[str]:
    """`script` in a child Python (argv[1]: the repository, then `args`), stdout and stderr to `log`."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-c", script, str(ROOT), *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True
        )


def _wait_for(proc: subprocess.Popen[str], log: Path, text: str, timeout_s: float = 120.0) -> bool:
    """Whether `text` shows in `proc`'s `log` before it exits or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            return text in log.read_text()
        time.sleep(0.02)
    return True


def _samples(store: Path) -> list[dict[str, Any]]:
    """Every sample of a results store: the columns that say what was answered, from what."""
    from eval.store import DuckDBStore

    return DuckDBStore(store, read_only=True).query(f"SELECT {SAMPLE_COLUMNS} FROM samples ORDER BY ALL")


def _rebuilding_embedder(rebuild: Callable[[], None]) -> Any:
    """The hash embedder, running `rebuild` (a full build of the index the sweep reads) the first time the
    sweep embeds a question: the build commits while the sweep is under way."""
    from tests.fakes import HashEmbedder

    class Rebuilding(HashEmbedder):
        rebuilt = False

        def embed_query(self, text: str) -> Any:
            if not self.rebuilt:
                self.rebuilt = True
                rebuild()
            return super().embed_query(text)

    return Rebuilding()


def _other_sentence_vectors() -> Any:
    """The hash embedder's chunk vectors with other sentence vectors (each sentence's own, negated, pooled
    from the chunk's pass): an index built with it retrieves the same chunks and prunes them otherwise."""
    import numpy as np

    from tests.fakes import HashEmbedder

    class OtherSentenceVectors(HashEmbedder):
        def embed_documents_with_spans(
            self, texts: list[str], spans: list[list[tuple[int, int]]]
        ) -> tuple[np.ndarray, list[list[np.ndarray | None]], float]:
            pooled: list[list[np.ndarray | None]] = [
                [-self._one(text[lo:hi]) for lo, hi in row] for text, row in zip(texts, spans, strict=True)
            ]
            return self.embed_documents(texts), pooled, 0.0

    return OtherSentenceVectors()


def _freeze(proc: subprocess.Popen[str], store: Path) -> None:
    """SIGSTOP `proc` at a moment it holds no lock on the DuckDB file `store` (its heartbeat opens it ten
    times a second): frozen inside a write, it would keep every other process out of the store."""
    import duckdb

    deadline = time.monotonic() + 60
    while True:
        proc.send_signal(signal.SIGSTOP)
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            raise RuntimeError(f"the owner ended instead of stopping (wait status {status})")
        try:
            duckdb.connect(str(store), read_only=True).close()
            return
        except duckdb.IOException:
            if time.monotonic() > deadline:
                raise
            proc.send_signal(signal.SIGCONT)  # frozen inside a heartbeat's write: let it finish, try again
            time.sleep(0.02)


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

    def sentence_index(self, batch_chunks: int = 256) -> Path:
        """The corpus indexed again with sentence vectors (what `pruned` reads), in a folder of its own."""
        from corpus.chunk import SentenceChunker
        from corpus.index import IndexOptions, sync_index
        from tests.fakes import HashEmbedder

        path = self.work / "sentences.lancedb"
        options = IndexOptions(sentence_vectors=True, batch_chunks=batch_chunks)
        sync_index(self.docs, SentenceChunker(), HashEmbedder(), path, options)
        return path

    def config(
        self,
        store: str,
        *,
        index: Path | None = None,
        questions: Path | None = None,
        compressions: list[dict[str, Any]] | None = None,
        probe_questions: int = 2,
        **generator: Any,
    ) -> Any:
        """A sweep config over the fake generator (`generator`: more of its options), with none and halving
        unless `compressions` are named, on the suite's index and questions unless others are named."""
        from eval.settings import SweepConfig

        default = [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]
        return SweepConfig.model_validate(
            {
                "index_path": index or self.index,
                "questions_path": questions or self.questions,
                "store_path": self.work / store,
                "embedder": "hash",
                "retrieve_n": 4,
                "generator": {"name": "fake", **generator},
                "probe_questions": probe_questions,
                "grid": {"compressions": compressions or default},
            }
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
    from eval.run.wiring import build_components
    from eval.store import DuckDBStore
    from tests.fakes import HashEmbedder

    calm = s.config("calm.duckdb")
    run_sweep(calm)

    def rebuild() -> None:
        chunker = SentenceChunker(ChunkerConfig(max_tokens=8))
        sync_index(s.docs, chunker, HashEmbedder(), s.index, IndexOptions(rebuild=True))

    embedder = _rebuilding_embedder(rebuild)
    stormy = s.config("stormy.duckdb")
    result = run_sweep(stormy, build_components(stormy, stormy.grid.expand(), embedder=embedder))
    rows = [_samples(c.store_path) for c in (calm, stormy)]
    status = DuckDBStore(stormy.store_path, read_only=True).query("SELECT status FROM runs")[0]["status"]
    observed = f"rebuilt mid-sweep: {embedder.rebuilt}; run {status}; rows equal to the calm run: {rows[0] == rows[1]}"
    return (
        "index rebuilt while a sweep reads it",
        "finishes on its snapshot, same rows",
        observed,
        (embedder.rebuilt and status == "ok" and rows[0] == rows[1] and result.n_samples == len(rows[0])),
    )


def rebuild_during_pruned_sweep(s: Suite) -> Row:
    """`pruned` reads sentence vectors from the index's side tables. A full rebuild with other sentence
    vectors commits twice while a sweep runs: as it loads its engine, after it pinned its snapshot (minutes
    with vLLM; a reader opened then used to read the newest side tables), and in its first generation."""
    from corpus.chunk import SentenceChunker
    from corpus.index import IndexOptions, sync_index
    from eval.engine.generator import GENERATORS, Generation, Generator, GeneratorDeps
    from eval.run.sweep import run_sweep
    from eval.store import DuckDBStore
    from tests.fakes import ExtractingGenerator, FakeGeneratorConfig

    index = s.sentence_index()
    rebuilds: list[str] = []
    disturbed = False

    def rebuild(when: str) -> None:
        options = IndexOptions(rebuild=True, sentence_vectors=True)
        sync_index(s.docs, SentenceChunker(), _other_sentence_vectors(), index, options)
        rebuilds.append(when)

    class Engine(ExtractingGenerator):
        def generate(self, prompts: Any, json_schema: Any = None) -> list[Generation]:
            if disturbed and len(rebuilds) == 1:
                rebuild("in the first generation")
            return super().generate(prompts, json_schema)

    @GENERATORS.register("fake-rebuilding", FakeGeneratorConfig)
    def _load(config: FakeGeneratorConfig, deps: GeneratorDeps) -> Generator:
        """The fake engine; in the disturbed sweep, the index is rebuilt while it loads and in its first batch."""
        if disturbed:
            rebuild("while the engine loads")
        return Engine()

    pruned = [{"compressor": "pruned", "target_ratio": 2}, {"compressor": "pruned", "target_ratio": 3}]
    calm, stormy, later = (
        s.config(f"{name}.duckdb", index=index, compressions=pruned, name="fake-rebuilding")
        for name in ("calm", "stormy", "later")
    )
    run_sweep(calm)
    disturbed = True
    result = run_sweep(stormy)
    disturbed = False
    run_sweep(later)  # the same sweep, started after the rebuilds: it reads the newest build
    status = DuckDBStore(stormy.store_path, read_only=True).query("SELECT status FROM runs")[0]["status"]
    calm_rows, stormy_rows, later_rows = (_samples(c.store_path) for c in (calm, stormy, later))
    observed = (
        f"rebuilt {' and '.join(rebuilds) or 'never'}; run {status}; rows equal to the calm run: "
        f"{stormy_rows == calm_rows}; a sweep started after the rebuilds prunes otherwise: {later_rows != calm_rows}"
    )
    holds = (
        len(rebuilds) == 2
        and status == "ok"
        and stormy_rows == calm_rows
        and result.n_samples == len(calm_rows)
        and later_rows != calm_rows  # else the rebuilds changed nothing pruned reads: the row would prove nothing
    )
    return "index rebuilt (other sentence vectors) while pruned reads it", "same rows as a calm run", observed, holds


KILLED_REBUILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from corpus.chunk import SentenceChunker
from corpus.index import IndexOptions, sync_index
from corpus.snapshot import uncovered_tables
from tests.fakes import HashEmbedder
from tests.helpers import load_documents

index = Path(sys.argv[3])

class OtherVectors(HashEmbedder):
    def embed_documents(self, texts):
        if uncovered_tables(index):  # the new build's side tables exist, named by no snapshot yet
            print("holding after the first batch", flush=True)
            time.sleep(3600)
        return -super().embed_documents(texts)

options = IndexOptions(rebuild=True, sentence_vectors=True, batch_chunks=1)
sync_index(load_documents(Path(sys.argv[2])), SentenceChunker(), OtherVectors(), index, options)
print("the rebuild finished", flush=True)
"""
"""`cribsheet index --rebuild` with other (negated) vectors under the same embedder name, one document a
batch; it waits, to be killed, once its first batch is written."""


def interrupted_full_rebuild(s: Suite) -> Row:
    from corpus.chunk import SentenceChunker
    from corpus.index import IndexOptions, sync_index
    from corpus.retrieve import LanceRetriever, index_identity
    from corpus.sentences import SentenceVectors, chunk_sentences
    from corpus.snapshot import uncovered_tables
    from tests.fakes import HashEmbedder

    index = s.sentence_index(batch_chunks=1)
    passages = [d.text for d in s.docs]
    sentences = chunk_sentences(passages)

    def committed() -> tuple[Any, ...]:
        """What a reader of the latest snapshot sees: its identity, chunks, sentence vectors and units."""
        stored = SentenceVectors(index)
        vectors = {k: v.tolist() for k, v in stored.lookup_with_cost(sentences)[0].items()}
        chunks = LanceRetriever(index, HashEmbedder()).table.to_arrow().sort_by("chunk_id").to_pylist()
        return index_identity(index), chunks, vectors, stored.units(passages)

    before = committed()
    log = s.work / "rebuild.log"
    proc = _python(KILLED_REBUILD, str(s.corpus), str(index), log=log)
    held = _wait_for(proc, log, "holding after the first batch")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = uncovered_tables(index)
    after = committed()
    parts = ("identity", "chunks", "sentence vectors", "units")
    whole = [name for name, a, b in zip(parts, before, after, strict=True) if a == b]
    report = sync_index(s.docs, SentenceChunker(), HashEmbedder(), index, IndexOptions(sentence_vectors=True))
    observed = (
        f"killed after its first batch: {held} ({len(partial)} partial side tables left); unchanged for readers: "
        f"{', '.join(whole) or 'nothing'} ({len(before[2])} sentence vectors); the next sync "
        f"{'restarted build ' + report.restarted_build if report.restarted_build else 'restarted nothing'}, "
        f"partial tables left after it: {len(uncovered_tables(index))}"
    )
    holds = (
        held
        and bool(partial)  # the build was caught half-written
        and before == after
        and len(before[2]) == len(set(sentences)) > 0
        and report.rebuilt
        and report.restarted_build is not None
        and uncovered_tables(index) == []
        and index_identity(index).build_id != before[0].build_id
    )
    return "full rebuild (sentence vectors) killed mid-way", "last build whole; next sync restarts", observed, holds


def weights_changed_in_place(s: Suite) -> Row:
    from eval.run.sweep import run_sweep

    weights = s.work / "model"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"weights v1")
    config = s.config("weights.duckdb", model=str(weights))  # the fake names the folder, as vLLM would load it
    n = len(config.grid.expand())
    first, again = run_sweep(config), run_sweep(config, resume=False)
    (weights / "model.safetensors").write_bytes(b"weights v2")  # fine-tuned and saved under the same name
    after = run_sweep(config, resume=False)
    observed = (
        f"same weights: {again.settings_reused}/{n} reused; weights rewritten in place: {after.settings_reused}/{n} "
        f"reused, {after.settings_computed} computed"
    )
    holds = (
        first.settings_computed == n
        and again.settings_reused == n
        and after.settings_reused == 0
        and after.settings_computed == n
    )
    return "model weights rewritten in place, same name", "100 % reuse before, 0 % after", observed, holds


OWNER = """
import functools, json, logging, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import eval.run.sweep as sweep
from eval.run.wiring import build_components
from eval.settings import SweepConfig
from tests.fakes import ExtractingGenerator

logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(name)s: %(message)s")
sweep.Heartbeat = functools.partial(sweep.Heartbeat, every_s=0.1)
sweep.claim_run = functools.partial(sweep.claim_run, stale_after_s=1.0)
config = SweepConfig.model_validate_json(Path(sys.argv[2]).read_text())
release = Path(sys.argv[3]) if len(sys.argv) > 3 else None

class Engine(ExtractingGenerator):
    def reset_cache(self):
        if release is not None and len(self.batches) == 2:
            print("holding in setting 2", flush=True)
            while not release.exists():
                time.sleep(0.01)
            raise RuntimeError("engine died while the process was frozen")
        super().reset_cache()

r = sweep.run_sweep(config, build_components(config, config.grid.expand(), generator=Engine()))
print("result", json.dumps({"run_id": r.run_id, "resumed": r.resumed, "kept": r.settings_kept,
                            "computed": r.settings_computed}), flush=True)
"""
"""A sweep (argv[2]: its config) beating every 0.1 s, whose run may be taken over after 1 s of silence (10
minutes in production); with argv[3], its engine is held in setting 2 (setting 1 stored) until that file
exists, then dies."""


def woken_old_owner(s: Suite) -> Row:
    import socket

    from eval.run.sweep import run_sweep
    from eval.store import DuckDBStore

    calm = s.config("calm.duckdb")
    run_sweep(calm)
    config = s.config("owned.duckdb")
    path, release, log = s.config_file(config, "owned.json"), s.work / "release", s.work / "owner.log"
    owner = _python(OWNER, str(path), str(release), log=log)
    try:
        held = _wait_for(owner, log, "holding in setting 2")
        _freeze(owner, config.store_path)  # a laptop put to sleep mid-run
        time.sleep(1.5)  # silent past the stale limit
        taker = subprocess.run(
            [sys.executable, "-c", OWNER, str(ROOT), str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        result = [line for line in taker.stdout.splitlines() if line.startswith("result ")]
        took = json.loads(result[0].removeprefix("result ")) if result else {}
        owner.send_signal(signal.SIGCONT)  # the laptop wakes: its heartbeat beats first, then its engine fails
        beat_refused = _wait_for(owner, log, f"heartbeat of run {took.get('run_id')} refused", timeout_s=30)
        release.touch()
        code = owner.wait(timeout=120)
    finally:
        if owner.poll() is None:
            owner.send_signal(signal.SIGCONT)
            owner.kill()
            owner.wait()
    out = log.read_text().strip().splitlines()
    close_refused = "RuntimeError: engine died while the process was frozen" in log.read_text() and (
        "RunTakenOver" in out[-1] and "taken over" in out[-1]
    )
    runs = DuckDBStore(config.store_path, read_only=True).query(
        "SELECT run_id, status, error, host, pid, taken_over_from FROM runs"
    )
    run = runs[0] if len(runs) == 1 else {}
    same_rows = _samples(config.store_path) == _samples(calm.store_path)
    observed = (
        f"held: {held}; taker exit {taker.returncode}, resumed {took.get('resumed')} ({took.get('kept')} setting "
        f"kept, {took.get('computed')} computed); woken owner: heartbeat refused {beat_refused}, its close "
        f"refused {close_refused}, exit {code} (...{out[-1][-50:] if out else ''}); {len(runs)} run, "
        f"{run.get('status')}, taken over from {run.get('taken_over_from')}; rows equal to a calm run: {same_rows}"
    )
    holds = (
        held
        and taker.returncode == 0
        and took.get("resumed") is True
        and beat_refused
        and close_refused
        and code != 0
        and run.get("status") == "ok"
        and run.get("error") is None
        and run.get("pid") not in (None, owner.pid)
        and run.get("taken_over_from") == f"{owner.pid}@{socket.gethostname()}"
        and same_rows
    )
    return "owner frozen past the stale limit, taken over, woken", "its writes refused; run ok", observed, holds


def probes_on_shared_passages(s: Suite) -> Row:
    from eval.run.sweep import run_sweep
    from eval.store import DuckDBStore
    from tests.conftest import TINY_QUESTIONS, write_jsonl

    shared: list[
        dict[str, Any]
    ] = [  # two more on K2 (the same leading passage), one asked twice (the same whole prompt)
        *TINY_QUESTIONS,
        {"id": "q5", "question": "What is the height of K2?", "answers": ["8,611 metres"], "gold_doc_ids": ["K2"]},
        {"id": "q6", "question": "How high is K2?", "answers": ["8,611 metres"], "gold_doc_ids": ["K2"]},
    ]
    questions = write_jsonl(s.work / "shared.jsonl", shared)
    config = s.config("probes.duckdb", questions=questions, probe_questions=len(shared))
    run_sweep(config)
    store = DuckDBStore(config.store_path, read_only=True)
    warm = store.query("SELECT warm_cached_tokens AS n FROM runs")[0]["n"]
    cached = [
        r["n"] for r in store.query("SELECT probe_cached_tokens AS n FROM samples WHERE probe_ttft_s IS NOT NULL")
    ]
    expected = len(config.grid.expand()) * len(shared)
    more = sum(n != warm for n in cached)
    observed = (
        f"{len(cached)}/{expected} probed; warmed prefix {warm} tokens; cached tokens per probe: "
        f"{sorted(set(cached))}; probes that found other than the prefix cached: {more}"
    )
    holds = warm is not None and warm > 0 and len(cached) == expected and more == 0
    return (
        "probes share a leading passage or a prompt",
        "each probe finds only the warmed prefix cached",
        observed,
        holds,
    )


def noisy_neighbour(s: Suite) -> Row:
    """Two CPU-bound processes, started outside the sweep's process tree as another job is, switched on and
    off on a seeded schedule through a whole sweep (on 2 cores they slow the engine to about a third while
    on). The quiet run decides latency; in the noisy one the load check sees the foreign CPU time and the gate
    gives no latency verdict, naming it, instead of a speed-up measured on a different machine state (the
    A/A twins, exchangeable, would read about 1 either way).
    """
    import random
    import threading

    from eval.gate.policy import GatePolicy, LatencyRule, MetricRule
    from eval.gate.run import gate_each_compressed
    from eval.run.sweep import run_sweep
    from eval.store import DuckDBStore

    policy = GatePolicy(
        min_questions=4,
        metrics=[MetricRule(name="answer_contains", margin=1.0, advisory=True)],
        latency=LatencyRule(min_speedup=1.0, tolerance=0.05, min_probes=4),
    )
    policy_path = s.work / "policy.json"
    policy_path.write_text(policy.model_dump_json())

    def neighbour() -> int:
        """A busy loop its shell leaves behind: not a descendant of this process."""
        cmd = f'{sys.executable} -c "while True: pass" >/dev/null 2>&1 & echo $!'
        return int(subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout)

    def verdicts(store: str, noisy: bool) -> tuple[dict[str, Any], list[str], float | None, list[str]]:
        config = s.config(store, probe_questions=4).model_copy(update={"probe_repeats": 5})
        config = config.model_copy(update={"generator": config.generator.model_copy(update={"name": "fake-cpu"})})
        busy = [neighbour() for _ in range(2)] if noisy else []
        stop = threading.Event()

        def schedule() -> None:  # on 1-3 s, off 1-3 s, from a fixed seed (a block takes about 1 s)
            rng = random.Random(20261204)
            while not stop.is_set():
                for sig in (signal.SIGCONT, signal.SIGSTOP):
                    for pid in busy:
                        os.kill(pid, sig)
                    if stop.wait(rng.uniform(1.0, 3.0)):
                        return

        switcher = threading.Thread(target=schedule, daemon=True)
        switcher.start()
        try:
            result = run_sweep(config, reuse=False)
        finally:
            stop.set()
            switcher.join()
            for pid in busy:
                os.kill(pid, signal.SIGKILL)
        decisions = gate_each_compressed(DuckDBStore(config.store_path), result.run_id, policy_path)
        out = {d.candidate: (d.decision, d.latency.verdict if d.latency else None) for d in decisions}
        reasons = [r for d in decisions for r in d.reasons if "other processes used" in r]
        withheld = [f"{d.candidate}: {r}" for d in decisions if d.latency and d.latency.verdict != "pass"
                    for r in d.reasons if r.startswith("e2e_cold_s")]  # fmt: skip
        return out, reasons, result.load.foreign_load if result.load else None, withheld

    quiet, quiet_reasons, quiet_load, quiet_withheld = verdicts("quiet.duckdb", noisy=False)
    noisy, noisy_reasons, noisy_load, _ = verdicts("noisy.duckdb", noisy=True)
    decided = bool(quiet) and all(v[1] in ("pass", "fail") for v in quiet.values()) and not quiet_reasons
    refused = bool(noisy) and all(v[1] == "undecided" for v in noisy.values()) and len(noisy_reasons) == len(noisy)
    observed = f"quiet {quiet} (foreign load {quiet_load}); noisy {noisy} (foreign load {noisy_load})"
    if not decided:  # why the quiet run withheld, in the row itself (a rerun would not say)
        observed += f"; the quiet run's latency reasons: {quiet_withheld}"
    return (
        "a noisy neighbour switched on and off through a sweep",
        "quiet: latency decided; noisy: no latency verdict, the foreign load named",
        observed,
        decided and refused,
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
    from tests.helpers import run_row

    path = s.work / "vanished.duckdb"

    def row(run_id: str, pid: int, host: str) -> RunRow:
        return run_row(run_id, fingerprint="same inputs", pid=pid, host=host)

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
        env["PREFECT_CLIENT_MAX_RETRIES"] = "1"  # Prefect's default 5 back off for over a minute before failing
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
    store = DuckDBStore(config.store_path, read_only=True)
    after = store.query(
        "SELECT count(DISTINCT run_id) AS runs, count(*) AS n, count(*) FILTER (WHERE status = 'ok') AS ok FROM samples"
    )[0]
    statuses = [r["status"] for r in store.query("SELECT status FROM runs ORDER BY started_at")]
    observed = (
        f"exit {proc.returncode}: {errors[0][:100] if len(errors) == 1 else f'{len(errors)} error lines'}...; run "
        f"{run['status']}, {len(per_setting)} whole settings kept; again: exit {again.returncode}, runs "
        f"{statuses}, {after['ok']}/{after['n']} rows ok in {after['runs']} run"
    )
    holds = (
        proc.returncode == 2
        and len(errors) == 1
        and "lost the Prefect API" in errors[0]
        and run["status"] == "failed"
        and whole
        and again.returncode == 0
        and statuses == ["ok"]  # the failed run was resumed, not left beside a new one
        and after["runs"] == 1
        and after["ok"] == after["n"] == len(config.grid.expand()) * len(TINY_QUESTIONS)
    )
    return "Prefect API lost mid-flow", "one-line error, exit 2, whole settings kept, resume completes", observed, holds


FAULTS: list[Callable[[Suite], Row]] = [
    reindex_then_sweep,
    weights_changed_in_place,
    rebuild_during_sweep,
    rebuild_during_pruned_sweep,
    interrupted_full_rebuild,
    probes_on_shared_passages,
    noisy_neighbour,
    dead_engine,
    two_writers,
    vanished_host,
    woken_old_owner,
    kill_9,
    broken_store,
    prefect_unreachable,
    prefect_lost_mid_flow,
]


def main(argv: list[str]) -> int:
    """Run the faults named in `argv` (every fault when none is named); 1 when a row does not hold."""
    from corpus.runtime import quiet_offline_env

    by_name = {f.__name__: f for f in FAULTS}
    unknown = [name for name in argv if name not in by_name]
    if unknown:
        print(f"error: no fault named {', '.join(unknown)}; the faults are: {', '.join(by_name)}", file=sys.stderr)
        return 2
    faults = [by_name[name] for name in argv] or FAULTS

    quiet_offline_env()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    results: list[tuple[str, Row, float]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PREFECT_HOME", str(Path(tmp) / "prefect"))
        os.environ["CRIBSHEET_CACHE"] = str(Path(tmp) / "cache")  # weights hashes of throwaway files stay here
        for fault in faults:
            work = Path(tmp) / fault.__name__
            work.mkdir()
            start = time.perf_counter()
            try:
                row = fault(Suite(work))
            except Exception as exc:  # a fault that crashes the suite is a row that does not hold
                row = ("(crashed)", "(see the fault)", f"crashed: {type(exc).__name__}: {exc}"[:300], False)
            results.append((fault.__name__, row, time.perf_counter() - start))
            print(f"  {fault.__name__}: {results[-1][2]:.1f} s", file=sys.stderr)
    width = max(len(name) for name, _, _ in results)
    print(f"{'fault':<{width}}  holds  seconds  what / expected / observed")
    for name, (what, expected, observed, holds), seconds in results:
        indent = " " * (width + 18)
        print(f"{name:<{width}}  {'yes' if holds else 'NO':<5}  {seconds:7.1f}  {what}")
        print(f"{indent}expected: {expected}\n{indent}observed: {observed}")
    print(
        json.dumps(
            {
                "faults": len(results),
                "held": sum(row[3] for _, row, _ in results),
                "seconds": round(time.perf_counter() - started, 1),
                "rows": [
                    {"name": n, "fault": f, "expected": e, "observed": o, "holds": h, "seconds": round(t, 1)}
                    for n, (f, e, o, h), t in results
                ],
            }
        )
    )
    return 0 if all(row[3] for _, row, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
