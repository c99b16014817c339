"""Sentence vectors at index time: contextual (late chunking, one forward pass) or isolated, and their bill."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corpus.chunk import SentenceChunker
from corpus.index import IndexOptions, read_spec, sync_index
from corpus.models import Document
from corpus.sentences import SentenceVectors, contextual_sentence_rows, sentence_key
from tests.fakes import HashEmbedder

CHUNK = (
    "Heidelberg University is the oldest university in Germany. It was founded in 1386 by Elector Rupert. "
    "The library holds more than six million volumes."
)


def test_one_pass_gives_the_chunk_vector_and_sentence_vectors_that_carry_the_chunk(minilm: Any) -> None:
    indexed = f"Heidelberg University\n{CHUNK}"
    recorded = _RecordsPooling(minilm)
    vectors, rows = contextual_sentence_rows([indexed], [CHUNK], recorded)
    alone = minilm.embed_documents([indexed])
    assert float(vectors[0] @ alone[0]) > 0.995  # the chunk vector is the model's own mean pooling
    assert rows.num_rows == 3
    found = dict(zip(rows.column("key").to_pylist(), rows.column("vector").to_numpy(zero_copy_only=False), strict=True))
    pronoun = "It was founded in 1386 by Elector Rupert."
    contextual = np.asarray(found[sentence_key(pronoun)], dtype=np.float32)
    isolated = minilm.embed_documents([pronoun])[0]
    query = minilm.embed_query("When was Heidelberg University founded?")
    # "It" alone says nothing about Heidelberg; pooled from its chunk's pass, the sentence knows its subject.
    assert float(contextual @ query) > float(isolated @ query) + 0.05
    # Its bill is its share of the pooling beyond the chunk pass (which retrieval pays anyway): one share for
    # all three, adding up to the pooling seconds the embedder reported and less than the whole call took.
    bills = rows.column("seconds").to_pylist()
    assert len(set(bills)) == 1 and sum(bills) == pytest.approx(recorded.pooling, rel=1e-9)
    assert 0 <= recorded.pooling < recorded.call_seconds


class _RecordsPooling:
    """The real embedder, recording the pooling seconds its span call reports and what the call took."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.dim, self.pooling, self.call_seconds = inner, inner.dim, -1.0, 0.0

    def embed_documents_with_spans(self, texts: Sequence[str], spans: Any) -> Any:
        started = time.perf_counter()
        out = self.inner.embed_documents_with_spans(texts, spans)
        self.call_seconds, self.pooling = time.perf_counter() - started, out[2]
        return out

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)  # type: ignore[no-any-return]


class SpanHashEmbedder(HashEmbedder):
    """A hash embedder that pools spans and, like a real model, truncates: text past `limit` characters has
    no tokens, so its spans get None."""

    def __init__(self, limit: int = 10_000) -> None:
        super().__init__()
        self.limit = limit
        self.alone: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.alone.extend(texts)
        return super().embed_documents(texts)

    def embed_documents_with_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> tuple[np.ndarray, list[list[np.ndarray | None]], float]:
        docs = np.stack([self._one(t) for t in texts])
        pooled: list[list[np.ndarray | None]] = [
            [self._one(t[lo:hi]) + docs[i] if hi <= self.limit else None for lo, hi in spans[i]]
            for i, t in enumerate(texts)
        ]
        return docs, pooled, 0.0


def test_a_sentence_past_the_truncation_is_embedded_by_itself_and_billed() -> None:
    embedder = SpanHashEmbedder(limit=80)
    _, rows = contextual_sentence_rows([f"Heidelberg\n{CHUNK}"], [CHUNK], embedder)
    bills = dict(zip(rows.column("key").to_pylist(), rows.column("seconds").to_pylist(), strict=True))
    assert embedder.alone == [
        "It was founded in 1386 by Elector Rupert.",
        "The library holds more than six million volumes.",
    ]
    assert bills[sentence_key("Heidelberg University is the oldest university in Germany.")] == 0.0
    assert rows.num_rows == 3


def test_the_index_spec_says_how_sentence_vectors_were_made_and_a_change_rebuilds(tmp_path: Path) -> None:
    docs = [Document(id="h", title="Heidelberg University", text=CHUNK)]
    path = tmp_path / "idx.lancedb"
    opts = IndexOptions(sentence_vectors=True)
    first = sync_index(docs, SentenceChunker(), HashEmbedder(), path, opts)
    assert read_spec(path).sentence_pooling == "isolated"
    pooling = SpanHashEmbedder()
    second = sync_index(docs, SentenceChunker(), pooling, path, opts)
    assert second.rebuilt and read_spec(path).sentence_pooling == "contextual" and first.rebuilt
    assert pooling.alone == []  # chunks and sentences came from one pass
    stored = SentenceVectors(path).lookup_with_cost(["It was founded in 1386 by Elector Rupert."])[0]
    expected = pooling._one("It was founded in 1386 by Elector Rupert.") + pooling._one(
        f"Heidelberg University\n{CHUNK}"
    )
    assert np.allclose(next(iter(stored.values())), expected, atol=1e-5)
    plain = sync_index(docs, SentenceChunker(), HashEmbedder(), tmp_path / "plain.lancedb", IndexOptions())
    assert plain.rebuilt and read_spec(tmp_path / "plain.lancedb").sentence_pooling is None


