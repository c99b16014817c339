"""HTML through lxml with boilerplate removal: scripts, styles, navigation, headers, footers and sidebars
are dropped; the main content (`main`, `article`, `[role=main]`, Sphinx's `div.body`) is kept when a page
marks it; table rows keep their cells apart.
"""

from __future__ import annotations

import codecs
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
    squash,
)
from corpus.registry import NoConfig

DROP_TAGS = {"script", "style", "noscript", "template", "svg", "head", "nav", "aside", "form", "button", "iframe"}
DROP_ROLES = {"navigation", "banner", "contentinfo", "search", "menu", "menubar", "complementary"}
_BOILERPLATE = re.compile(
    r"(^|[\s_-])(nav|navbar|navigation|menu|sidebar|sphinxsidebar|breadcrumbs?|footer|related|skip|toc|"
    r"header|cookie|banner)($|[\s_-])",
    re.I,
)
MAIN = ("//main", "//*[@role='main']", "//article", "//div[contains(concat(' ', @class, ' '), ' body ')]")
BLOCKS: dict[str, BlockKind] = {
    "p": "text",
    "li": "list",
    "dt": "term",
    "dd": "text",
    "pre": "code",
    "blockquote": "quote",
    "figcaption": "text",
    "caption": "text",
    "td": "text",
    "th": "text",
}
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


def _is_boilerplate(el: Any) -> bool:
    if el.tag == "a" and "headerlink" in el.get("class", "").split():  # Sphinx's permalink mark, "¶"
        return True
    if el.tag in DROP_TAGS or el.get("role", "") in DROP_ROLES or el.tag == "footer":
        return True
    return el.tag in ("div", "section", "ul", "header") and bool(
        _BOILERPLATE.search(f"{el.get('class', '')} {el.get('id', '')}")
    )


class _Walker:
    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.section: list[tuple[int, str]] = []

    def add(self, text: str, kind: BlockKind) -> None:
        text = text if kind in ("code", "table") else squash(text)
        if text.strip():
            self.blocks.append(Block(text=text, kind=kind, section=tuple(h for _, h in self.section)))

    def walk(self, el: Any) -> None:
        """Blocks in document order; text directly inside a container becomes a block of its own."""
        loose: list[str] = [el.text or ""]
        for child in el:
            if not isinstance(child.tag, str):  # comments, processing instructions
                loose.append(child.tail or "")
                continue
            tag = child.tag.lower()
            if tag in HEADINGS:
                self.flush(loose)
                heading = squash(child.text_content())
                while self.section and self.section[-1][0] >= HEADINGS[tag]:
                    self.section.pop()
                self.section.append((HEADINGS[tag], heading.rstrip("¶").strip()))
                self.add(heading.rstrip("¶"), "heading")
            elif tag == "table":
                self.flush(loose)
                rows = [
                    " | ".join(squash(c.text_content()) for c in tr if isinstance(c.tag, str) and c.tag in ("td", "th"))
                    for tr in child.iter("tr")
                ]
                self.add("\n".join(r for r in rows if r.strip(" |")), "table")
            elif tag in BLOCKS and not any(
                d.tag in BLOCKS or d.tag == "table" for d in child.iterdescendants() if isinstance(d.tag, str)
            ):
                self.flush(loose)
                body = child.text_content()
                self.add(("- " if tag == "li" else "") + body if tag != "pre" else body.strip("\n"), BLOCKS[tag])
            elif tag == "br":
                loose.append("\n")
            elif tag in (
                "div",
                "section",
                "article",
                "main",
                "ul",
                "ol",
                "dl",
                "li",
                "dd",
                "blockquote",
                "body",
                "header",
                "details",
                "figure",
                "center",
                "tbody",
            ):
                self.flush(loose)
                self.walk(child)
            else:  # inline element: its text belongs to the surrounding run
                loose.append(child.text_content())
            loose.append(child.tail or "")
        self.flush(loose)

    def flush(self, loose: list[str]) -> None:
        self.add("".join(loose), "text")
        loose.clear()


class LxmlHtmlExtractor:
    """HTML via lxml."""

    name = "html"

    def __init__(self) -> None:
        # the suffix is the revision of the rules above: an index of pages read by older rules is rebuilt
        self.version = f"lxml-{importlib.metadata.version('lxml')}+r2"

    def extract(self, data: bytes, source: str) -> Extraction:
        """Parse the page (from its bytes, in its declared or detected encoding), drop boilerplate, walk the
        main content.
        """
        import lxml.html

        encoding = html_encoding(data)
        data = data.removeprefix(codecs.BOM_UTF8)  # libxml2 is told the encoding; the mark itself is no text
        try:
            text = data.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ExtractionError(f"not valid {encoding} ({exc})") from None
        try:
            # Bytes, not str: an XHTML page starts with an XML declaration naming its encoding, which lxml
            # refuses on a str ("Unicode strings with encoding declaration are not supported").
            parser = lxml.html.HTMLParser(encoding=encoding)
            doc = lxml.html.document_fromstring(data, parser=parser) if text.strip() else None
        except Exception as exc:  # lxml raises ParserError and others on hopeless input
            raise ExtractionError(f"could not parse HTML: {type(exc).__name__}: {exc}") from None
        if doc is None:
            return Extraction()
        title = squash(doc.findtext(".//title") or "")
        for el in list(doc.iter()):
            if isinstance(el.tag, str) and el.getparent() is not None and _is_boilerplate(el):
                el.drop_tree()
        main = next((found[0] for xp in MAIN if (found := doc.xpath(xp))), doc.find("body"))
        if main is None:
            main = doc
        walker = _Walker()
        walker.walk(main)
        parser_text = " ".join(t for t in main.itertext() if t.strip())
        return Extraction(title=title, blocks=walker.blocks, parser_text=parser_text)


_DECLARED = re.compile(rb"""<\?xml[^>]*encoding=["']([\w.:-]+)["']|<meta[^>]+charset=["']?([\w.:-]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def html_encoding(data: bytes) -> str:
    """The encoding of an HTML page: its byte-order mark, else the encoding its XML declaration or meta
    charset names (in the first 4 KiB), else UTF-8 when the bytes are valid UTF-8, else Windows-1252 (what
    browsers assume for an undeclared legacy page). Binary content is an ExtractionError.
    """
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name
    if b"\x00" in data[:8192]:
        raise ExtractionError("binary content")
    declared = _DECLARED.search(data[:4096])
    if declared:
        name = (declared.group(1) or declared.group(2)).decode("ascii").lower()
        try:
            return codecs.lookup(name).name
        except LookupError:
            pass  # an unknown name: detect as if none were declared
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


@EXTRACTORS.register("html", NoConfig)
def _html(config: NoConfig, deps: None) -> Extractor:
    """HTML through lxml, boilerplate removed."""
    return LxmlHtmlExtractor()
