"""A sweep sharded over a local Ray cluster of 2 worker processes writes the same rows as one in a single
process (fake components, registered by name, so each worker builds its own); its latency phase measures on
one worker per node and stores each block as it arrives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from corpus.chunk import SentenceChunker
from corpus.cluster import RayOptions, worker_error
from corpus.errors import CribsheetError
from corpus.index import sync_index
from corpus.models import Question
from eval.engine.generator import GENERATORS
from eval.run.identity import hardware_digest
from eval.run.ray_driver import _stream_blocks, like_machines, measuring_nodes, sweep_plugins
from eval.run.sweep import run_sweep
from eval.settings import GridConfig, SweepConfig
from tests.fakes import HashEmbedder
from tests.helpers import load_documents

COMPARED = (
    "setting_hash, question_id, answer, answer_contains, answer_token_recall, context_text, context_chunk_ids, "
    "prompt_tokens, faithfulness, faithfulness_status, status, probe_ttft_s IS NOT NULL AS probed"
)


def _config(tmp_path: Path, corpus: Path, questions: Path, store: str, generator: str = "fake") -> SweepConfig:
    index = tmp_path / "index.lancedb"
    if not index.exists():
        emb = HashEmbedder()
        sync_index(load_documents(corpus), SentenceChunker(), emb, index)
    grid = GridConfig(
        compressions=[{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}], top_ks=[1, 2]
    )
    return SweepConfig(
        index_path=index,
        questions_path=questions,
        store_path=tmp_path / store,
        embedder="hash",
        generator={"name": generator},
        probe_questions=2,
        grid=grid,
    )


def _rows(config: SweepConfig) -> list[tuple[object, ...]]:
    with duckdb.connect(str(config.store_path), read_only=True) as con:
        return con.execute(f"SELECT {COMPARED} FROM samples ORDER BY setting_hash, question_id").fetchall()


@pytest.mark.slow
def test_ray_sweep_on_two_workers_writes_the_rows_of_a_single_process_sweep(
    ray_local: Any, tmp_path: Path, tiny_corpus: Path, tiny_questions: Path
) -> None:
    local = _config(tmp_path, tiny_corpus, tiny_questions, "local.duckdb")
    sharded = _config(tmp_path, tiny_corpus, tiny_questions, "ray.duckdb")
    run_sweep(local, reuse=False)
    result = run_sweep(sharded, reuse=False, ray=RayOptions(workers=2))
    assert result.settings_computed == 4 and result.n_samples == 16
    assert _rows(sharded) == _rows(local)
    assert len(_rows(local)) == 16  # 4 settings x 4 questions, each once
    with duckdb.connect(str(sharded.store_path), read_only=True) as con:
        status, points = con.execute("SELECT status, prefill_fit_points FROM runs").fetchone() or (None, None)
    assert status == "ok" and points == 8  # 2 probe questions x 4 settings, measured in the workers
    with duckdb.connect(str(sharded.store_path), read_only=True) as con:
        per_question = con.execute(
            "SELECT question_id, count(DISTINCT session_id), count(DISTINCT setting_hash), count(*) "
            "FROM latency_slots GROUP BY question_id ORDER BY question_id"
        ).fetchall()
        sessions = con.execute("SELECT count(DISTINCT session_id) FROM latency_slots").fetchone()
        machines = con.execute("SELECT DISTINCT hardware_sha256 FROM latency_slots").fetchall()
    # Each probe question measured whole on one worker (every setting, both baselines' twins, every block), and
    # one node measures on one worker only: the two workers of the answers phase share this node, so one
    # session times every block, with no second engine running beside it.
    repeats = sharded.probe_repeats
    assert [row[1:] for row in per_question] == [(1, 4, (4 + 2) * repeats)] * 2
    assert sessions == (1,)
    assert machines == [(hardware_digest()[1],)]  # every slot carries the digest of the machine that timed it


def _blocks(config: SweepConfig) -> dict[tuple[str, int], tuple[str, int]]:
    """(question, repeat) -> (session, slots) of every stored block."""
    with duckdb.connect(str(config.store_path), read_only=True) as con:
        rows = con.execute(
            "SELECT question_id, repeat, any_value(session_id), count(*) FROM latency_slots GROUP BY ALL"
        ).fetchall()
    return {(q, r): (session, n) for q, r, session, n in rows}


@pytest.mark.slow
def test_a_ray_latency_phase_killed_mid_way_keeps_the_blocks_it_stored_and_resumes_after_them(
    ray_local: Any, tmp_path: Path, tiny_corpus: Path, tiny_questions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(GENERATORS, "_entries", dict(GENERATORS._entries))  # `fake-dies` for this test only
    from tests.eval import ray_faults

    ray_faults.register()
    marker = tmp_path / "die"
    config = _config(tmp_path, tiny_corpus, tiny_questions, "ray.duckdb", generator=f"fake-dies:{marker}")
    # The measuring worker's engine answers the warm-up (one request per setting) and two blocks (4 settings
    # and 2 baseline twins each), then its process dies in the third block.
    marker.write_text(str(4 + 2 * 6))
    with pytest.raises(CribsheetError, match="latency phase"):
        run_sweep(config, reuse=False, ray=RayOptions(workers=2))
    killed = _blocks(config)
    # Every question's first block comes first (2 probe questions), each stored whole as it was measured.
    assert sorted((r, n) for (_, r), (_, n) in killed.items()) == [(0, 6), (0, 6)]
    marker.unlink()
    result = run_sweep(config, reuse=False, ray=RayOptions(workers=2))
    assert result.settings_computed == 0  # the answers were kept; only the phase's missing blocks are measured
    resumed = _blocks(config)
    assert len(resumed) == 2 * config.probe_repeats and {n for _, n in resumed.values()} == {6}
    assert {b: resumed[b] for b in killed} == killed  # the stored blocks were skipped, not measured again
    assert len({session for session, _ in resumed.values()}) == 2


def _question(qid: str) -> Question:
    return Question(id=qid, question=f"what is {qid}?", answers=["x"])


class _Ref:
    """A fake Ray object ref: the call runs when the driver gets it."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call


