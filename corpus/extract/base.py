"""Extraction: a registered parser per file format turns a file into text blocks with their section path.

Each extractor also counts the words of everything its parser found, so the index can report coverage
(words that reached the index / words the parser found) per document instead of losing text silently.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from corpus.registry import Registry

SECTION_SEPARATOR = " › "
BlockKind = Literal["heading", "text", "list", "table", "code", "quote", "term", "signature"]


class Block(BaseModel):
    """One block of extracted text: a paragraph, list item, table row group, code block, ..."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    kind: BlockKind = "text"
    section: tuple[str, ...] = ()
    """Headings above the block, outermost first."""


class Extraction(BaseModel):
    """What an extractor found in one file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    title: str = ""
    blocks: list[Block] = Field(default_factory=list)
    parser_text: str = ""
    """Everything the parser found as text (by-design removals excluded: markup, comments, navigation)."""


class ExtractionError(Exception):
    """A file that could not be read (corrupt, encrypted, unparseable): the file is skipped with this reason."""


class Extractor(Protocol):
    """Turns the bytes of one file into blocks."""

    name: str
    version: str
    """Parser library and version, recorded in the index build spec."""

    def extract(self, data: bytes, source: str) -> Extraction:
        """Blocks of the file at `source` (for messages); raises ExtractionError for unusable files."""
        ...


EXTRACTORS: Registry[Extractor, None] = Registry("extractor")
"""Registered extractors; a file's extension picks one (`SourceConfig.extensions` overrides)."""

DEFAULT_EXTENSIONS: dict[str, str] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "rst",
    ".rest": "rst",
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}


def decode_text(data: bytes) -> str:
    """UTF-8 text (a byte-order mark is accepted); binary or undecodable content is an ExtractionError."""
    if b"\x00" in data[:8192]:
        raise ExtractionError("binary content")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractionError(f"not valid UTF-8 (byte {exc.start})") from None


def squash(text: str) -> str:
    """Whitespace runs to one space."""
    return " ".join(text.split())


_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> Counter[str]:
    """Multiset of lower-cased word tokens: what coverage compares."""
    return Counter(w.lower() for w in _WORD.findall(text))


def kept_share(found: Counter[str], kept: Counter[str]) -> tuple[int, int]:
    """(words of `found` also in `kept`, counted with multiplicity; words of `found`)."""
    total = sum(found.values())
    return sum(min(n, kept[w]) for w, n in found.items()), total


@dataclass
class Rendered:
    """An extraction laid out as one document text, with where each section and atomic block starts."""

    text: str
    sections: list[tuple[int, str]]
    """(offset, section path) at every change of section."""
    atomic: list[tuple[int, int]]
    """(start, end) of blocks the chunker must not cut (code, table rows) when they fit in a chunk."""
    outline: list[tuple[int, int, str]]
    """(start, end, kind) of every block: the structure questions are read from (headings, terms, API
    signatures and the text under them)."""


def render(blocks: Iterable[Block]) -> Rendered:
    """Blocks joined by blank lines; section changes and atomic spans recorded as character offsets."""
    parts: list[str] = []
    sections: list[tuple[int, str]] = []
    atomic: list[tuple[int, int]] = []
    outline: list[tuple[int, int, str]] = []
    offset = 0
    current: str | None = None
    for block in blocks:
        text = block.text.strip("\n")
        if not text.strip():
            continue
        if parts:
            offset += 2
        path = SECTION_SEPARATOR.join(block.section)
        if path != current:
            sections.append((offset, path))
            current = path
        if block.kind in ("code", "table"):
            atomic.append((offset, offset + len(text)))
        outline.append((offset, offset + len(text), block.kind))
        parts.append(text)
        offset += len(text)
    return Rendered("\n\n".join(parts), sections, atomic, outline)
