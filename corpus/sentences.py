"""Sentence vectors computed at index time and stored beside the chunks, so query-aware sentence pruning at
query time costs a lookup and a dot product (the `pruned` compressor), not an embedder pass. With an embedder
that can pool spans (`SentenceTransformerEmbedder`), a sentence's vector comes from its chunk's own forward
pass (late chunking): it carries the chunk's context and costs only the pooling (index spec
`sentence_pooling: contextual`); other embedders embed each sentence by itself (`isolated`).

The `sentences` table of the index folder is content-addressed (key = sha256 of the sentence text): a
sentence shared by two chunks is one vector, a deleted document's sentences are harmless leftovers, and
a sentence the table lacks is simply embedded at query time (and counted in the compressor's cost).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from corpus.embed import Embedder
from corpus.text import sentence_spans

SENTENCE_TABLE = "sentences"


def sentence_key(text: str) -> str:
    """Content address of a sentence."""
    return hashlib.sha256(text.strip().encode()).hexdigest()[:24]


def chunk_sentences(texts: Sequence[str]) -> list[str]:
    """Every distinct sentence of `texts` (as the pruning compressor splits them)."""
    found = [t[s:e] for t in texts for s, e, _ in sentence_spans(t)]
    return list(dict.fromkeys(s for s in found if s.strip()))


def sentence_rows(texts: Sequence[str], embedder: Embedder) -> Any:
    """An Arrow table (key, vector, seconds) of the sentences of `texts`, embedded in one call; `seconds` is
    each sentence's share of that call: what its vector cost at index time (the `pruned` compressor's bill).
    """
    import pyarrow as pa

    sentences = chunk_sentences(texts)
    start = time.perf_counter()
    vectors = np.asarray(embedder.embed_documents(sentences), dtype=np.float32).reshape(len(sentences), embedder.dim)
    share = (time.perf_counter() - start) / max(1, len(sentences))
    return pa.Table.from_arrays(
        [
            pa.array([sentence_key(s) for s in sentences]),
            pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), embedder.dim),
            pa.array([share] * len(sentences), type=pa.float64()),
        ],
        names=["key", "vector", "seconds"],
    )


def contextual_sentence_rows(indexed: Sequence[str], texts: Sequence[str], embedder: Any) -> tuple[np.ndarray, Any]:
    """Chunk vectors, and the sentence rows (key, vector, seconds) of the chunks, from one forward pass.

    `indexed[i]` is what chunk i is embedded as (its heading, a newline, its text `texts[i]`). Each sentence's
    vector is the mean of its tokens' vectors in that pass (late chunking): it carries its chunk's context,
    and costs only the pooling beyond the chunk vector that retrieval needs anyway, so `seconds` is each
    sentence's share of the pooling time. A sentence past the model's truncation is embedded by itself and
    billed its share of that call. A sentence found in two chunks keeps its first chunk's vector.
    """
    import pyarrow as pa

    spans: list[list[tuple[int, int]]] = []
    for full, text in zip(indexed, texts, strict=True):
        if not full.endswith(text):
            raise ValueError("an indexed text must end with its chunk's text")
        shift = len(full) - len(text)
        spans.append([(s + shift, e + shift) for s, e, _ in sentence_spans(text) if text[s:e].strip()])
    vectors, pooled, pooling = embedder.embed_documents_with_spans(list(indexed), spans)
    found: dict[str, np.ndarray | None] = {}
    for full, mine, got in zip(indexed, spans, pooled, strict=True):
        for (s, e), vector in zip(mine, got, strict=True):
            if found.get(full[s:e]) is None:
                found[full[s:e]] = vector
    contextual = sum(v is not None for v in found.values())
    seconds = dict.fromkeys((k for k, v in found.items() if v is not None), pooling / max(1, contextual))
    alone = [k for k, v in found.items() if v is None]
    if alone:  # past the truncation: embedded by themselves, billed in full
        start = time.perf_counter()
        extra = np.asarray(embedder.embed_documents(alone), dtype=np.float32).reshape(len(alone), embedder.dim)
        share = (time.perf_counter() - start) / len(alone)
        found.update(zip(alone, extra, strict=True))
        seconds.update(dict.fromkeys(alone, share))
    keys = list(found)
    matrix = np.asarray([found[k] for k in keys], dtype=np.float32).reshape(len(keys), embedder.dim)
    rows = pa.Table.from_arrays(
        [
            pa.array([sentence_key(k) for k in keys]),
            pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), embedder.dim),
            pa.array([seconds[k] for k in keys], type=pa.float64()),
        ],
        names=["key", "vector", "seconds"],
    )
    return np.asarray(vectors, dtype=np.float32), rows


def can_pool_sentences(embedder: Any) -> bool:
    """Whether `embedder` gives contextual span vectors from its document pass (late chunking)."""
    return callable(getattr(embedder, "embed_documents_with_spans", None))


def open_sentences(db: Any) -> Any:
    """The sentence table of a LanceDB connection, or None when the index has none."""
    try:
        return db.open_table(SENTENCE_TABLE)
    except (ValueError, FileNotFoundError):
        return None


class SentenceVectors:
    """Lookup of stored sentence vectors by text, in one filtered read per call."""

    def __init__(self, index_path: Path) -> None:
        import lancedb

        self.table = open_sentences(lancedb.connect(str(index_path)))
        if self.table is not None:  # pinned: a rebuild during the sweep writes a version this reader never sees
            self.table.checkout(self.table.version)

    @property
    def available(self) -> bool:
        """Whether the index was built with sentence vectors."""
        return self.table is not None

    def lookup(self, sentences: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors of `sentences` by text (absent ones are left out)."""
        return self.lookup_with_cost(sentences)[0]

    def lookup_with_cost(self, sentences: Sequence[str]) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Stored vectors of `sentences` by text, and what each cost to embed at index time (absent ones are
        left out; an index from before the bill was stored reports no cost, 0).
        """
        if self.table is None or not sentences:
            return {}, {}
        keys = {sentence_key(s): s for s in sentences}
        where = "key IN (" + ", ".join(f"'{k}'" for k in keys) + ")"
        # Every match, however many copies a key has: the limit is only an upper bound for a filtered scan.
        everything = max(1, self.table.count_rows())
        billed = "seconds" in self.table.schema.names
        columns = ["key", "vector", "seconds"] if billed else ["key", "vector"]
        rows = self.table.search().where(where).select(columns).limit(everything).to_arrow()
        found: dict[str, np.ndarray] = {}
        vectors = rows.column("vector").to_numpy(zero_copy_only=False)
        for key, vector in zip(rows.column("key").to_pylist(), vectors, strict=True):
            found[keys[key]] = np.asarray(vector, dtype=np.float32)
        costs = dict.fromkeys(found, 0.0)
        if billed:
            for key, seconds in zip(rows.column("key").to_pylist(), rows.column("seconds").to_pylist(), strict=True):
                costs[keys[key]] = float(seconds or 0.0)
        return found, costs


def add_sentences(db: Any, sentences: Any, rows: Any, full: bool) -> Any:
    """A batch's sentence vector rows into the content-addressed `sentences` table (created on first use); the
    table. The first batch of a full build writes a new version of the table: readers pinned to an earlier
    one keep its vectors.
    """
    first = sentences is None
    if sentences is None:
        sentences = open_sentences(db)
    if sentences is None or (full and first):  # a full build: a new version (the embedder may have changed)
        return db.create_table(SENTENCE_TABLE, data=rows, mode="overwrite")
    if "seconds" not in sentences.schema.names:  # a table from before the index-time bill was stored
        rows = rows.drop_columns(["seconds"])
    if full:  # a fresh table: duplicates across batches are few and harmless (content-addressed)
        sentences.add(rows)
    else:  # an incremental sync re-embeds changed documents: keep one row per sentence
        sentences.merge_insert("key").when_not_matched_insert_all().execute(rows)
    return sentences
