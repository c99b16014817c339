"""Plain text: paragraphs separated by blank lines."""

from __future__ import annotations

import re
import sys

from corpus.extract.base import EXTRACTORS, Block, Extraction, Extractor, decode_text
from corpus.registry import NoConfig

_PARAGRAPH = re.compile(r"\n\s*\n")


class PlainTextExtractor:
    """UTF-8 text as it is."""

    name = "text"
    version = f"python-{sys.version_info.major}.{sys.version_info.minor}"

    def extract(self, data: bytes, source: str) -> Extraction:
        """One block per paragraph."""
        text = decode_text(data).strip()
        blocks = [Block(text=p.strip()) for p in _PARAGRAPH.split(text) if p.strip()]
        return Extraction(blocks=blocks, parser_text=text)


@EXTRACTORS.register("text", NoConfig)
def _text(config: NoConfig, deps: None) -> Extractor:
    """Plain UTF-8 text."""
    return PlainTextExtractor()
