"""Extraction keeps every word of real markup: the probe cases of reStructuredText, Markdown, HTML and PDF,
bad files as skips with reasons, coverage, and section paths from the file to the prompt."""

from __future__ import annotations

import codecs
import io
import json
from pathlib import Path

import pytest

from corpus.chunk import SentenceChunker
from corpus.extract import EXTRACTORS, Extraction, render
from corpus.index import document_coverage, sync_index
from corpus.models import Document
from corpus.retrieve import LanceRetriever
from corpus.sources import SkipLog, SourceConfig, iter_documents
from tests.fakes import HashEmbedder

RST = """Service guide
=============

Intro to the service.

.. note::

   The admin password must be rotated every 90 days.

.. function:: serve(port=8080)

   Start the server; requests time out after 30 seconds.

.. versionadded:: 2.1
   The ``--dry-run`` flag.

.. glossary::

   shard
      A horizontal partition of the data set.

replica
   A copy of a shard on another node.

- bullet kept

Tuning
------

.. unknowndirective:: argument here

   Content of a directive nobody registered.

See :func:`serve` and :ref:`the tuning notes <tuning>`.
"""

MD = """# Guide

Configure the service first.
- item one is separate
- item two is separate

| setting | default |
|---|---|
| retries | 5 |
| timeout | 30 s |

```python
client.connect(retries=5)
```

> Quoted advice stays.

## Sub

Details here.
"""

HTML = """<html><head><title>Config</title><style>p {}</style></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/docs">Documentation index</a></li></ul></nav>
<div class="sphinxsidebar">Quick search</div>
<div role="main"><h1>Config</h1><p>Settings of the client.</p>
<table><tr><th>option</th><th>value</th></tr><tr><td>retries</td><td>5</td></tr></table>
<h2>Timeouts</h2><p>Requests give up after 30 seconds.</p></div>
<footer>Copyright notice</footer></body></html>"""


