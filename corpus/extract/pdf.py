"""PDF through pypdf (pure Python, maintained): one block per paragraph of each page's text layer, the page
number as the section. Encrypted, corrupt or image-only files are skips with their reason.
"""

from __future__ import annotations

import importlib.metadata
import io
import re
from typing import Any

from corpus.extract.base import EXTRACTORS, Block, Extraction, ExtractionError, Extractor
from corpus.registry import NoConfig

_PARAGRAPH = re.compile(r"\n\s*\n")
_HYPHEN_BREAK = re.compile(r"(\w)-\n(\w)")


class PypdfExtractor:
    """PDF text layer via pypdf."""

    name = "pdf"

    def __init__(self) -> None:
        self.version = f"pypdf-{importlib.metadata.version('pypdf')}"

    def extract(self, data: bytes, source: str) -> Extraction:
        """Text of every page; a page whose text cannot be read is counted, not fatal."""
        import logging

        from pypdf import PdfReader
        from pypdf.errors import PyPdfError

        logging.getLogger("pypdf").setLevel(logging.ERROR)  # per-object repair notes would flood the log
        if not data.startswith(b"%PDF"):
            raise ExtractionError("not a PDF file (no %PDF header)")
        try:
            reader = PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted and not reader.decrypt(""):
                raise ExtractionError("encrypted PDF (a password is needed)")
            pages = list(reader.pages)
        except ExtractionError:
            raise
        except (PyPdfError, ValueError, KeyError, TypeError, OSError, RecursionError) as exc:
            raise ExtractionError(f"corrupt PDF: {type(exc).__name__}: {exc}") from None
        meta_title = ""
        try:
            info: Any = reader.metadata or {}
            meta_title = str(info.get("/Title") or "").strip()
        except Exception:  # broken info dictionaries are common and harmless
            meta_title = ""
        blocks: list[Block] = []
        texts: list[str] = []
        for number, page in enumerate(pages, start=1):
            try:
                text = page.extract_text() or ""
            except Exception:  # one unreadable page (a broken content stream) is not the whole file
                continue
            text = _HYPHEN_BREAK.sub(r"\1\2", text)
            texts.append(text)
            for para in _PARAGRAPH.split(text):
                body = " ".join(para.split())
                if body:
                    blocks.append(Block(text=body, section=(f"p. {number}",)))
        return Extraction(title=meta_title, blocks=blocks, parser_text=" ".join(texts))


@EXTRACTORS.register("pdf", NoConfig)
def _pdf(config: NoConfig, deps: None) -> Extractor:
    """PDF text layers through pypdf."""
    return PypdfExtractor()
