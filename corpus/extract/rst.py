"""reStructuredText through docutils, with Sphinx-style directives and roles kept as text.

docutils knows only its own directives; a Sphinx tree is full of `function`, `class`, `versionadded`,
`glossary` and more. Every directive docutils does not know is parsed by a generic one that keeps its
arguments (a signature) and parses its content as reStructuredText, so nothing inside it is lost; every
unknown role keeps its text (`:ref:`title <target>`` -> title).
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterator
from contextlib import contextmanager
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

CODE_DIRECTIVES = {
    "code-block",
    "sourcecode",
    "code",
    "doctest",
    "testcode",
    "testoutput",
    "literalinclude",
    "productionlist",
}
"""Directives whose content is code: kept verbatim as one block."""
DROPPED_DIRECTIVES = {
    "toctree",
    "highlight",
    "index",
    "include",
    "raw",
    "only",
    "tabularcolumns",
    "currentmodule",
    "default-role",
    "default-domain",
    "autosummary",
    "contents",
    "sectionauthor",
    "moduleauthor",
}
"""Navigation and build instructions, not text (`only` and `include` would need the builder)."""
VERSION_LABELS = {
    "versionadded": "New in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
    "versionremoved": "Removed in version",
}
SPHINX_OVER_DOCUTILS = {"class"}
"""Names docutils defines differently (its `class` sets attributes; Sphinx's documents a Python class)."""
ADMONITIONS = {
    "note",
    "warning",
    "tip",
    "important",
    "caution",
    "danger",
    "attention",
    "hint",
    "error",
    "seealso",
    "admonition",
}
_ROLE_TARGET = re.compile(r"^(.*?)\s*<[^<>]+>$", re.S)


def _generic_directive() -> Any:
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives

    class AnyOptions(dict[str, Any]):
        def __bool__(self) -> bool:
            return True

        def __contains__(self, key: object) -> bool:
            return True

        def __getitem__(self, key: str) -> Any:
            return directives.unchanged

    class Generic(Directive):  # type: ignore[misc]
        required_arguments = 0
        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True
        option_spec = AnyOptions()

        def run(self) -> list[Any]:
            name = self.name.split(":")[-1]
            if name in DROPPED_DIRECTIVES:
                return []
            if name in CODE_DIRECTIVES:
                return [nodes.literal_block(text="\n".join(self.content))] if self.content else []
            node = nodes.container(classes=["cribsheet-directive", name])
            label = " ".join(self.arguments).strip()
            if name in VERSION_LABELS:
                version, *rest = label.split(None, 1)
                para = nodes.paragraph(text=f"{VERSION_LABELS[name]} {version}" + (": " if rest else ""))
                if rest:  # the rest of the argument is inline text, as Sphinx reads it
                    inline, _ = self.state.inline_text(" ".join(rest[0].split()), self.lineno)
                    para += inline
                node += para
                label = ""
            elif label and name not in ADMONITIONS:
                node["signature"] = True
            if label:
                node += nodes.paragraph(text=label)
            if self.content:
                self.state.nested_parse(self.content, self.content_offset, node)
            return [node]

    return Generic


def _generic_role(
    name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None, content: Any = None
) -> tuple[list[Any], list[Any]]:
    from docutils import nodes

    m = _ROLE_TARGET.match(text)
    shown = (m.group(1) if m and m.group(1) else text).lstrip("~!")
    return [nodes.literal(rawtext, shown)], []


@contextmanager
def _sphinx_tolerant() -> Iterator[None]:
    """Unknown directives and roles resolve to the generic ones while a document is parsed."""
    from docutils.parsers.rst import directives, roles

    generic = _generic_directive()
    real_directive, real_role = directives.directive, roles.role

    def directive(name: str, language: Any, document: Any) -> tuple[Any, list[Any]]:
        if name in CODE_DIRECTIVES | DROPPED_DIRECTIVES | set(VERSION_LABELS) | SPHINX_OVER_DOCUTILS:
            return generic, []
        found, messages = real_directive(name, language, document)
        return (found or generic), []

    def role(name: str, language: Any, lineno: int, reporter: Any) -> tuple[Any, list[Any]]:
        found, messages = real_role(name, language, lineno, reporter)
        return (found or _generic_role), []

    directives.directive, roles.role = directive, role
    try:
        yield
    finally:
        directives.directive, roles.role = real_directive, real_role


class _Walker:
    """Blocks from a doctree: one per paragraph, list item, term, table row group, literal block."""

    def __init__(self) -> None:
        from docutils import nodes

        self.nodes = nodes
        self.blocks: list[Block] = []
        self.section: list[str] = []
        self.title = ""

    def add(self, text: str, kind: BlockKind = "text") -> None:
        if kind == "table":
            text = "\n".join(squash(line) for line in text.splitlines() if line.strip())
        elif kind != "code":
            text = squash(text)
        if text.strip():
            self.blocks.append(Block(text=text, kind=kind, section=tuple(self.section)))

    def walk(self, node: Any, prefix: str = "") -> None:
        n = self.nodes
        for child in node.children:
            if isinstance(child, n.system_message):
                # A directive that failed is kept as its source text (a literal block in the message).
                for block in child.findall(n.literal_block):
                    self.add(block.astext(), "code")
                continue
            if isinstance(child, (n.comment, n.substitution_definition, n.target, n.raw, n.pending)):
                continue
            if isinstance(child, n.section):
                title = child.next_node(n.title)
                heading = squash(title.astext()) if title is not None else ""
                self.section.append(heading)
                self.add(heading, "heading")
                self.walk(child)
                self.section.pop()
            elif isinstance(child, n.title):
                if isinstance(node, n.document):
                    self.title = squash(child.astext())
                    self.add(self.title, "heading")
                elif not isinstance(node, n.section):
                    self.add(child.astext(), "heading")
            elif isinstance(child, (n.literal_block, n.doctest_block, n.math_block)):
                self.add(child.astext(), "code")
            elif isinstance(child, n.paragraph) or isinstance(child, (n.line_block, n.rubric, n.attribution)):
                self.add(prefix + child.astext())
                prefix = ""
            elif isinstance(child, n.term):
                self.add(child.astext(), "term")
            elif isinstance(child, n.table):
                self.table(child)
            elif isinstance(child, n.list_item):
                self.walk(child, prefix="- ")
            elif isinstance(child, n.field_name):
                self.add(child.astext(), "term")
            elif isinstance(child, n.option_list_item):
                self.add(child.astext().replace("\n", " "), "list")
            elif isinstance(child, n.Text):
                self.add(prefix + child.astext())
            elif isinstance(child, n.Admonition) or "cribsheet-directive" in child.get("classes", []):
                label = type(child).__name__.capitalize() if isinstance(child, n.Admonition) else ""
                if child.get("signature"):
                    first = child.children[0] if child.children else None
                    if isinstance(first, n.paragraph):
                        self.add(first.astext(), "signature")
                        child = child.deepcopy()
                        child.children = child.children[1:]
                self.walk(child, prefix=f"{label}: " if label and label != "Admonition" else "")
            else:
                self.walk(child, prefix)

    def table(self, table: Any) -> None:
        rows = []
        for row in table.findall(self.nodes.row):
            rows.append(" | ".join(squash(entry.astext()) for entry in row.children))
        if rows:
            self.add("\n".join(rows), "table")


def _parser_text(doctree: Any) -> str:
    from docutils import nodes

    skip = (nodes.comment, nodes.system_message, nodes.substitution_definition, nodes.raw, nodes.pending)
    out = []
    for text in doctree.findall(nodes.Text):
        parent, kept = text.parent, True
        while parent is not None:
            if isinstance(parent, skip):
                # The source of a failed directive is text the parser found; the message itself is not.
                kept = isinstance(parent, nodes.system_message) and isinstance(text.parent, nodes.literal_block)
                break
            parent = parent.parent
        if kept:
            out.append(str(text))
    return " ".join(out)


class DocutilsExtractor:
    """reStructuredText (Sphinx sources included) through the docutils parser."""

    name = "rst"

    def __init__(self) -> None:
        self.version = f"docutils-{importlib.metadata.version('docutils')}"

    def extract(self, data: bytes, source: str) -> Extraction:
        """Parse the file and walk its doctree."""
        from docutils.core import publish_doctree

        text = decode_text(data)
        settings = {
            "report_level": 5,
            "halt_level": 5,
            "file_insertion_enabled": False,
            "raw_enabled": False,
            "warning_stream": False,
            "input_encoding": "unicode",
        }
        try:
            with _sphinx_tolerant():
                doctree = publish_doctree(text, source_path=source, settings_overrides=settings)
        except Exception as exc:  # docutils raises many types on broken markup
            raise ExtractionError(f"could not parse reStructuredText: {type(exc).__name__}: {exc}") from None
        walker = _Walker()
        walker.walk(doctree)
        return Extraction(title=walker.title, blocks=walker.blocks, parser_text=_parser_text(doctree))


@EXTRACTORS.register("rst", NoConfig)
def _rst(config: NoConfig, deps: None) -> Extractor:
    """ReStructuredText through docutils, Sphinx directives and roles kept as text."""
    return DocutilsExtractor()
