"""The indexing work per batch of documents: chunk, measure coverage, embed, lay out as Arrow rows.

`LocalBatches` does it in this process; `RayBatches` on Ray worker actors, each holding its own embedder,
with a bounded number of batches in flight (memory stays flat in corpus size). Either way the index writer
(one process: LanceDB commits are serialised) merges each batch as it comes back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from corpus.chunk import Chunker, ChunkerConfig, SentenceChunker
from corpus.cluster import RayOptions, import_plugins, plugin_modules, ray_cluster, worker_error
from corpus.embed import EMBEDDERS, Embedder
from corpus.errors import CribsheetError
from corpus.models import Chunk, Document
from corpus.sentences import chunk_blocks, contextual_sentence_rows, sentence_rows, unit_rows
from corpus.table import DocCoverage, IndexSpec, indexed_text, table_schema

Batch = list[tuple[Document, str]]
"""Documents to (re)index with their content hash."""
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass
class EmbeddedBatch:
    """A batch ready to merge: its chunk rows (vectors included) and each document's coverage."""

    batch: Batch
    data: Any
    """pyarrow Table in the index schema."""
    coverage: list[DocCoverage]
    sentences: Any = None
    """pyarrow Table (key, vector) of the batch's sentences, when the index stores them."""
    units: Any = None
    """pyarrow Table of the units of the batch's chunks that come from an outline (with the sentences)."""


class BatchPool(Protocol):
    """Turns batches of documents into rows to merge, in any order, lazily."""

    def map(self, batches: Iterable[Batch]) -> Iterator[EmbeddedBatch]:
        """Embedded batches, as they finish."""
        ...


def document_coverage(doc: Document, spans: Sequence[tuple[int, int]]) -> DocCoverage:
    """Words of `doc` that reached the index: the extractor's share (text kept / parser found) times the
    chunker's (words of `doc.text` inside some chunk span / all its words).
    """
    covered = bytearray(len(doc.text))
    for start, end in spans:
        covered[start:end] = b"\x01" * (end - start)
    total = inside = 0
    for m in _WORD.finditer(doc.text):
        total += 1
        inside += covered[m.start()] if m.start() < len(covered) else 0
    parser = doc.parser_words if doc.parser_words is not None else total
    kept = doc.kept_words if doc.kept_words is not None else total
    indexed = round(kept * (inside / total)) if total else 0
    return DocCoverage(doc_id=doc.id, parser_words=parser, indexed_words=min(indexed, parser))


def embed_batch(
    batch: Batch, chunker: Chunker, embedder: Embedder, schema: Any, sentences: str | None = None
) -> EmbeddedBatch:
    """Chunk and embed one batch into rows of the index schema (and its sentences, with `sentences`: the
    index spec's `sentence_pooling`, contextual or isolated).
    """
    import numpy as np
    import pyarrow as pa

    chunks: list[tuple[Chunk, Document, str]] = []
    coverage: list[DocCoverage] = []
    for doc, digest in batch:
        mine = list(chunker.chunk([doc]))
        if mine and sorted(c.position for c in mine) != list(range(len(mine))):
            # a sync finds each document's content hash on its chunk 0 (`corpus.known_docs`)
            raise CribsheetError(
                f"chunker {type(chunker).__name__} numbered the chunks of '{doc.id}' "
                f"{sorted(c.position for c in mine)[:5]}...; a document's chunks are numbered 0, 1, 2, ..."
            )
        coverage.append(document_coverage(doc, [(c.char_start, c.char_end) for c in mine]))
        chunks.extend((c, doc, digest) for c in mine)
    texts = [indexed_text(c) for c, _, _ in chunks]
    rows = units = None
    bare = [c.text for c, _, _ in chunks]
    # Where a chunk's document has an outline, its units follow it: code blocks whole, table rows, kinds.
    blocks = [chunk_blocks(d.outline, c.char_start, c.char_end) for c, d, _ in chunks] if sentences else []
    if sentences == "contextual":  # one forward pass for the chunks and their sentences
        vectors, rows = contextual_sentence_rows(texts, bare, embedder, blocks)
    else:
        vectors = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
        if sentences == "isolated":
            rows = sentence_rows(bare, embedder, blocks)
    if sentences:
        units = unit_rows(bare, blocks)
    vectors = vectors.reshape(len(chunks), embedder.dim)
    data = pa.Table.from_arrays(
        [
            pa.array([c.id for c, _, _ in chunks]),
            pa.array([c.doc_id for c, _, _ in chunks]),
            pa.array([h for _, _, h in chunks]),
            pa.array([c.title for c, _, _ in chunks]),
            pa.array([c.position for c, _, _ in chunks], pa.int32()),
            pa.array([c.char_start for c, _, _ in chunks], pa.int32()),
            pa.array([c.char_end for c, _, _ in chunks], pa.int32()),
            pa.array([c.text for c, _, _ in chunks]),
            pa.array([c.section for c, _, _ in chunks]),
            pa.array(texts),
            pa.array([json.dumps(d.metadata, sort_keys=True, default=str) for _, d, _ in chunks]),
            pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), embedder.dim),
        ],
        schema=schema,
    )
    return EmbeddedBatch(batch, data, coverage, rows, units)


