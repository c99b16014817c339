"""Small helpers shared by tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from corpus.errors import InputFileError
from corpus.models import Document
from corpus.sources import SkipLog, SourceConfig, iter_documents
from eval.run.wiring import Components
from eval.settings import SweepConfig


def load_documents(path: Path) -> list[Document]:
    """All documents of a small JSONL/Parquet file or folder (indexing itself streams)."""
    docs = list(iter_documents(SourceConfig(path=path), SkipLog()))
    if not docs:
        raise InputFileError(path, "no documents in corpus")
    return docs


SweepSetup = tuple[SweepConfig, Callable[..., Components]]
"""The `setup` fixture of tests/eval: a sweep config over a tiny index, and a builder of fake components."""
