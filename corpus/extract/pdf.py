"""PDF through pdfminer.six (pure Python, maintained): the text boxes of each page's layout analysis become
blocks, the page number their section. Encrypted, corrupt or image-only files are skips with their reason.

pdfminer places spaces from glyph positions, so documents that set word spacing by positioning (common
in TeX output) keep their words apart; pypdf glued them ("anOpenTypefeaturethat") on the same files.
"""

from __future__ import annotations

import importlib.metadata
import io
import re
from typing import Any

from corpus.extract.base import EXTRACTORS, Block, Extraction, ExtractionError, Extractor
from corpus.registry import NoConfig

_HYPHEN_BREAK = re.compile(r"(\w)-\n(\w)")


class PdfminerExtractor:
    """PDF text layer via pdfminer.six."""

    name = "pdf"

    def __init__(self) -> None:
        self.version = f"pdfminer.six-{importlib.metadata.version('pdfminer.six')}"

    def extract(self, data: bytes, source: str) -> Extraction:
        """Text boxes of every page, in reading order."""
        import logging

        from pdfminer.high_level import extract_pages
        from pdfminer.layout import LAParams, LTTextContainer

        logging.getLogger("pdfminer").setLevel(logging.ERROR)  # per-object repair notes would flood the log
        if not data.startswith(b"%PDF"):
            raise ExtractionError("not a PDF file (no %PDF header)")
        blocks: list[Block] = []
        texts: list[str] = []
        try:
            for number, page in enumerate(extract_pages(io.BytesIO(data), laparams=LAParams()), start=1):
                for element in page:
                    if not isinstance(element, LTTextContainer):
                        continue
                    raw = _HYPHEN_BREAK.sub(r"\1\2", element.get_text())
                    texts.append(raw)
                    body = " ".join(raw.split())
                    if body:
                        blocks.append(Block(text=body, section=(f"p. {number}",)))
        except Exception as exc:  # pdfminer raises many types on broken or protected files
            raise ExtractionError(_reason(exc)) from None
        return Extraction(title=_title(data), blocks=blocks, parser_text=" ".join(texts))


def _reason(exc: Exception) -> str:
    name = type(exc).__name__
    if "Password" in name or "Encryption" in name or "encrypt" in str(exc).lower():
        return "encrypted PDF (a password is needed)"
    return f"corrupt PDF: {name}: {exc}"[:300]


def _title(data: bytes) -> str:
    """The document information's title, when there is a readable one."""
    try:
        from pdfminer.pdfdocument import PDFDocument
        from pdfminer.pdfparser import PDFParser

        info: Any = PDFDocument(PDFParser(io.BytesIO(data))).info
        raw = info[0].get("Title", b"") if info else b""
        if isinstance(raw, bytes):
            raw = raw.decode("utf-16") if raw.startswith(b"\xfe\xff") else raw.decode("latin-1")
        return " ".join(str(raw).split())
    except Exception:  # broken info dictionaries are common and harmless
        return ""


@EXTRACTORS.register("pdf", NoConfig)
def _pdf(config: NoConfig, deps: None) -> Extractor:
    """PDF text layers through pdfminer.six."""
    return PdfminerExtractor()