class _Method:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def remote(self, *args: Any) -> _Ref:
        return _Ref(lambda: self.fn(*args))


class _Worker:
    """A fake measuring actor that fails on the blocks of `fails_on` (a worker killed there)."""

    def __init__(self, fails_on: str | None = None) -> None:
        self.fails_on = fails_on
        self.begin = _Method(lambda *args: None)
        self.measure = _Method(self._measure)

    def _measure(self, question: Question, repeat: int) -> list[tuple[str, int]]:
        if question.id == self.fails_on:
            raise RuntimeError("the actor died unexpectedly")
        return [(question.id, repeat)]


class _FakeRay:
    """Finishes calls in the order they were made."""

    def wait(self, refs: list[_Ref], num_returns: int) -> tuple[list[_Ref], list[_Ref]]:
        return refs[:1], refs[1:]

    def get(self, ref: Any) -> Any:
        return [r.call() for r in ref] if isinstance(ref, list) else ref.call()


class _Store:
    def __init__(self) -> None:
        self.blocks: list[list[tuple[str, int]]] = []

    def add_slots(self, rows: list[tuple[str, int]], owner: Any) -> None:
        self.blocks.append(rows)


def test_the_driver_stores_each_latency_block_as_it_arrives_and_skips_the_stored_ones() -> None:
    store = _Store()
    questions = [_question(q) for q in ("q0", "q1", "q2")]
    _stream_blocks(_FakeRay(), [_Worker(), _Worker()], questions, {("q1", 0)}, 2, [], "s", set(), store, None)
    # One transaction per block; each worker's first blocks before its second ones; (q1, 0) was stored before.
    assert store.blocks == [[("q0", 0)], [("q1", 1)], [("q2", 0)], [("q0", 1)], [("q2", 1)]]


def test_a_failed_latency_worker_loses_only_its_own_block_and_the_phase_stops() -> None:
    store = _Store()
    questions = [_question(q) for q in ("q0", "q1", "q2")]
    with pytest.raises(CribsheetError, match="in the latency phase, on question q1 block 0"):
        _stream_blocks(
            _FakeRay(), [_Worker(), _Worker(fails_on="q1")], questions, set(), 2, [], "s", set(), store, None
        )
    # q0's block was stored before q1 failed, q2's was in flight when it did: stored too; nothing after it.
    assert store.blocks == [[("q0", 0)], [("q2", 0)]]


def test_the_latency_phase_measures_on_each_node_that_fits_a_worker_once() -> None:
    def node(node_id: str, cpu: float, gpu: float = 0.0, alive: bool = True) -> dict[str, Any]:
        return {"NodeID": node_id, "Alive": alive, "Resources": {"CPU": cpu, "GPU": gpu}}

    nodes = [node("b", 8, 1), node("head", 0), node("a", 8, 1), node("c", 8, 0), node("d", 8, 1, alive=False)]
    assert measuring_nodes(nodes, RayOptions(workers=4, gpus_per_worker=1)) == ["a", "b"]
    assert measuring_nodes(nodes, RayOptions(workers=4)) == ["a", "b", "c"]


def test_the_latency_phase_measures_on_like_machines_those_of_its_stored_blocks_first() -> None:
    assert like_machines(["x", "y", "y", None], set()) == "y"  # the most common digest
    assert like_machines(["x", "y", "y"], {"x"}) == "x"  # a resumed phase stays on the machine it began on
    assert like_machines(["x", "y"], {"z"}) == "x"  # a tie: the same choice in every process
    with pytest.raises(CribsheetError, match="hardware digest"):
        like_machines([None], set())


