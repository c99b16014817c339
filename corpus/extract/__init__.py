"""Text out of files, one registered extractor per format: reStructuredText (docutils), Markdown
(markdown-it-py), HTML (lxml, boilerplate removed), PDF (pdfminer.six) and plain text. Importing the package
registers all five.
"""

from corpus.extract import html, markdown, pdf, rst, text
from corpus.extract.base import (
    DEFAULT_EXTENSIONS,
    EXTRACTORS,
    SECTION_SEPARATOR,
    Block,
    Extraction,
    ExtractionError,
    Extractor,
    Rendered,
    kept_share,
    render,
    words,
)

__all__ = [
    "DEFAULT_EXTENSIONS",
    "EXTRACTORS",
    "SECTION_SEPARATOR",
    "Block",
    "Extraction",
    "ExtractionError",
    "Extractor",
    "Rendered",
    "html",
    "kept_share",
    "markdown",
    "pdf",
    "render",
    "rst",
    "text",
    "words",
]
