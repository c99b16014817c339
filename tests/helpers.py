"""Small helpers shared by tests."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corpus.errors import InputFileError
from corpus.models import Document
from corpus.sources import SkipLog, SourceConfig, iter_documents
from eval.run.wiring import Components
from eval.settings import SweepConfig
from eval.store.rows import RunRow, SampleRow


def load_documents(path: Path) -> list[Document]:
    """All documents of a small JSONL/Parquet file or folder (indexing itself streams)."""
    docs = list(iter_documents(SourceConfig(path=path), SkipLog()))
    if not docs:
        raise InputFileError(path, "no documents in corpus")
    return docs


SweepSetup = tuple[SweepConfig, Callable[..., Components]]
"""The `setup` fixture of tests/eval: a sweep config over a tiny index, and a builder of fake components."""


def bundled_slice(bundled_dir: Path, work: Path, n_docs: int, n_answerable: int, n_unanswerable: int) -> None:
    """Write `work/corpus.jsonl` and `work/questions.jsonl`: the first answerable and unanswerable demo
    questions of the bundled dataset, their gold documents and other documents up to `n_docs`.
    """
    from corpus.bundled import CORPUS_FILE, DEMO_FILE

    questions = [json.loads(line) for line in (bundled_dir / DEMO_FILE).read_text().splitlines()]
    picked = [q for q in questions if q["answerable"]][:n_answerable]
    picked += [q for q in questions if not q["answerable"]][:n_unanswerable]
    gold = {d for q in picked for d in q["gold_doc_ids"]}
    docs = [json.loads(line) for line in (bundled_dir / CORPUS_FILE).read_text().splitlines()]
    keep = [d for d in docs if d["id"] in gold]
    keep += [d for d in docs if d["id"] not in gold][: n_docs - len(keep)]
    (work / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in keep))
    (work / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in picked))


def run_row(run_id: str = "r1", **update: Any) -> RunRow:
    """A `runs` row of a small run, still running, started now; `update` sets any other field of it."""
    row = RunRow(
        run_id=run_id,
        started_at=dt.datetime.now(dt.UTC),
        status="running",
        config_json="{}",
        config_hash="h",
        package_versions="{}",
        questions_path="q.jsonl",
        questions_sha256="s",
        index_path="i",
        n_questions=2,
        n_settings=1,
    )
    return row.model_copy(update=update)


def sample_row(qid: str, setting: str = "sh", **kw: object) -> SampleRow:
    """A `samples` row of run r1: question `qid` of setting `setting` (none at top-3), answerable, ok; `kw`
    sets any other column."""
    base = dict(
        run_id="r1",
        setting_hash=setting,
        setting_name=f"none-k3-{setting}",
        setting_json="{}",
        question_id=qid,
        question="?",
        answerable=True,
        gold_answers='["a"]',
        top_k=3,
        reranker="dense",
        compressor="none",
        target_ratio=1.0,
        context_chunk_ids="[]",
        status="ok",
    )
    return SampleRow(**(base | kw))