def _pdf(text: str, encrypt: bool = False) -> bytes:
    """A one-page PDF with `text` in its text layer (built by hand, so no PDF writer is needed)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{i} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    out.write(b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets))
    out.write(f"trailer << /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    data = out.getvalue()
    if encrypt:
        from pypdf import PdfReader, PdfWriter

        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
        writer.encrypt("secret")
        buf = io.BytesIO()
        writer.write(buf)
        data = buf.getvalue()
    return data


def extract(name: str, data: str | bytes) -> Extraction:
    extractor = EXTRACTORS.build(EXTRACTORS.spec(name), None)
    return extractor.extract(data.encode() if isinstance(data, str) else data, f"probe.{name}")


def test_rst_directive_bodies_signatures_glossary_and_roles_are_kept() -> None:
    text = render(extract("rst", RST).blocks).text
    for fact in (
        "The admin password must be rotated every 90 days.",
        "serve(port=8080)",
        "Start the server; requests time out after 30 seconds.",
        "New in version 2.1: The --dry-run flag.",
        "A horizontal partition of the data set.",
        "A copy of a shard on another node.",
        "Content of a directive nobody registered.",
        "See serve and the tuning notes.",
        "bullet kept",
    ):
        assert fact in text, fact
    assert "shard" in text.split("\n\n") and ":func:" not in text and ".. note" not in text


def test_markdown_lists_tables_code_and_quotes_are_blocks() -> None:
    found = extract("markdown", MD)
    text = render(found.blocks).text
    assert "Configure the service first.\n\n- item one is separate\n\n- item two is separate" in text
    assert "setting | default\nretries | 5\ntimeout | 30 s" in text
    assert "client.connect(retries=5)" in text and "Quoted advice stays." in text
    assert [b.section for b in found.blocks if b.text == "Details here."] == [("Guide", "Sub")]


def test_html_cells_stay_apart_and_navigation_is_dropped() -> None:
    found = extract("html", HTML)
    text = render(found.blocks).text
    assert "option | value\nretries | 5" in text and "retries5" not in text
    assert "Documentation index" not in text and "Quick search" not in text and "Copyright" not in text
    assert found.title == "Config" and "Requests give up after 30 seconds." in text
    assert [b.section for b in found.blocks if b.text.startswith("Requests")] == [("Config", "Timeouts")]


def test_sphinx_permalink_marks_are_not_text() -> None:
    """Sphinx ends every heading and API signature with `<a class="headerlink">¶</a>`: found on Debian's
    python-click-doc, where generated questions asked about "isolated_filesystem(temp_dir=None)¶"."""
    page = (
        b'<html><body><div class="body"><h1>API<a class="headerlink" href="#api">\xc2\xb6</a></h1><dl><dt>'
        b'isolated_filesystem(temp_dir=None)<a class="headerlink" href="#x">\xc2\xb6</a> tail</dt>'
        b"<dd>A context manager.</dd></dl></div></body></html>"
    )
    text = render(extract("html", page).blocks).text
    assert "¶" not in text and "isolated_filesystem(temp_dir=None) tail" in text


def test_pdf_text_layer_is_read_and_bad_pdfs_are_skips_with_reasons(tmp_path: Path) -> None:
    assert (
        "The backup runs every night at 02:00."
        in render(extract("pdf", _pdf("The backup runs every night at 02:00.")).blocks).text
    )
    (tmp_path / "good.pdf").write_bytes(_pdf("Quarterly report text."))
    (tmp_path / "locked.pdf").write_bytes(_pdf("Secret text.", encrypt=True))
    (tmp_path / "broken.pdf").write_bytes(_pdf("Broken text.")[:120])
    (tmp_path / "fake.pdf").write_bytes(b"not a pdf at all")
    skips = SkipLog()
    docs = list(iter_documents(SourceConfig(path=tmp_path), skips))
    assert [d.id for d in docs] == ["good.pdf"] and "Quarterly report text." in docs[0].text
    reasons = {Path(s.source).name: (s.kind, s.reason) for s in skips.items}
    assert reasons["locked.pdf"] == ("failed", "encrypted PDF (a password is needed)")
    assert reasons["fake.pdf"] == ("failed", "not a PDF file (no %PDF header)")
    assert reasons["broken.pdf"][0] == "failed"


def test_a_parser_crash_on_one_file_is_a_skip_not_a_lost_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from corpus.extract import markdown

    (tmp_path / "a.md").write_text("# Fine\n\nKept.\n")
    (tmp_path / "b.rst").write_text("Title\n=====\n\nAlso kept.\n")

    def boom(self: object, data: bytes, source: str) -> Extraction:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(markdown.MarkdownExtractor, "extract", boom)
    skips = SkipLog()
    docs = list(iter_documents(SourceConfig(path=tmp_path), skips))
    assert [d.id for d in docs] == ["b.rst"]
    assert skips.items[0].reason == "markdown extractor crashed: RuntimeError: parser bug"


def test_byte_order_mark_is_accepted_in_every_text_format(tmp_path: Path) -> None:
    bom = "\ufeff"
    (tmp_path / "tree").mkdir()
    for name, body in (
        ("a.md", "# A\n\nalpha"),
        ("b.rst", "B\n=\n\nbeta"),
        ("c.html", "<p>gamma</p>"),
        ("d.txt", "delta"),
    ):
        (tmp_path / "tree" / name).write_text(bom + body, encoding="utf-8")
    docs = list(iter_documents(SourceConfig(path=tmp_path / "tree"), SkipLog()))
    assert len(docs) == 4 and not any(bom in d.text or bom in d.title for d in docs)
    jsonl = tmp_path / "export.jsonl"
    jsonl.write_text(bom + json.dumps({"id": "x", "text": "from Windows"}) + "\n", encoding="utf-8")
    assert [d.text for d in iter_documents(SourceConfig(path=jsonl), SkipLog())] == ["from Windows"]


def test_extension_override_reads_sphinx_txt_sources_as_rst(tmp_path: Path) -> None:
    (tmp_path / "ref.txt").write_text(RST)
    plain = list(iter_documents(SourceConfig(path=tmp_path), SkipLog()))[0]
    as_rst = list(iter_documents(SourceConfig(path=tmp_path, extensions={".txt": "rst"}), SkipLog()))[0]
    assert ".. note::" in plain.text and ".. note::" not in as_rst.text and as_rst.metadata["format"] == "rst"
    with pytest.raises(Exception, match="unknown extractor 'restructured'"):
        list(iter_documents(SourceConfig(path=tmp_path, extensions={".txt": "restructured"}), SkipLog()))


def test_coverage_counts_what_the_extractor_and_the_chunker_lost() -> None:
    doc = Document(id="d", text="one two three four", parser_words=8, kept_words=4)
    full = document_coverage(doc, [(0, len(doc.text))])
    assert (full.parser_words, full.indexed_words, full.coverage) == (8, 4, 0.5)
    half = document_coverage(doc, [(0, 7)])  # the chunks hold "one two" only
    assert half.indexed_words == 2
    plain = document_coverage(Document(id="j", text="a b c"), [(0, 5)])
    assert plain.coverage == 1.0


def test_section_path_goes_from_the_file_to_the_chunk_hit_and_prompt_title(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(MD)
    (tmp_path / "docs" / "service.rst").write_text(RST)
    skips = SkipLog()
    report = sync_index(
        iter_documents(SourceConfig(path=tmp_path / "docs"), skips), SentenceChunker(), HashEmbedder(), tmp_path / "i"
    )
    assert report.coverage is not None and report.coverage >= 0.99 and report.low_coverage == []
    hits = LanceRetriever(tmp_path / "i", HashEmbedder()).retrieve("Details here", 10, "fts")
    hit = next(h for h in hits if "Details here." in h.text)
    assert hit.section == "Guide › Sub" and hit.heading == "Guide › Guide › Sub"


def test_sphinx_class_directive_and_a_failed_directive_keep_their_text() -> None:
    """docutils' own `class` directive would reject a Python signature and swallow the whole class body."""
    found = extract(
        "rst",
        ".. class:: Client(a=1, *, b=None)\n\n   A test client that keeps its body.\n\n"
        ".. figure:: missing.png\n   :bogus: 1\n\n   Caption of a broken figure.\n",
    )
    text = render(found.blocks).text
    assert "Client(a=1, *, b=None)" in text and "A test client that keeps its body." in text
    assert "Caption of a broken figure." in text and "Caption of a broken figure." in found.parser_text


