"""Chunking documents into retrievable pieces at sentence boundaries."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from corpus.models import Chunk, Document

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


class ChunkerConfig(BaseModel):
    """How documents are cut into chunks; stored in the index metadata."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_words: int = Field(default=180, ge=8)
    """Upper bound on words per chunk; a longer sentence becomes its own chunk."""
    overlap_sentences: int = Field(default=0, ge=0)
    """Sentences repeated at the start of the next chunk."""


class Chunker(Protocol):
    """Turns documents into chunks."""

    config: ChunkerConfig

    def chunk(self, docs: Iterable[Document]) -> Iterator[Chunk]: ...


def split_sentences(text: str) -> list[str]:
    """Split on sentence-final punctuation followed by a capital or digit (good enough for prose)."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


class SentenceChunker:
    """Packs whole sentences into chunks of at most `max_words` words."""

    def __init__(self, config: ChunkerConfig | None = None) -> None:
        self.config = config or ChunkerConfig()

    def chunk(self, docs: Iterable[Document]) -> Iterator[Chunk]:
        for doc in docs:
            for position, text in enumerate(self._pieces(doc.text)):
                yield Chunk(
                    id=Chunk.make_id(doc.id, position, text),
                    doc_id=doc.id,
                    title=doc.title,
                    position=position,
                    text=text,
                )

    def _pieces(self, text: str) -> Iterator[str]:
        sentences = split_sentences(text)
        current: list[str] = []
        words = 0
        for sentence in sentences:
            n = len(sentence.split())
            if current and words + n > self.config.max_words:
                yield " ".join(current)
                keep = current[-self.config.overlap_sentences :] if self.config.overlap_sentences else []
                current, words = list(keep), sum(len(s.split()) for s in keep)
            current.append(sentence)
            words += n
        if current:
            yield " ".join(current)
