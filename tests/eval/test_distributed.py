"""A sweep sharded over a local Ray cluster of 2 worker processes writes the same rows as one in a single
process (fake components, registered by name, so each worker builds its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from corpus.chunk import SentenceChunker
from corpus.cluster import RayOptions, worker_error
from corpus.errors import CribsheetError
from corpus.index import sync_index
from eval.run.ray_driver import sweep_plugins
from eval.run.sweep import run_sweep
from eval.settings import GridConfig, SweepConfig
from tests.fakes import HashEmbedder
from tests.helpers import load_documents

COMPARED = (
    "setting_hash, question_id, answer, answer_contains, answer_token_recall, context_text, context_chunk_ids, "
    "prompt_tokens, faithfulness, faithfulness_status, status, probe_ttft_s IS NOT NULL AS probed"
)


def _config(tmp_path: Path, corpus: Path, questions: Path, store: str) -> SweepConfig:
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
        generator={"name": "fake"},
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
    # Each probe question measured whole on one worker (every setting, both baselines' twins, every block),
    # the two questions on two workers: a pair never spans two workers or two moments.
    repeats = sharded.probe_repeats
    assert [row[1:] for row in per_question] == [(1, 4, (4 + 2) * repeats)] * 2
    assert sessions == (2,)


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
