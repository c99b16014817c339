"""Each loader, and the documented policy for every kind of bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus.errors import InputFileError
from corpus.sources import SkipLog, SourceConfig, iter_documents


def load(path: Path, **kw: object) -> tuple[list, SkipLog]:
    skips = SkipLog()
    return list(iter_documents(SourceConfig(path=path, **kw), skips)), skips


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "intro.md").write_text(
        "# Getting started\n\nInstall with **pip**. See [the docs](http://x).\n\n```\ncode here\n```\n- one item\n"
    )
    (root / "notes.rst").write_text(
        "Release notes\n=============\n\n.. note::\n   hidden directive\n\nVersion *2* adds ``sync``.\n"
    )
    (root / "plain.txt").write_text("Just some plain text.\n")
    (root / "page.html").write_text(
        "<html><head><title>Home page</title><style>p{}</style></head><body><p>Hello "
        "<b>world</b></p><script>var x=1;</script><p>Second para</p></body></html>"
    )
    return root


def test_folder_loader_extracts_text_and_titles(tree: Path) -> None:
    docs, skips = load(tree)
    by_id = {d.id: d for d in docs}
    assert set(by_id) == {"guide/intro.md", "notes.rst", "plain.txt", "page.html"}
    md = by_id["guide/intro.md"]
    assert md.title == "Getting started"
    assert "Install with pip. See the docs." in md.text and "**" not in md.text
    # Code blocks and list items are kept as blocks of their own (the chunker keeps code whole).
    assert "\n\ncode here\n\n- one item" in md.text and md.atomic == [
        (md.text.index("code here"), md.text.index("code here") + 9)
    ]
    rst = by_id["notes.rst"]
    # Directive content is text like any other: a note is kept, labelled.
    assert rst.title == "Release notes" and "Note: hidden directive" in rst.text and "Version 2 adds sync." in rst.text
    html = by_id["page.html"]
    assert html.title == "Home page" and html.text == "Hello world\n\nSecond para"
    assert by_id["plain.txt"].title == "plain" and by_id["plain.txt"].metadata == {
        "path": "plain.txt",
        "format": "text",
    }
    assert skips.items == []


def test_bad_files_in_a_folder_are_skipped_with_reasons(tree: Path, tmp_path: Path) -> None:
    (tree / "image.txt").write_bytes(b"\x89PNG\x00\x00binary")
    (tree / "latin1.txt").write_bytes("café".encode("latin-1"))
    (tree / "empty.md").write_text("   \n\n")
    (tree / "big.txt").write_text("x" * 2000)
    (tree / "data.csv").write_text("a,b\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("outside the root")
    os.symlink(outside, tree / "link.txt")
    os.symlink(tree / "plain.txt", tree / "inside-link.txt")
    docs, skips = load(tree, max_file_bytes=1000)
    reasons = {Path(s.source).name: s.reason for s in skips.items}
    assert reasons["image.txt"] == "binary content"
    assert reasons["latin1.txt"].startswith("not valid UTF-8")
    assert reasons["empty.md"] == "no text in the document (empty by design)"
    assert {s.kind for s in skips.items if Path(s.source).name == "empty.md"} == {"empty"}
    assert reasons["big.txt"].startswith("larger than 1000 bytes")
    assert reasons["data.csv"] == "unsupported file type '.csv'"
    assert reasons["link.txt"] == "symbolic link leads outside the corpus root"
    assert "inside-link.txt" in {d.id for d in docs}  # a link that stays inside the root is fine
    assert "outside the root" not in " ".join(d.text for d in docs)


def test_jsonl_with_configurable_fields_and_metadata(tmp_path: Path) -> None:
    path = tmp_path / "tickets.jsonl"
    rows = [
        {"key": "T-1", "body": "Printer on fire", "subject": "Urgent", "team": "ops", "extra": 1},
        {"key": "T-2", "body": "   ", "subject": "blank"},
        {"key": 3, "body": "Numbers as ids work", "subject": None, "team": "dev"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    docs, skips = load(path, id_field="key", text_field="body", title_field="subject", metadata_fields=["team"])
    assert [(d.id, d.title, d.metadata) for d in docs] == [
        ("T-1", "Urgent", {"team": "ops"}),
        ("3", "", {"team": "dev"}),
    ]
    assert [(s.source.endswith("tickets.jsonl:2"), s.reason) for s in skips.items] == [(True, "empty text")]


@pytest.mark.parametrize(
    ("lines", "pattern"),
    [
        (
            ['{"id": "a", "text": "x"}', '{"id": "a", "text": "y"}'],
            r"c\.jsonl:2: duplicate document id 'a' \(first at line 1\)",
        ),
        (['{"id": "a", "text": 5}'], r"c\.jsonl:1: field 'text': expected a string"),
        (['{"text": "no id"}'], r"c\.jsonl:1: field 'id': missing"),
        (['{"id": "a", "text": "x"}', "{oops"], r"c\.jsonl:2: invalid JSON"),
    ],
)
def test_jsonl_record_errors_name_file_and_line(tmp_path: Path, lines: list[str], pattern: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputFileError, match=pattern):
        load(path)


def test_parquet_streams_batches_with_metadata(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    n = 25
    pq.write_table(
        pa.table({"doc": [f"d{i}" for i in range(n)], "content": [f"text {i}" for i in range(n)], "lang": ["en"] * n}),
        path,
    )
    docs, _ = load(path, id_field="doc", text_field="content", metadata_fields=["lang"], parquet_batch_rows=4)
    assert len(docs) == n and docs[7].id == "d7" and docs[7].metadata == {"lang": "en"}


def test_parquet_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "a"], "text": ["x", "y", "z"]}), path)
    with pytest.raises(InputFileError, match=r"c\.parquet: duplicate document id 'a' \(first at row 1\), row 3"):
        load(path)
    pq.write_table(pa.table({"id": ["a"], "body": ["x"]}), path)
    with pytest.raises(InputFileError, match=r"c\.parquet: no column 'text' \(columns: body, id\)"):
        load(path)
    path.write_bytes(b"not parquet at all")
    with pytest.raises(InputFileError, match=r"c\.parquet: not a readable Parquet file"):
        load(path)


def test_missing_and_unsupported_corpus(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="nope: corpus not found"):
        load(tmp_path / "nope")
    (tmp_path / "c.csv").write_text("a\n")
    with pytest.raises(InputFileError, match=r"c\.csv: unsupported corpus file"):
        load(tmp_path / "c.csv")