def test_workers_import_the_modules_that_registered_components_outside_cribsheet(
    tmp_path: Path, tiny_corpus: Path, tiny_questions: Path
) -> None:
    config = _config(tmp_path, tiny_corpus, tiny_questions, "x.duckdb")
    assert sweep_plugins(config, config.grid.expand()) == ["tests.fakes"]  # hash, fake, halving; not eval.*


def test_a_worker_failure_is_one_line_naming_the_setting_and_the_original_error() -> None:
    class RayTaskError(Exception):
        cause = ValueError("Traceback (most recent call last):\n  ...\nbad passage")

    err = worker_error(RayTaskError("long"), "on setting none-k8")
    assert isinstance(err, CribsheetError)
    assert str(err) == "Ray worker failed on setting none-k8: ValueError: bad passage"


@pytest.mark.slow
def test_ray_indexing_on_two_workers_writes_the_chunks_of_a_single_process_index(
    ray_local: Any, tmp_path: Path
) -> None:
    """Documents sharded over 2 workers (small batches, so both work) give the same chunks and vectors, and the
    same sentence-vector and unit tables (a sentence shared by chunks keeps one vector either way)."""
    from corpus.index import IndexOptions, open_table
    from corpus.models import Document
    from corpus.snapshot import SIDE_TABLES, latest_snapshot, open_side_table
    from tests.fakes import ContextualHashEmbedder

    # Contextual pooling: a sentence's vector depends on its chunk. Every document shares one sentence, so
    # which chunk's vector it keeps depends on the order batches are written in: one process's order.
    shared = "The shared sentence says the same thing everywhere."
    docs = [
        Document(id=f"d{i}", title=f"Doc {i}", text=f"Sentence {i} about topic {i % 7}. {shared} " * 20)
        for i in range(60)
    ]
    emb = ContextualHashEmbedder()
    opts = IndexOptions(batch_chunks=8, sentence_vectors=True)
    local = sync_index(docs, SentenceChunker(), emb, tmp_path / "local.lancedb", opts)
    sharded = sync_index(
        docs, SentenceChunker(), emb, tmp_path / "ray.lancedb", opts, ray=RayOptions(workers=2),
        embedder_ref="span-hash",
    )  # fmt: skip
    assert (sharded.n_documents, sharded.n_chunks, sharded.added) == (local.n_documents, local.n_chunks, 60)
    assert sharded.indexed_words == local.indexed_words > 0

    def chunks(path: Path) -> list[tuple[object, ...]]:
        table = open_table(path).to_arrow().sort_by("chunk_id")
        return list(
            zip(*(table.column(c).to_pylist() for c in ("chunk_id", "text", "doc_hash", "vector")), strict=True)
        )

    assert chunks(tmp_path / "ray.lancedb") == chunks(tmp_path / "local.lancedb")
    snapshots = {name: latest_snapshot(tmp_path / f"{name}.lancedb") for name in ("local", "ray")}

    def side_rows(name: str, kind: str) -> list[tuple[object, ...]]:
        snap = snapshots[name]
        assert snap is not None
        side = open_side_table(tmp_path / f"{name}.lancedb", snap, kind)
        if side is None:  # no rows of this kind (units come from a document's outline; these have none)
            return []
        table = side.to_arrow().sort_by("key")
        kept = [c for c in table.column_names if c != "seconds"]  # seconds: the embedding time billed, measured
        return list(zip(*(table.column(c).to_pylist() for c in kept), strict=True))

    assert side_rows("local", "sentences")  # the sentence vectors were written
    for kind in SIDE_TABLES:
        assert side_rows("ray", kind) == side_rows("local", kind), kind


def test_ray_indexing_writes_batches_in_submission_order_whichever_worker_finishes_first() -> None:
    """The reorder buffer: batch 1 finishes before batch 0, yet batch 0 is written first (a sentence two
    chunks share then keeps its first chunk's vector, as in one process)."""
    from corpus.index_batch import RayBatches

    class Ref:
        def __init__(self, batch: int) -> None:
            self.batch = batch

    class Worker:
        def __init__(self) -> None:
            self.embed = self

        def remote(self, batch: int) -> Ref:
            return Ref(batch)

    class FakeRay:
        """Finishes the newest submitted batch first: the order a fast second worker gives."""

        def wait(self, refs: list[Ref], num_returns: int) -> tuple[list[Ref], list[Ref]]:
            newest = max(refs, key=lambda r: r.batch)
            return [newest], [r for r in refs if r is not newest]

        def get(self, ref: Ref) -> int:
            return ref.batch

    pool = RayBatches.__new__(RayBatches)
    written = list(pool._drain(FakeRay(), [Worker(), Worker()], iter(range(9))))  # type: ignore[arg-type]
    assert written == list(range(9))
