"""A tiny indexed corpus and sweep config with fake backends, shared by the eval tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.chunk import SentenceChunker
from corpus.index import sync_index
from corpus.retrieve import LanceRetriever
from eval.compress import NoCompressor
from eval.rerank import DenseReranker
from eval.run.wiring import Components
from eval.settings import CompressionSpec, GridConfig, SweepConfig
from tests.fakes import ExtractingGenerator, HalvingCompressor, HashEmbedder, count_words
from tests.helpers import SweepSetup, load_documents


@pytest.fixture
def setup(tmp_path: Path, tiny_corpus: Path, tiny_questions: Path) -> SweepSetup:
    index = tmp_path / "idx.lancedb"
    sync_index(load_documents(tiny_corpus), SentenceChunker(), HashEmbedder(), index)
    config = SweepConfig(
        index_path=index,
        questions_path=tiny_questions,
        store_path=tmp_path / "r.duckdb",
        embedder="hash",
        retrieve_n=4,
        grid=GridConfig(
            compressions=[CompressionSpec(), CompressionSpec(compressor="halving", target_ratio=2.0)], top_ks=[1, 3]
        ),
    )
    embedder = HashEmbedder()

    def components(
        generator: ExtractingGenerator | None = None, halving: HalvingCompressor | None = None
    ) -> Components:
        return Components(
            embedder=embedder,
            retriever=LanceRetriever(index, embedder),
            rerankers={"dense": DenseReranker(embedder)},
            compressors={"none": NoCompressor(count_words), "halving": halving or HalvingCompressor()},
            generator=generator or ExtractingGenerator(),
        )

    return config, components
