from pathlib import Path

import pytest

from corpus.chunk import SentenceChunker
from corpus.embed import HashEmbedder
from corpus.errors import CribsheetError
from corpus.index import build_index, read_spec
from corpus.load import load_documents
from corpus.retrieve import LanceRetriever


@pytest.fixture
def index(tmp_path: Path, tiny_corpus: Path) -> Path:
    path = tmp_path / "idx.lancedb"
    build_index(load_documents(tiny_corpus), SentenceChunker(), HashEmbedder(), path)
    return path


def test_spec_records_embedder_and_chunker(index: Path) -> None:
    spec = read_spec(index)
    assert (spec.embedder, spec.dim, spec.n_documents) == ("hash-64", 64, 5)
    assert spec.chunker["max_words"] == 180
    assert len(spec.corpus_sha256) == 64


@pytest.mark.parametrize("mode", ["hybrid", "vector", "fts"])
def test_retrieval_finds_the_matching_document(index: Path, mode: str) -> None:
    hits = LanceRetriever(index, HashEmbedder(), mode=mode).retrieve("Beatles formed Liverpool", 3)
    assert hits[0].doc_id == "Liverpool"
    assert len(hits) <= 3
    assert hits == sorted(hits, key=lambda h: -h.score)


def test_querying_with_another_embedder_is_refused(index: Path) -> None:
    with pytest.raises(CribsheetError, match="built with embedder 'hash-64'.*'hash-32'"):
        LanceRetriever(index, HashEmbedder(dim=32))


class ExplodingEmbedder(HashEmbedder):
    def embed_documents(self, texts):  # noqa: ANN001, ANN201
        raise RuntimeError("out of memory")


def test_failed_build_keeps_previous_index_and_leaves_no_temp(index: Path, tiny_corpus: Path) -> None:
    before = read_spec(index)
    with pytest.raises(RuntimeError, match="out of memory"):
        build_index(load_documents(tiny_corpus), SentenceChunker(), ExplodingEmbedder(), index, rebuild=True)
    assert read_spec(index) == before
    assert [p.name for p in index.parent.iterdir() if p.name.startswith(".")] == []


def test_failed_first_build_leaves_nothing(tmp_path: Path, tiny_corpus: Path) -> None:
    target = tmp_path / "new.lancedb"
    with pytest.raises(RuntimeError):
        build_index(load_documents(tiny_corpus), SentenceChunker(), ExplodingEmbedder(), target)
    assert list(tmp_path.glob("*new.lancedb*")) == []


def test_same_corpus_and_spec_reuses_the_index(index: Path, tiny_corpus: Path) -> None:
    docs = load_documents(tiny_corpus)
    again = build_index(docs, SentenceChunker(), HashEmbedder(), index)
    assert again.reused
    changed = [docs[0].model_copy(update={"text": docs[0].text + " It was first climbed in 1954."}), *docs[1:]]
    rebuilt = build_index(changed, SentenceChunker(), HashEmbedder(), index)
    assert not rebuilt.reused
    assert rebuilt.spec.corpus_sha256 != again.spec.corpus_sha256
    assert read_spec(index) == rebuilt.spec