GUIDE = """# Streams

## Reading a file

To read a file in chunks, create a read stream:

```js
const fs = require('fs');

const stream = fs.createReadStream('big.txt');
stream.on('data', (chunk) => count += chunk.length);
```

| option | default |
|---|---|
| highWaterMark | 64 KiB |
| encoding | null |

The stream emits end when the file is read. It then closes the descriptor.
"""


def _guide() -> Document:
    from corpus.extract.base import render
    from corpus.extract.markdown import MarkdownExtractor

    rendered = render(MarkdownExtractor().extract(GUIDE.encode(), "guide.md").blocks)
    return Document(id="guide.md", title="Streams", text=rendered.text, outline=rendered.outline)


def test_units_keep_a_code_block_whole_and_cut_a_table_by_rows() -> None:
    from corpus.sentences import unit_spans

    doc = _guide()
    units = [(doc.text[s:e], kind) for s, e, _, kind in unit_spans(doc.text, doc.outline)]
    code = [t for t, kind in units if kind == "code"]
    # The code block has a blank line inside: as plain sentences it would be two paragraphs.
    assert len(code) == 1 and code[0].startswith("const fs") and code[0].endswith("chunk.length);")
    assert [t for t, kind in units if kind == "row"] == [
        "option | default",
        "highWaterMark | 64 KiB",
        "encoding | null",
    ]
    assert ("To read a file in chunks, create a read stream:", "text") in units
    assert ("Reading a file", "heading") in units
    assert units[-2:] == [
        ("The stream emits end when the file is read.", "text"),
        ("It then closes the descriptor.", "text"),
    ]
    plain = [doc.text[s:e] for s, e, _, _ in unit_spans(doc.text)]
    assert len([p for p in plain if "const" in p or "stream.on" in p]) == 2  # no outline: sentences only


def test_the_index_stores_each_chunks_units_and_the_pruned_selector_keeps_them_whole(tmp_path: Path) -> None:
    from eval.compress.pruned import PrunedCompressor
    from eval.compress.pruned_auto import AutoPrunedCompressor, AutoPrunedConfig
    from tests.fakes import count_words

    path = tmp_path / "idx.lancedb"
    doc = _guide()
    sync_index([doc], SentenceChunker(), SpanHashEmbedder(), path, IndexOptions(sentence_vectors=True))
    assert read_spec(path).sentence_units == "structure"
    stored = SentenceVectors(path)
    passage = doc.text  # one short document: one chunk
    (units,) = stored.units([passage])
    kinds = [kind for _, _, _, kind in units]
    assert kinds.count("code") == 1 and kinds.count("row") == 3
    # Every unit has its own stored vector: the compressor embeds nothing at query time.
    found = stored.lookup_with_cost([passage[s:e] for s, e, _, _ in units])[0]
    assert len(found) == len(units)
    # A chunk the index does not know is split into plain sentences.
    assert [k for *_, k in stored.units(["One. Two."])[0]] == ["text", "text"]

    for twin in (True, False):
        pruned = PrunedCompressor(count_words, SpanHashEmbedder(), stored, query_aware=twin)
        for ratio in (1.5, 2.0, 3.0, 6.0):
            kept = pruned.compress([passage], "How do I read a file with a stream?", ratio).texts
            text = kept[0] if kept else ""
            # Kept or dropped whole: never a half code block.
            assert ("const fs" in text) == ("chunk.length);" in text), (twin, ratio, text)
        assert pruned.missed == 0

    # A kept table row brings its header; a kept code block brings its lead-in.
    auto = AutoPrunedCompressor(
        count_words,
        SpanHashEmbedder(),
        stored,
        AutoPrunedConfig(relevance_share=0.01, temperature=0.05, whole_passages=0),
    )
    out = auto.compress([passage], "encoding null", 20.0).texts[0]
    assert "encoding | null" in out and "option | default" in out
    assert "encoding | null\noption" not in out and "option | default\nencoding | null" in out


def test_a_full_rebuild_leaves_no_units_of_the_build_before(tmp_path: Path) -> None:
    path = tmp_path / "idx.lancedb"
    opts = IndexOptions(sentence_vectors=True)
    sync_index([_guide()], SentenceChunker(), SpanHashEmbedder(), path, opts)
    assert SentenceVectors(path).units_table is not None
    plain = Document(id="h", title="Heidelberg University", text=CHUNK)
    sync_index([plain], SentenceChunker(), SpanHashEmbedder(), path, IndexOptions(sentence_vectors=True, rebuild=True))
    assert SentenceVectors(path).units_table is None  # the new build's unit table is empty
    assert [k for *_, k in SentenceVectors(path).units([_guide().text])[0]].count("code") == 0
