"""Sentence vectors computed at index time and stored beside the chunks, so query-aware sentence pruning at
query time costs a lookup and a dot product (the `pruned` compressor), not an embedder pass. With an embedder
that can pool spans (`SentenceTransformerEmbedder`), a sentence's vector comes from its chunk's own forward
pass (late chunking): it carries the chunk's context and costs only the pooling (index spec
`sentence_pooling: contextual`); other embedders embed each sentence by itself (`isolated`).

The `sentences` table of the index folder is content-addressed (key = sha256 of the sentence text): a
sentence shared by two chunks is one vector, a deleted document's sentences are harmless leftovers, and
a sentence the table lacks is simply embedded at query time (and counted in the compressor's cost).

What is pruned is a *unit*: where a chunk's document has an outline (a parsed Markdown, rst or HTML file),
a code block whole, a table row, or a sentence of any other block, with its block's kind (`unit_spans`);
the `units` table holds each such chunk's units by the sha256 of its text (index spec
`sentence_units: structure`). A chunk it lacks is cut into plain sentences.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from corpus.embed import Embedder
from corpus.text import sentence_spans

SENTENCE_TABLE = "sentences"
UNIT_TABLE = "units"
"""Per chunk text (content-addressed like the sentences): its selection units and their kinds, where the
chunk's document has an outline (a parsed file). A chunk the table lacks is split into plain sentences."""

Unit = tuple[int, int, bool, str]
"""A selection unit of a chunk text: (start, end, ends its block or paragraph, kind). Kinds: the extractor's
block kinds (text, heading, list, quote, term, signature), `code` (a code block, whole) and `row` (one table
row)."""


def chunk_blocks(outline: Sequence[tuple[int, int, str]], start: int, end: int) -> list[tuple[int, int, str]]:
    """The blocks of a document's outline that overlap the chunk `[start, end)`, clipped to it, as offsets into
    the chunk's text.
    """
    return [(max(s, start) - start, min(e, end) - start, kind) for s, e, kind in outline if s < end and e > start]


def unit_spans(text: str, blocks: Sequence[tuple[int, int, str]] = ()) -> list[Unit]:
    """The selection units of a chunk `text`: a code block whole, a table row by row, and the sentences of
    every other block, each with its block's kind; without `blocks` (a document with no outline), its
    sentences, of kind `text`. The pruning compressors keep or drop a unit whole.
    """

    def sentences(a: int, b: int, kind: str) -> list[Unit]:
        return [(a + s, a + e, last, kind) for s, e, last in sentence_spans(text[a:b])]

    if not blocks:
        return sentences(0, len(text), "text")
    out: list[Unit] = []
    at = 0
    for s, e, kind in sorted(blocks):
        s = max(s, at)
        if s >= e:
            continue
        out += sentences(at, s, "text")  # between blocks: blank lines (or text no block claims)
        body = text[s:e]
        if kind == "code" and body.strip():
            lead = len(body) - len(body.lstrip())
            out.append((s + lead, s + len(body.rstrip()), True, "code"))
        elif kind == "table":
            rows = [(m.start() + s, m.end() + s) for m in re.finditer(r"\S(?:[^\n]*\S)?", body)]
            out += [(a, b, i == len(rows) - 1, "row") for i, (a, b) in enumerate(rows)]
        else:
            out += sentences(s, e, kind)
        at = e
    return out + sentences(at, len(text), "text")


def unit_rows(texts: Sequence[str], blocks: Sequence[Sequence[tuple[int, int, str]]]) -> Any:
    """An Arrow table (key, starts, ends, ends_block, kinds) of the units of the chunk `texts` that have an
    outline (`blocks[i]` empty: plain sentences, nothing stored).
    """
    import pyarrow as pa

    found: dict[str, list[Unit]] = {}
    for text, mine in zip(texts, blocks, strict=True):
        if mine:
            found.setdefault(sentence_key(text), unit_spans(text, mine))
    keys = list(found)
    return pa.Table.from_arrays(
        [
            pa.array(keys, pa.string()),
            pa.array([[u[0] for u in found[k]] for k in keys], pa.list_(pa.int32())),
            pa.array([[u[1] for u in found[k]] for k in keys], pa.list_(pa.int32())),
            pa.array([[u[2] for u in found[k]] for k in keys], pa.list_(pa.bool_())),
            pa.array([[u[3] for u in found[k]] for k in keys], pa.list_(pa.string())),
        ],
        names=["key", "starts", "ends", "ends_block", "kinds"],
    )


