"""The knowledge-side records: documents, chunks and retrieved hits."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Document(BaseModel):
    """One corpus document as loaded from disk."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1)
    """Stable document id; gold document ids in question sets refer to it."""
    text: str = Field(min_length=1)
    """Plain text of the document."""
    title: str = ""
    """Human title, prepended to every chunk so a chunk reads on its own."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Extra fields kept from the source (JSON-serialisable)."""

    def content_hash(self) -> str:
        """sha256 of everything indexed from this document: a changed hash means re-embed it."""
        payload = json.dumps([self.title, self.text, self.metadata], sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()


class Chunk(BaseModel):
    """A piece of a document that is embedded and retrieved as a unit."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Content-derived id: the same text at the same place gets the same id in every run."""
    doc_id: str
    title: str
    position: int
    """Index of the chunk inside its document (0-based)."""
    char_start: int = 0
    """Offset of the chunk's first character in the document text."""
    char_end: int = 0
    """Offset one past the chunk's last character; text == document.text[char_start:char_end]."""
    text: str

    @staticmethod
    def make_id(doc_id: str, position: int, text: str) -> str:
        """Stable chunk id from (document, position, text)."""
        digest = hashlib.sha256(f"{doc_id}\x1f{position}\x1f{text}".encode()).hexdigest()
        return digest[:20]


class Hit(BaseModel):
    """A retrieved chunk with the score of the stage that produced it."""

    model_config = ConfigDict(frozen=True)

    chunk_id: str
    doc_id: str
    title: str
    text: str
    score: float
    vector: tuple[float, ...] | None = Field(default=None, repr=False, exclude=True)
    """The chunk's stored embedding (of `indexed_text`), when the retriever read it: rerankers reuse it."""


class Question(BaseModel):
    """One question with its gold answers (aliases) and the documents that hold the evidence."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    answers: list[str] = Field(min_length=1)
    """Gold answer strings; any one counts."""
    gold_doc_ids: list[str] = Field(default_factory=list)
    answerable: bool = True
    """False when the gold document is in the corpus but does not state the answer."""
