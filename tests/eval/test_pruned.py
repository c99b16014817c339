"""Pruning at the reranker's price: sentence vectors stored at index time, read back at query time."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.chunk import SentenceChunker
from corpus.errors import CribsheetError
from corpus.index import IndexOptions, sync_index
from corpus.sentences import SentenceVectors, chunk_sentences
from eval.compress import COMPRESSORS, CompressorDeps, ExtractiveCompressor
from tests.fakes import CountingEmbedder, HashEmbedder, count_words
from tests.helpers import load_documents


def _index(tmp_path: Path, corpus: Path, sentences: bool) -> Path:
    path = tmp_path / ("with.lancedb" if sentences else "without.lancedb")
    sync_index(
        load_documents(corpus), SentenceChunker(), HashEmbedder(), path, IndexOptions(sentence_vectors=sentences)
    )
    return path


def test_pruned_selects_like_extractive_without_embedding_a_stored_sentence(tmp_path: Path, tiny_corpus: Path) -> None:
    index = _index(tmp_path, tiny_corpus, sentences=True)
    docs = load_documents(tiny_corpus)
    passages = [d.text for d in docs]
    stored = SentenceVectors(index)
    assert stored.available and len(stored.lookup(chunk_sentences(passages))) == len(chunk_sentences(passages))
    emb = CountingEmbedder()
    deps = CompressorDeps(count_tokens=count_words, embedder=emb, index_path=index)
    pruned = COMPRESSORS.build(COMPRESSORS.spec("pruned"), deps)
    question = "Which river flows into the Mediterranean Sea?"
    got = pruned.compress(passages, question, 3.0)
    want = ExtractiveCompressor(count_words, HashEmbedder()).compress(passages, question, 3.0)
    assert (got.texts, got.kept) == (want.texts, want.kept) and got.tokens_out < got.tokens_in
    assert emb.documents_embedded == 0 and pruned.missed == 0  # type: ignore[attr-defined]
    pruned.compress([*passages, "A sentence the index never saw."], question, 3.0)
    assert emb.documents_embedded == 1 and pruned.missed == 1  # type: ignore[attr-defined]


def test_the_agnostic_twin_ignores_the_question(tmp_path: Path, tiny_corpus: Path) -> None:
    index = _index(tmp_path, tiny_corpus, sentences=True)
    passages = [d.text for d in load_documents(tiny_corpus)]
    deps = CompressorDeps(count_tokens=count_words, embedder=HashEmbedder(), index_path=index)
    twin = COMPRESSORS.build(COMPRESSORS.spec("pruned-agnostic"), deps)
    a = twin.compress(passages, "Which river flows into the sea?", 3.0)
    b = twin.compress(passages, "How high is K2?", 3.0)
    assert a.texts == b.texts and not twin.query_aware
    aware = COMPRESSORS.build(COMPRESSORS.spec("pruned"), deps)
    assert aware.query_aware and aware.compress(passages, "How high is K2?", 3.0).texts != a.texts


def test_pruned_needs_an_index_with_sentence_vectors(tmp_path: Path, tiny_corpus: Path) -> None:
    index = _index(tmp_path, tiny_corpus, sentences=False)
    deps = CompressorDeps(count_tokens=count_words, embedder=HashEmbedder(), index_path=index)
    with pytest.raises(CribsheetError, match="--sentence-vectors"):
        COMPRESSORS.build(COMPRESSORS.spec("pruned"), deps)
