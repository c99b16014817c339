"""The knowledge-side records: documents, chunks and retrieved hits."""

from __future__ import annotations

import hashlib
import json
from json.encoder import encode_basestring_ascii as _json_str
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
    sections: list[tuple[int, str]] = Field(default_factory=list)
    """(offset in `text`, section path) at every change of section (`a › b`); empty: no sections."""
    atomic: list[tuple[int, int]] = Field(default_factory=list)
    """(start, end) spans of `text` the chunker keeps whole when they fit (code blocks, tables)."""
    outline: list[tuple[int, int, str]] = Field(default_factory=list)
    """(start, end, kind) of every block of a parsed file (heading, text, list, table, code, quote, term,
    signature): what the structure-aware question generator reads. Not part of the content hash (the text
    and sections already say what is indexed)."""
    parser_words: int | None = None
    """Words the file's parser found (None: not from a parsed file, e.g. a JSONL record)."""
    kept_words: int | None = None
    """Of those, words that made it into `text`."""

    def content_hash(self) -> str:
        """sha256 of everything indexed from this document: a changed hash means re-embed it."""
        if not self.metadata and not self.sections:  # json.dumps's own text for this case, 8x faster
            payload = f"[{_json_str(self.title)}, {_json_str(self.text)}, {{}}]"
        else:
            parts: list[Any] = [self.title, self.text, self.metadata]
            if self.sections:  # documents without structure keep the hash they always had
                parts.append(self.sections)
            payload = json.dumps(parts, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()

    def section_at(self, offset: int) -> str:
        """The section path at character `offset` of `text`."""
        current = ""
        for start, path in self.sections:
            if start > offset:
                break
            current = path
        return current


class Chunk(BaseModel):
    """A piece of a document that is embedded and retrieved as a unit."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Content-derived id: the same text at the same place gets the same id in every run."""
    doc_id: str
    title: str
    position: int
    """Index of the chunk inside its document: 0, 1, 2, ... (a sync reads each document's content hash from
    its chunk 0; the index writer refuses other numberings)."""
    char_start: int = 0
    """Offset of the chunk's first character in the document text."""
    char_end: int = 0
    """Offset one past the chunk's last character; text == document.text[char_start:char_end]."""
    text: str
    section: str = ""
    """Section path of the chunk's first character (`math › isqrt`); empty when the source has none."""

    @property
    def heading(self) -> str:
        """The title, and the section path when there is one."""
        return f"{self.title} › {self.section}" if self.section and self.title else (self.section or self.title)

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
    section: str = ""
    """Section path of the chunk inside its document."""
    vector: bytes | None = Field(default=None, repr=False, exclude=True)
    """The chunk's stored embedding (of `indexed_text`) as float32 bytes, when the retriever read it: rerankers
    reuse it. Bytes, not a tuple of floats: 1.5 KB a hit at 384 dimensions instead of about 12 KB, for every
    candidate of every question a sweep keeps."""

    @property
    def embedding(self) -> Any:
        """The stored embedding as a float32 numpy array (None when the retriever read none)."""
        import numpy as np

        return None if self.vector is None else np.frombuffer(self.vector, dtype=np.float32)

    @property
    def heading(self) -> str:
        """What a prompt shows above the passage: the title, and the section path when there is one."""
        return f"{self.title} › {self.section}" if self.section and self.title else (self.section or self.title)


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
