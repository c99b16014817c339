"""Incremental sync, build spec, crash safety, ANN threshold, and retrieval over the index."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corpus.chunk import SentenceChunker
from corpus.errors import CribsheetError
from corpus.index import REPORT_FILE, IndexOptions, IndexReport, open_table, read_spec, sync_index
from corpus.models import Document
from corpus.retrieve import LanceRetriever
from tests.conftest import TINY_DOCS
from tests.fakes import HashEmbedder
from tests.helpers import load_documents


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded.extend(texts)
        return super().embed_documents(texts)


class ExplodingEmbedder(HashEmbedder):
    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("out of memory")


def sync(docs: list[Document], path: Path, embedder: HashEmbedder | None = None, **opts: Any) -> IndexReport:
    return sync_index(docs, SentenceChunker(), embedder or HashEmbedder(), path, IndexOptions(**opts))


@pytest.fixture
def docs(tiny_corpus: Path) -> list[Document]:
    return load_documents(tiny_corpus)


@pytest.fixture
def index(tmp_path: Path, docs: list[Document]) -> Path:
    path = tmp_path / "idx.lancedb"
    sync(docs, path)
    return path


def test_first_build_records_spec_and_report(index: Path) -> None:
    spec = read_spec(index)
    assert (spec.embedder, spec.dim, spec.chunker["max_tokens"]) == ("hash-64", 64, 200)
    report = json.loads((index / REPORT_FILE).read_text())
    assert (report["rebuilt"], report["added"], report["n_documents"]) == (True, 5, 5)
    row = open_table(index).search().where("doc_id = 'K2'").limit(1).to_list()[0]
    assert row["char_start"] == 0 and row["char_end"] == len(TINY_DOCS[0]["text"])


def test_incremental_sync_embeds_only_what_changed(index: Path, docs: list[Document]) -> None:
    before = open_table(index).version
    changed = docs[0].model_copy(update={"text": docs[0].text + " It was first climbed in 1954."})
    new = Document(id="Rome", title="Rome", text="Rome is the capital city of Italy.")
    current = [changed, *docs[1:3], docs[4], new]  # docs[3] (Paris) deleted
    embedder = CountingEmbedder()
    report = sync(current, index, embedder)
    assert (report.added, report.changed, report.deleted, report.unchanged) == (1, 1, 1, 3)
    assert not report.rebuilt and report.version > before
    assert sorted(t.split("\n")[0] for t in embedder.embedded) == ["K2", "Rome"]
    table = open_table(index)
    assert sorted(set(table.to_arrow().column("doc_id").to_pylist())) == ["Asia", "K2", "Liverpool", "Nile", "Rome"]
    k2 = table.search().where("doc_id = 'K2'").limit(5).to_list()
    assert len(k2) == 1 and k2[0]["text"].endswith("1954.")
    again = sync(current, index, CountingEmbedder())
    assert again.reused and again.unchanged == 5 and again.version == report.version


def test_crash_mid_sync_keeps_previous_version_readable(index: Path, docs: list[Document]) -> None:
    version = open_table(index).version
    changed = [d.model_copy(update={"text": d.text + " Changed."}) for d in docs]
    with pytest.raises(RuntimeError, match="out of memory"):
        sync(changed, index, ExplodingEmbedder())
    table = open_table(index)
    assert table.version == version and table.count_rows() == 5
    assert LanceRetriever(index, HashEmbedder()).retrieve("Beatles Liverpool", 1)[0].doc_id == "Liverpool"


def test_failed_first_build_leaves_nothing(tmp_path: Path, docs: list[Document]) -> None:
    with pytest.raises(RuntimeError):
        sync(docs, tmp_path / "new.lancedb", ExplodingEmbedder())
    assert list(tmp_path.glob("*new.lancedb*")) == []


def test_changed_chunker_or_rebuild_flag_rebuilds(index: Path, docs: list[Document]) -> None:
    from corpus.chunk import ChunkerConfig

    report = sync_index(docs, SentenceChunker(ChunkerConfig(max_tokens=8)), HashEmbedder(), index)
    assert report.rebuilt and read_spec(index).chunker["max_tokens"] == 8
    assert sync(docs, index, rebuild=True).rebuilt


class HalfPrecisionHashEmbedder(HashEmbedder):
    precision = "bfloat16"


def test_changed_embedder_precision_rebuilds(index: Path, docs: list[Document]) -> None:
    assert read_spec(index).precision == "float32"
    assert not sync(docs, index).rebuilt
    report = sync(docs, index, HalfPrecisionHashEmbedder())
    assert report.rebuilt and read_spec(index).precision == "bfloat16"


def test_bfloat16_minilm_matches_float32() -> None:
    """The automatic bfloat16 embedder (where the CPU computes it natively) keeps the float32 geometry."""
    import numpy as np

    from corpus.embed import SentenceTransformerEmbedder, cpu_computes_bf16

    texts = [d["text"] for d in TINY_DOCS]
    full = SentenceTransformerEmbedder(device="cpu", precision="float32")
    auto = SentenceTransformerEmbedder(device="cpu")
    assert auto.precision == ("bfloat16" if cpu_computes_bf16() else "float32")
    a, b = full.embed_documents(texts), auto.embed_documents(texts)
    assert a.dtype == b.dtype == np.float32
    assert float((a * b).sum(axis=1).min()) > 0.99
    assert float(auto.embed_query("mountain") @ full.embed_query("mountain")) > 0.99
    with pytest.raises(CribsheetError, match="precision 'int8'"):
        SentenceTransformerEmbedder(device="cpu", precision="int8")


def test_duplicate_ids_in_a_stream_are_an_error(tmp_path: Path, docs: list[Document]) -> None:
    with pytest.raises(CribsheetError, match="duplicate document id 'K2'"):
        sync([docs[0], docs[0]], tmp_path / "dup.lancedb")


def test_ann_index_built_above_threshold(tmp_path: Path) -> None:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    many = [
        Document(id=f"d{i}", text=f"{words[i % 12]} {words[(i * 7) % 12]} document number {i}.") for i in range(300)
    ]
    small = sync(many[:50], tmp_path / "small.lancedb", ann_threshold=100)
    big = sync(many, tmp_path / "big.lancedb", ann_threshold=100)
    assert (small.ann_index, big.ann_index) == (False, True)
    assert LanceRetriever(tmp_path / "big.lancedb", HashEmbedder()).retrieve("document number 7", 5, "fts")


@pytest.mark.parametrize("mode", ["hybrid", "vector", "fts"])
def test_retrieval_finds_the_matching_document(index: Path, mode: str) -> None:
    hits = LanceRetriever(index, HashEmbedder()).retrieve("Beatles formed Liverpool", 3, mode)
    assert hits[0].doc_id == "Liverpool"
    assert len(hits) <= 3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_querying_with_another_embedder_is_refused(index: Path) -> None:
    with pytest.raises(CribsheetError, match="built with embedder 'hash-64'.*'hash-32'"):
        LanceRetriever(index, HashEmbedder(dim=32))


def test_retriever_is_pinned_to_a_version(index: Path, docs: list[Document], tmp_path: Path) -> None:
    pinned = LanceRetriever(index, HashEmbedder())
    digest = pinned.corpus_digest()
    sync([*docs, Document(id="Rome", text="Rome is the capital of Italy.")], index)
    assert pinned.corpus_digest() == digest
    assert "Rome" not in {h.doc_id for h in pinned.retrieve("capital of Italy", 10, "fts")}
    fresh = LanceRetriever(index, HashEmbedder())
    assert fresh.version > pinned.version and fresh.corpus_digest() != digest
    assert fresh.retrieve("capital of Italy", 1, "fts")[0].doc_id == "Rome"


_HYBRID_QUERY = """
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
if sys.argv[2] == "quiet":
    from corpus.runtime import quiet_offline_env
    quiet_offline_env()
