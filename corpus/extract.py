"""Plain text out of markup files: HTML, Markdown, reStructuredText."""

from __future__ import annotations

import re
from html.parser import HTMLParser

_BLOCK_TAGS = {
    "p",
    "div",
    "br",
    "li",
    "ul",
    "ol",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "tr",
    "table",
    "section",
    "article",
    "blockquote",
    "pre",
    "header",
    "footer",
    "dd",
    "dt",
}
_SKIP_TAGS = {"script", "style", "noscript", "template", "svg", "head"}


class _HTMLText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIP_TAGS:
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._skip:
            self.parts.append(data)


def _tidy(text: str) -> str:
    paragraphs = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
    return "\n\n".join(p for p in paragraphs if p)


def html_to_text(html: str) -> tuple[str, str]:
    """(title, text) of an HTML document; scripts, styles and tags dropped, paragraphs kept."""
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    return " ".join("".join(parser.title).split()), _tidy("".join(parser.parts))


_MD_RULES = [
    (re.compile(r"^```.*?^```", re.S | re.M), ""),  # fenced code
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),  # images -> alt text
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),  # links -> text
    (re.compile(r"^\s{0,3}#{1,6}\s*", re.M), ""),  # heading marks
    (re.compile(r"^\s{0,3}>\s?", re.M), ""),  # quotes
    (re.compile(r"^\s*[-*+]\s+", re.M), ""),  # bullets
    (re.compile(r"(\*\*|__|\*|_|`)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # emphasis, inline code
    (re.compile(r"<[^>]+>"), ""),  # inline html
]


def markdown_to_text(md: str) -> tuple[str, str]:
    """(title, text) of a Markdown document: the first heading is the title."""
    m = re.search(r"^\s{0,3}#\s+(.+)$", md, re.M)
    for pattern, repl in _MD_RULES:
        md = pattern.sub(repl, md)
    return (m.group(1).strip() if m else ""), _tidy(md)


_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+<>:._])\1{2,}\s*$")


def rst_to_text(rst: str) -> tuple[str, str]:
    """(title, text) of a reStructuredText document: directives and section underlines dropped."""
    lines = rst.splitlines()
    title = ""
    kept: list[str] = []
    skipping = False
    for i, line in enumerate(lines):
        if line.startswith(".. "):
            skipping = True
            continue
        if skipping and (not line.strip() or line.startswith((" ", "\t"))):
            continue
        skipping = False
        if _RST_UNDERLINE.match(line):
            if not title and i > 0 and lines[i - 1].strip():
                title = lines[i - 1].strip()
            continue
        kept.append(
            re.sub(
                r"`([^`<]+?)(?:\s*<[^>]+>)?`_?|\*\*?([^*]+)\*\*?|``([^`]+)``",
                lambda m: next(g for g in m.groups() if g),
                line,
            )
        )
    return title, _tidy("\n".join(kept))