def sentence_key(text: str) -> str:
    """Content address of a sentence."""
    return hashlib.sha256(text.strip().encode()).hexdigest()[:24]


def chunk_sentences(texts: Sequence[str], blocks: Sequence[Sequence[tuple[int, int, str]]] | None = None) -> list[str]:
    """Every distinct unit of `texts` (as the pruning compressors split them: `unit_spans`)."""
    outlines = blocks if blocks is not None else [()] * len(texts)
    found = [t[u[0] : u[1]] for t, b in zip(texts, outlines, strict=True) for u in unit_spans(t, b)]
    return list(dict.fromkeys(s for s in found if s.strip()))


def sentence_rows(
    texts: Sequence[str], embedder: Embedder, blocks: Sequence[Sequence[tuple[int, int, str]]] | None = None
) -> Any:
    """An Arrow table (key, vector, seconds) of the units of `texts`, embedded in one call; `seconds` is
    each unit's share of that call: what its vector cost at index time (the `pruned` compressor's bill).
    """
    import pyarrow as pa

    sentences = chunk_sentences(texts, blocks)
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


def contextual_sentence_rows(
    indexed: Sequence[str],
    texts: Sequence[str],
    embedder: Any,
    blocks: Sequence[Sequence[tuple[int, int, str]]] | None = None,
) -> tuple[np.ndarray, Any]:
    """Chunk vectors, and the sentence rows (key, vector, seconds) of the chunks, from one forward pass.

    `indexed[i]` is what chunk i is embedded as (its heading, a newline, its text `texts[i]`). Each sentence's
    vector is the mean of its tokens' vectors in that pass (late chunking): it carries its chunk's context,
    and costs only the pooling beyond the chunk vector that retrieval needs anyway, so `seconds` is each
    sentence's share of the pooling time. A sentence past the model's truncation is embedded by itself and
    billed its share of that call. A sentence found in two chunks keeps its first chunk's vector. The units are
    `unit_spans(texts[i], blocks[i])`: sentences, whole code blocks and table rows.
    """
    import pyarrow as pa

    spans: list[list[tuple[int, int]]] = []
    outlines = blocks if blocks is not None else [()] * len(texts)
    for full, text, outline in zip(indexed, texts, outlines, strict=True):
        if not full.endswith(text):
            raise ValueError("an indexed text must end with its chunk's text")
        shift = len(full) - len(text)
        units = unit_spans(text, outline)
        spans.append([(u[0] + shift, u[1] + shift) for u in units if text[u[0] : u[1]].strip()])
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


class SentenceVectors:
    """Lookup of stored sentence vectors by text, and of chunks' units by text, each in one filtered read,
    from the side tables of one index snapshot: the one whose chunk table is at `version` (the latest
    committed when None), so a reader pinned to a chunk version reads the vectors and units of that build.
    """

    def __init__(self, index_path: Path, version: int | None = None) -> None:
        from corpus.snapshot import open_side_table, read_snapshot

        snapshot = read_snapshot(index_path, version)
        self.chunk_version = snapshot.chunk_version
        self.table = open_side_table(index_path, snapshot, SENTENCE_TABLE)
        units = open_side_table(index_path, snapshot, UNIT_TABLE) if self.table is not None else None
        self.units_table = units if units is not None and units.count_rows() else None

    @property
    def available(self) -> bool:
        """Whether the index was built with sentence vectors."""
        return self.table is not None

    def units(self, passages: Sequence[str]) -> list[list[Unit]]:
        """The selection units of each passage (a chunk text): as stored at index time (code blocks whole, table
        rows, block kinds), or its plain sentences where the index stored none.
        """
        stored: dict[str, list[Unit]] = {}
        if self.units_table is not None and passages:
            keys = {sentence_key(p) for p in passages}
            where = "key IN (" + ", ".join(f"'{k}'" for k in keys) + ")"
            rows = self.units_table.search().where(where).limit(max(1, self.units_table.count_rows())).to_arrow()
            for key, starts, ends, last, kinds in zip(
                *(rows.column(c).to_pylist() for c in ("key", "starts", "ends", "ends_block", "kinds")), strict=True
            ):
                stored[key] = list(zip(starts, ends, last, kinds, strict=True))
        return [stored.get(sentence_key(p)) or unit_spans(p) for p in passages]

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