class LocalBatches:
    """Every batch in this process, in order."""

    def __init__(self, chunker: Chunker, embedder: Embedder, spec: IndexSpec) -> None:
        self.chunker, self.embedder, self.schema = chunker, embedder, table_schema(spec)
        self.sentences = spec.sentence_pooling

    def map(self, batches: Iterable[Batch]) -> Iterator[EmbeddedBatch]:
        """Embedded batches, one at a time."""
        for batch in batches:
            yield embed_batch(batch, self.chunker, self.embedder, self.schema, self.sentences)


class IndexWorker:
    """Ray actor: an embedder and a chunker built from their names, embedding one batch per call."""

    def __init__(self, embedder: str, chunker: ChunkerConfig, spec: IndexSpec, plugins: list[str]) -> None:
        from corpus.runtime import quiet_offline_env

        quiet_offline_env()
        import_plugins(plugins)
        self.embedder: Embedder = EMBEDDERS.build(EMBEDDERS.spec(embedder), None)
        mine = (self.embedder.name, self.embedder.dim, getattr(self.embedder, "precision", "float32"))
        if mine != (spec.embedder, spec.dim, spec.precision):
            got = f"{mine[0]} ({mine[1]}, {mine[2]})"
            want = f"{spec.embedder} ({spec.dim}, {spec.precision})"
            raise CribsheetError(f"embedder '{embedder}' builds {got} on this worker; the index wants {want}")
        self.chunker = SentenceChunker(chunker, self.embedder.count_tokens)
        self.schema = table_schema(spec)
        self.sentences = spec.sentence_pooling

    def embed(self, batch: Batch) -> EmbeddedBatch:
        """Chunk and embed one batch."""
        return embed_batch(batch, self.chunker, self.embedder, self.schema, self.sentences)


class RayBatches:
    """Batches spread over Ray worker actors; at most two per worker in flight, merged as they finish."""

    def __init__(self, options: RayOptions, embedder: str, chunker: ChunkerConfig, spec: IndexSpec) -> None:
        self.options, self.embedder, self.chunker, self.spec = options, embedder, chunker, spec

    def map(self, batches: Iterable[Batch]) -> Iterator[EmbeddedBatch]:
        """Embedded batches in submission order (the order one process embeds them in), whichever worker
        finishes first: a sentence two chunks share keeps the vector of its first chunk, as in one process.
        """
        with ray_cluster(self.options) as ray:
            actor = ray.remote(
                num_cpus=self.options.cpus_per_worker,
                num_gpus=self.options.gpus_per_worker,
                max_restarts=1,  # a worker that dies is restarted once and its batch retried
                max_task_retries=2,
            )
            plugins = plugin_modules([(EMBEDDERS, self.embedder)])
            workers = [
                actor(IndexWorker).remote(self.embedder, self.chunker, self.spec, plugins)
                for _ in range(self.options.workers)
            ]
            try:
                yield from self._drain(ray, workers, iter(batches))
            finally:
                for worker in workers:
                    ray.kill(worker)

    def _drain(self, ray: Any, workers: list[Any], batches: Iterator[Batch]) -> Iterator[EmbeddedBatch]:
        pending: dict[Any, tuple[Any, int]] = {}
        done: dict[int, EmbeddedBatch] = {}  # finished out of turn, held until the batches before them are out
        free = [w for w in workers for _ in range(2)]
        submitted = emitted = 0
        exhausted = False
        while True:
            while free and not exhausted and len(done) < 2 * len(workers):  # a slow batch holds few behind it
                batch = next(batches, None)
                if batch is None:
                    exhausted = True
                    break
                worker = free.pop()
                pending[worker.embed.remote(batch)] = (worker, submitted)
                submitted += 1
            while emitted in done:
                yield done.pop(emitted)
                emitted += 1
            if not pending:
                if exhausted:
                    return
                continue
            ready, _ = ray.wait(list(pending), num_returns=1)
            worker, seq = pending.pop(ready[0])
            free.append(worker)
            try:
                done[seq] = ray.get(ready[0])
            except Exception as exc:
                raise worker_error(exc, "while embedding a batch of documents") from None
