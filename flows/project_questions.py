"""The questions `cribsheet run` writes when the project gives no question file: generated once into the
workdir and reused, without reading the corpus again, until what they are made from changes: the corpus (the
index's digest over its documents' content hashes), how it is read (the source's fields, the extractors'
versions), the request (`questions.generate`) or the generators' rules. The corpus is streamed into the
generator, one document at a time; only the questions are held.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from corpus.doc_questions import STRUCTURE_VERSION, structured_questions
from corpus.errors import CribsheetError
from corpus.models import Document
from corpus.questions import GENERATOR_VERSION, QuestionRules, take
from corpus.sources import SkipLog, extractor_versions, iter_documents
from flows.project import Project

QUESTIONS_FILE = "questions.jsonl"
KEY_FILE = "questions.key.json"
"""Beside the questions: the key they were generated under and the sha256 of the file as written."""
PER_DOC = 12
"""Structure questions kept per document at most."""
SENTENCE_RULES = QuestionRules(per_doc=2)
"""The sentence rules for what structure does not cover."""


class GeneratedSet(BaseModel):
    """The project's generated question file and how it came to be."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    count: int
    """Questions in the file."""
    documents: int | None
    """Documents read to write them; None: reused, no document read."""

    def line(self) -> str:
        """What `run` prints about the questions."""
        how = (
            "reused (corpus and request unchanged)"
            if self.documents is None
            else f"generated from {self.documents} documents"
        )
        return f"questions: {self.count} {how} -> {self.path}"


def questions_key(project: Project, corpus_sha256: str) -> str:
    """sha256 of everything the generated questions depend on: the corpus digest, how the corpus is read
    (its path aside: the same corpus moved keeps its questions), the request and the rules' versions.
    """
    payload = {
        "corpus_sha256": corpus_sha256,
        "source": project.corpus.model_dump(mode="json", exclude={"path"}),
        "extractors": extractor_versions(project.corpus),
        "generate": project.questions.generate,
        "per_doc": PER_DOC,
        "rules": SENTENCE_RULES.model_dump(mode="json"),
        "versions": [STRUCTURE_VERSION, GENERATOR_VERSION],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def generated_questions(project: Project, corpus_sha256: str | None) -> GeneratedSet:
    """The project's generated questions under `project.workdir`: the file written earlier under the same
    key when it is still as written, else generated afresh from the streamed corpus (the file rewritten only
    when its text changed, so the sweep's questions digest holds). `corpus_sha256` None (no digest known):
    always generated, nothing recorded.
    """
    out = project.workdir / QUESTIONS_FILE
    key = questions_key(project, corpus_sha256) if corpus_sha256 is not None else None
    kept = _kept(project.workdir, key)
    if kept is not None:
        return kept
    read = [0]

    def streamed() -> Iterator[Document]:
        for doc in iter_documents(project.corpus, SkipLog()):
            read[0] += 1
            yield doc

    found = structured_questions(streamed(), PER_DOC, SENTENCE_RULES)
    if not found:
        raise CribsheetError(f"{project.corpus.path}: no question could be written from this corpus; give a file")
    # A small tree supports fewer questions than asked for: all of them, and the printed line says how many.
    picked = take(found, min(project.questions.generate, len(found)), "corpus")
    data = "".join(json.dumps(q.model_dump(mode="json"), sort_keys=True) + "\n" for q in picked).encode()
    if not out.is_file() or out.read_bytes() != data:
        _replace(out, data)
    if key is not None:
        record = {"key": key, "sha256": hashlib.sha256(data).hexdigest(), "count": len(picked)}
        _replace(project.workdir / KEY_FILE, json.dumps(record, indent=2).encode())
    return GeneratedSet(path=out, count=len(picked), documents=read[0])


def _kept(workdir: Path, key: str | None) -> GeneratedSet | None:
    """The question file generated under `key`, when it is still the file that was written (None: none)."""
    out = workdir / QUESTIONS_FILE
    try:
        record = json.loads((workdir / KEY_FILE).read_text())
        data = out.read_bytes()
    except (OSError, ValueError):
        return None
    if key is None or not isinstance(record, dict) or record.get("key") != key:
        return None
    if record.get("sha256") != hashlib.sha256(data).hexdigest():
        return None  # edited or replaced since: generated again
    return GeneratedSet(path=out, count=int(record.get("count", 0)), documents=None)


def _replace(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
