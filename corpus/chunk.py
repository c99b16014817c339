"""Token-aware chunking that prefers paragraph and sentence boundaries and keeps character spans."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from corpus.models import Chunk, Document
from corpus.text import sentence_spans

_WORD = re.compile(r"\S+")

BatchTokenCounter = Callable[[Sequence[str]], list[int]]
"""Counts tokens of many texts at once (the embedder's own tokenizer)."""


def count_words(texts: Sequence[str]) -> list[int]:
    """Fallback token counter: whitespace words."""
    return [len(t.split()) for t in texts]


class ChunkerConfig(BaseModel):
    """How documents are cut into chunks; stored in the index metadata."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int = Field(default=200, ge=4)
    """Upper bound on embedder tokens per chunk text (a longer sentence is split at words)."""
    overlap_tokens: int = Field(default=0, ge=0)
    """Trailing sentences (up to this many tokens) repeated at the start of the next chunk."""
    paragraph_fill: float = Field(default=0.5, ge=0.0, le=1.0)
    """End a chunk at a paragraph break once it holds this share of `max_tokens`."""

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkerConfig:
        if self.overlap_tokens >= self.max_tokens:
            raise ValueError("overlap_tokens must be smaller than max_tokens")
        return self


class Chunker(Protocol):
    """Turns documents into chunks."""

    config: ChunkerConfig

    def chunk(self, docs: Iterable[Document]) -> Iterator[Chunk]:
        """Chunks of `docs`, in document order."""
        ...


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    tokens: int
    paragraph_end: bool


def _merge_atomic(spans: list[tuple[int, int, bool]], atomic: Sequence[tuple[int, int]]) -> list[tuple[int, int, bool]]:
    """Sentence spans with every span inside an atomic block merged into one (the block's own span)."""
    if not atomic:
        return spans
    out: list[tuple[int, int, bool]] = []
    blocks = sorted(atomic)
    b = 0
    for s, e, para in spans:
        while b < len(blocks) and blocks[b][1] <= s:
            b += 1
        if b < len(blocks) and blocks[b][0] <= s and e <= blocks[b][1]:
            if out and out[-1][0] >= blocks[b][0] and out[-1][1] <= blocks[b][1]:
                out[-1] = (out[-1][0], e, para)
                continue
        out.append((s, e, para))
    return out


class SentenceChunker:
    """Packs whole sentences into chunks of at most `max_tokens`, breaking at paragraphs when full enough."""

    def __init__(self, config: ChunkerConfig | None = None, count_tokens: BatchTokenCounter = count_words) -> None:
        self.config = config or ChunkerConfig()
        self.count = count_tokens

    def chunk(self, docs: Iterable[Document]) -> Iterator[Chunk]:
        """Sentence- and paragraph-aligned chunks of at most `max_tokens` embedder tokens."""
        for doc in docs:
            breaks = [start for start, _ in doc.sections]
            for position, (start, end) in enumerate(self.spans(doc.text, breaks, doc.atomic)):
                text = doc.text[start:end]
                yield Chunk(
                    id=Chunk.make_id(doc.id, position, text),
                    doc_id=doc.id,
                    title=doc.title,
                    position=position,
                    char_start=start,
                    char_end=end,
                    text=text,
                    section=doc.section_at(start),
                )

    def _units(self, text: str, atomic: Sequence[tuple[int, int]] = ()) -> list[_Unit]:
        spans = _merge_atomic(sentence_spans(text), atomic)
        counts = self.count([text[s:e] for s, e, _ in spans]) if spans else []
        units: list[_Unit] = []
        for (s, e, para_end), n in zip(spans, counts, strict=True):
            if n <= self.config.max_tokens:
                units.append(_Unit(s, e, n, para_end))
                continue
            # A sentence longer than a chunk: cut it into word windows that fit.
            words = [(m.start() + s, m.end() + s) for m in _WORD.finditer(text[s:e])]
            word_tokens = self.count([text[a:b] for a, b in words])
            i = 0
            while i < len(words):
                j, total = i, 0
                while j < len(words) and (j == i or total + word_tokens[j] <= self.config.max_tokens):
                    total += word_tokens[j]
                    j += 1
                units.append(_Unit(words[i][0], words[j - 1][1], total, para_end and j == len(words)))
                i = j
        return units

    def spans(
        self, text: str, breaks: Sequence[int] = (), atomic: Sequence[tuple[int, int]] = ()
    ) -> list[tuple[int, int]]:
        """(start, end) character spans of the chunks of `text`; a chunk never crosses an offset in `breaks`
        (section starts), and an `atomic` span (a code block, a table) stays in one chunk when it fits.
        """
        cfg = self.config
        pending_breaks = sorted(b for b in breaks if b > 0)
        out: list[tuple[int, int]] = []
        current: list[_Unit] = []

        def emit() -> None:
            nonlocal current
            if not current:
                return
            out.append((current[0].start, current[-1].end))
            tail: list[_Unit] = []
            for unit in reversed(current[1:]):  # never carry the whole chunk: each chunk must advance
                if sum(u.tokens for u in tail) + unit.tokens > cfg.overlap_tokens:
                    break
                tail.insert(0, unit)
            current = tail

        for unit in self._units(text, atomic):
            if pending_breaks and unit.start >= pending_breaks[0]:
                while pending_breaks and unit.start >= pending_breaks[0]:
                    pending_breaks.pop(0)
                if current:  # a new section starts: close the chunk, carry no overlap across sections
                    emit()
                    current = []
            if current and sum(u.tokens for u in current) + unit.tokens > cfg.max_tokens:
                emit()
                while current and sum(u.tokens for u in current) + unit.tokens > cfg.max_tokens:
                    current.pop(0)
            current.append(unit)
            if unit.paragraph_end and sum(u.tokens for u in current) >= cfg.paragraph_fill * cfg.max_tokens:
                emit()
                current = []
        if current and (not out or current[-1].end > out[-1][1]):
            out.append((current[0].start, current[-1].end))
        return out