from tests.fakes import HashEmbedder
from corpus.retrieve import LanceRetriever
print(LanceRetriever(Path(sys.argv[1]), HashEmbedder()).retrieve("second-highest mountain", 2, "hybrid")[0].doc_id)
"""


def test_quiet_defaults_silence_lancedb_per_query_notes(index: Path) -> None:
    """LanceDB logs a deprecation note per hybrid query unless LANCEDB_LOG is set before it loads."""
    import os
    import subprocess
    import sys

    from corpus.runtime import QUIET_OFFLINE_DEFAULTS

    env = {k: v for k, v in os.environ.items() if k not in QUIET_OFFLINE_DEFAULTS}
    runs = {
        mode: subprocess.run(
            [sys.executable, "-c", _HYBRID_QUERY, str(index), mode], env=env, capture_output=True, text=True, check=True
        )
        for mode in ("loud", "quiet")
    }
    assert runs["loud"].stdout.strip() == runs["quiet"].stdout.strip() == "K2"
    assert "lance::dataset::scanner" in runs["loud"].stderr  # the control: the note exists without the defaults
    assert "WARN" not in runs["quiet"].stderr


def test_an_edit_to_the_chunking_rules_rebuilds_and_the_report_says_why(
    tmp_path: Path, tiny_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build spec carries the code version of the chunker, splitter and unit rules: an incremental sync
    after an edit to them would mix chunks cut by two versions of the rules."""
    import corpus.index as index_module

    index = tmp_path / "idx.lancedb"
    docs = load_documents(tiny_corpus)
    sync_index(docs, SentenceChunker(), HashEmbedder(), index)
    again = sync_index(docs, SentenceChunker(), HashEmbedder(), index)
    assert not again.rebuilt and again.rebuild_reasons == []
    monkeypatch.setattr(index_module, "rules_version", lambda: "edited-rules")  # as after an edit to the splitter
    edited = sync_index(docs, SentenceChunker(), HashEmbedder(), index)
    assert edited.rebuilt and edited.rebuild_reasons == [
        "the code that cuts or embeds chunks, sentences or units changed (`corpus.rules`)"
    ]


