"""Markdown through markdown-it-py (CommonMark plus tables): list items, table rows of cells, code blocks
and block quotes each become blocks; headings give the section path.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

from corpus.extract.base import (
    EXTRACTORS,
    Block,
    BlockKind,
    Extraction,
    ExtractionError,
    Extractor,
    decode_text,
    squash,
)
from corpus.registry import NoConfig

_TAG = re.compile(r"<[^>]+>")
_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)


def _inline(token: Any) -> str:
    """Text of an inline token: link text, image alt text, inline code, soft breaks as spaces."""
    out: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            out.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif child.type == "image":
            out.append(child.content or "".join(c.content for c in child.children or []))
        elif child.type == "html_inline":
            continue
    return "".join(out)


class MarkdownExtractor:
    """Markdown via markdown-it-py."""

    name = "markdown"

    def __init__(self) -> None:
        from markdown_it import MarkdownIt

        self.md = MarkdownIt("commonmark").enable("table")
        self.version = f"markdown-it-py-{importlib.metadata.version('markdown-it-py')}"

    def extract(self, data: bytes, source: str) -> Extraction:
        """Parse the file and turn its token stream into blocks."""
        text = _FRONT_MATTER.sub("", decode_text(data))
        try:
            tokens = self.md.parse(text)
        except Exception as exc:  # markdown-it is lenient; a crash is a skip, never a lost run
            raise ExtractionError(f"could not parse Markdown: {type(exc).__name__}: {exc}") from None
        blocks: list[Block] = []
        parser: list[str] = []
        section: list[tuple[int, str]] = []
        title = ""
        list_depth = quote_depth = 0
        row: list[str] = []
        rows: list[str] = []
        pending_heading = 0

        def add(body: str, kind: BlockKind) -> None:
            if body.strip():
                blocks.append(Block(text=body, kind=kind, section=tuple(h for _, h in section)))

        for i, tok in enumerate(tokens):
            t = tok.type
            if t == "heading_open":
                pending_heading = int(tok.tag[1])
            elif t == "inline":
                content = _inline(tok)
                parser.append(content)
                if pending_heading:
                    heading = squash(content)
                    while section and section[-1][0] >= pending_heading:
                        section.pop()
                    section.append((pending_heading, heading))
                    title = title or (heading if pending_heading == 1 else "")
                    add(heading, "heading")
                    pending_heading = 0
                elif tokens[i - 1].type in ("th_open", "td_open"):
                    row.append(squash(content))
                elif list_depth:
                    add("- " + squash(content), "list")
                else:
                    add(squash(content), "quote" if quote_depth else "text")
            elif t in ("bullet_list_open", "ordered_list_open"):
                list_depth += 1
            elif t in ("bullet_list_close", "ordered_list_close"):
                list_depth -= 1
            elif t == "blockquote_open":
                quote_depth += 1
            elif t == "blockquote_close":
                quote_depth -= 1
            elif t == "tr_close":
                rows.append(" | ".join(row))
                row = []
            elif t == "table_close":
                add("\n".join(rows), "table")
                rows = []
            elif t in ("fence", "code_block"):
                parser.append(tok.content)
                add(tok.content.rstrip("\n"), "code")
            elif t == "html_block":
                body = squash(_TAG.sub(" ", tok.content))
                parser.append(body)
                add(body, "text")
        return Extraction(title=title, blocks=blocks, parser_text=" ".join(parser))


@EXTRACTORS.register("markdown", NoConfig)
def _markdown(config: NoConfig, deps: None) -> Extractor:
    """Markdown (CommonMark + tables) through markdown-it-py."""
    return MarkdownExtractor()