DOCBOOK = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Chapter 2. First steps</title></head>
<body><div class="chapter"><h2 class="title">2.1. Workflow for Debian package building</h2>
<p>The <code>debuild</code> command wraps dpkg-buildpackage and lintian, café included.</p></div></body></html>
"""


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (DOCBOOK.encode("utf-8"), "utf-8"),  # DocBook XHTML: an XML declaration lxml refuses on a str
        (
            DOCBOOK.replace('encoding="UTF-8"', 'encoding="ISO-8859-1"').encode("latin-1"),
            "iso8859-1",
        ),
        (b'<html><head><meta charset="windows-1252"></head><body><p>Caf\xe9 au lait.</p></body></html>', "cp1252"),
        (b"<html><body><p>Caf\xe9 au lait, undeclared.</p></body></html>", "cp1252"),  # not UTF-8: a legacy page
        (codecs.BOM_UTF16_LE + "<html><body><p>Café au lait.</p></body></html>".encode("utf-16-le"), "utf-16"),
    ],
)
def test_html_is_parsed_from_bytes_in_its_declared_or_detected_encoding(data: bytes, encoding: str) -> None:
    from corpus.extract.html import LxmlHtmlExtractor, html_encoding

    assert html_encoding(data) == encoding
    found = LxmlHtmlExtractor().extract(data, "page.html")
    text = " ".join(b.text for b in found.blocks)
    assert "Caf\u00e9" in text or "café" in text
    if data.startswith(b"<?xml"):
        assert found.title == "Chapter 2. First steps" and "debuild" in text and "Workflow for Debian" in text


def test_a_corpus_with_nothing_usable_says_what_was_skipped_and_writes_the_list(tmp_path: Path) -> None:
    from corpus.errors import CribsheetError
    from corpus.sources import SkipLog
    from tests.fakes import HashEmbedder

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.html").write_bytes(b"\x00\x01binary")
    (tree / "b.html").write_bytes(b"<html><body></body></html>")
    skips = SkipLog()
    index = tmp_path / "idx.lancedb"
    with pytest.raises(CribsheetError) as info:
        sync_index(
            iter_documents(SourceConfig(path=tree), skips),
            SentenceChunker(),
            HashEmbedder(),
            index,
            skipped=skips.items,
        )
    message = str(info.value)
    assert message.startswith("the corpus has no usable documents (") and "\n" not in message
    assert "1 empty" in message and "1 failed" in message and "a.html: " in message
    listed = json.loads((tmp_path / "idx.lancedb.skipped.json").read_text())
    assert sorted(s["kind"] for s in listed) == ["empty", "failed"] and not index.exists()