def test_rows_a_small_sync_leaves_unfolded_are_found_by_every_retrieval_mode(tmp_path: Path) -> None:
    """A sync of one document in fifty does not rewrite the indices (below `fold_fraction`); searches scan the
    rows no index covers yet, so the new document is found as if it had been folded in."""
    from corpus.models import Document
    from corpus.retrieve import LanceRetriever

    path = tmp_path / "idx.lancedb"
    docs = [Document(id=f"d{i}", title=f"Doc {i}", text=f"Document {i} is about topic {i}.") for i in range(50)]
    sync_index(docs, SentenceChunker(), HashEmbedder(), path)
    new = Document(id="zebra", title="Zebras", text="Quagga stripes puzzled the zoologists.")
    sync_index([*docs, new], SentenceChunker(), HashEmbedder(), path)
    table = open_table(path)
    assert any(getattr(ix, "num_unindexed_rows", 0) for ix in table.list_indices())  # not folded in
    retriever = LanceRetriever(path, HashEmbedder())
    for mode in ("hybrid", "fts"):
        assert retriever.retrieve("quagga stripes", 3, mode)[0].doc_id == "zebra", mode


def test_a_chunker_that_numbers_a_documents_chunks_otherwise_is_refused(tmp_path: Path) -> None:
    """A sync reads each document's content hash from its chunk 0: a chunker numbering from 1 is refused by
    name, and no index is left behind."""
    from collections.abc import Iterable, Iterator

    from corpus.models import Chunk

    class FromOne(SentenceChunker):
        def chunk(self, docs: Iterable[Document]) -> Iterator[Chunk]:
            for c in super().chunk(docs):
                yield c.model_copy(update={"position": c.position + 1})

    path = tmp_path / "idx.lancedb"
    with pytest.raises(CribsheetError, match="chunker FromOne numbered the chunks of 'd'"):
        sync_index([Document(id="d", title="T", text="One sentence here.")], FromOne(), HashEmbedder(), path)
    assert not path.exists()
