"""The questions `cribsheet run` generates are written once and reused until the corpus or the request
changes, and generating them streams the corpus (one document held at a time)."""

from __future__ import annotations

import gc
import json
import shutil
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from corpus.models import Document
from corpus.sources import SkipLog, SourceConfig
from flows.project import Project

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "tests" / "data" / "docs_tree"


def _project(tmp_path: Path, generate: int = 300) -> Project:
    shutil.copytree(TREE, tmp_path / "docs", dirs_exist_ok=True)
    file = tmp_path / "cribsheet.yaml"
    file.write_text(yaml.safe_dump({"corpus": {"path": "docs"}, "questions": {"generate": generate}}))
    return Project.load(file)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the documents question generation reads (the corpus read through `iter_documents`)."""
    import flows.project_questions
    from corpus.sources import iter_documents

    seen: list[str] = []

    def counting(config: SourceConfig, skips: SkipLog) -> Iterator[Document]:
        for doc in iter_documents(config, skips):
            seen.append(doc.id)
            yield doc

    monkeypatch.setattr(flows.project_questions, "iter_documents", counting)
    return seen


def test_generated_questions_are_reused_until_the_corpus_or_the_request_changes(
    tmp_path: Path, reads: list[str]
) -> None:
    from flows.project_questions import KEY_FILE, generated_questions

    project = _project(tmp_path)
    first = generated_questions(project, "digest-1")
    assert first.documents == 3 and first.count == 5 and len(reads) == 3
    out = project.workdir / "questions.jsonl"
    written, stamp = out.read_bytes(), out.stat().st_mtime_ns
    assert len(written.splitlines()) == 5 and json.loads((project.workdir / KEY_FILE).read_text())["count"] == 5

    reads.clear()
    again = generated_questions(project, "digest-1")  # same corpus, same request: nothing read
    assert again.documents is None and again.count == 5 and reads == []
    assert "reused" in again.line() and out.stat().st_mtime_ns == stamp

    changed = generated_questions(project, "digest-2")  # the corpus changed: read again ...
    assert changed.documents == 3 and len(reads) == 3
    assert out.read_bytes() == written and out.stat().st_mtime_ns == stamp  # ... same questions: file untouched

    reads.clear()
    fewer = generated_questions(_project(tmp_path, generate=2), "digest-2")  # another request
    assert fewer.count == 2 and len(reads) == 3 and len(out.read_bytes().splitlines()) == 2

    reads.clear()
    out.write_text(out.read_text().replace("?", "!"))  # edited by hand: not what was written under the key
    redone = generated_questions(_project(tmp_path, generate=2), "digest-2")
    assert redone.documents == 3 and "!" not in out.read_text()

    reads.clear()
    generated_questions(_project(tmp_path, generate=2), None)  # no digest known: always generated
    generated_questions(_project(tmp_path, generate=2), None)
    assert len(reads) == 6


def test_question_generation_streams_the_corpus_one_document_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most two documents are alive while the generator reads the next one (the one just read and the
    new one): the corpus is never held whole, as `list(iter_documents(...))` held it."""
    import flows.project_questions
    from flows.project_questions import generated_questions

    refs: list[weakref.ref[Document]] = []
    most = [0]

    def documents(config: SourceConfig, skips: SkipLog) -> Iterator[Document]:
        for i in range(40):
            gc.collect()
            doc = Document(
                id=f"d{i}",
                title=f"Town {i}",
                text=f"Town {i} is a town in the valley. Town {i} was founded in {1800 + i} by Anna Berg.",
            )
            refs.append(weakref.ref(doc))
            most[0] = max(most[0], sum(r() is not None for r in refs))
            yield doc
            del doc

    monkeypatch.setattr(flows.project_questions, "iter_documents", documents)
    made = generated_questions(_project(tmp_path, generate=20), "digest")
    assert made.documents == 40 and made.count == 20
    assert most[0] <= 2, f"{most[0]} documents held at once"
