"""Sentence vectors at index time: contextual (late chunking, one forward pass) or isolated, and their bill."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

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
    vectors, rows = contextual_sentence_rows([indexed], [CHUNK], minilm)
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
    # Its bill is its share of the pooling beyond the chunk pass: one share for all three, and far below what
    # embedding the sentences by themselves costs (measured right after, so a busy machine slows both).
    bills = rows.column("seconds").to_pylist()
    started = time.perf_counter()
    minilm.embed_documents(["Heidelberg University is the oldest university in Germany.", pronoun])
    assert len(set(bills)) == 1 and 0 <= sum(bills) < 0.5 * (time.perf_counter() - started)


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
    stored = SentenceVectors(path).lookup(["It was founded in 1386 by Elector Rupert."])
    expected = pooling._one("It was founded in 1386 by Elector Rupert.") + pooling._one(
        f"Heidelberg University\n{CHUNK}"
    )
    assert np.allclose(next(iter(stored.values())), expected, atol=1e-5)
    plain = sync_index(docs, SentenceChunker(), HashEmbedder(), tmp_path / "plain.lancedb", IndexOptions())
    assert plain.rebuilt and read_spec(tmp_path / "plain.lancedb").sentence_pooling is None
