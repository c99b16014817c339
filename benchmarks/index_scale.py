"""Does a nightly sync cost what changed, and does a sweep's memory stay flat in the question count?

Part 1, the index (real LanceDB, a hash-vector embedder: 384-d vectors from sha256, no model; said so in the
output), with sentence vectors on by default (the path `cribsheet run` indexes with; `--no-sentence-vectors`
for chunks only): a corpus of N chunks (one chunk a document) built in full, then three nights synced:
one document changed, then a churn (`--churn` of the documents changed, past `fold_fraction`, so the sync
folds its rows into the indices), then one document again; then one query. Reported per N: full build
seconds, each night's sync seconds and the first one's peak RSS (its own process), query milliseconds, the
first sync split in two: the scan (reading and hashing the corpus stream, which any sync pays to learn what
changed, timed alone in its own process) and the rest; and after the last night, the rows LanceDB scans
(its `analyze_plan`, rounded as LanceDB prints them) for the two filtered reads a sync makes of each changed
document: its chunks (`doc_id IN`) and its sentence vectors (`key IN`), with whether the side tables hold
each key once. Each step runs in a fresh process, so peak RSS is that step's; LanceDB and Arrow are imported
before a step's clock starts (until 2026-12-06 the sync's seconds included that import, 1 to 3 s here).

Part 2, the sweep (a fake engine and a fake retriever that hands each question 20 candidates with stored
vectors, so what is measured is the sweep's own memory, not a model's): one setting over Q questions, the
run's peak RSS per question.

The last line is one JSON object: `sync_time_ratio` and `sync_rss_ratio` (the largest N against the smallest),
`sync_index_side_ratio` (the sync less the scan), `sweep_rss_ratio` (the largest Q against the middle one).
Goals: both sync ratios <= 2, full build time about linear, peak RSS at the largest Q <= 2x the middle one.
Usage:
  .venv/bin/python benchmarks/index_scale.py [--chunks 10000,100000,1000000] [--questions 1000,10000,100000]
      [--no-sentence-vectors] [--churn 0.08]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


NIGHTS = ("sync", "churn", "sync2")
"""The syncs after the build, in order: one document changed, `--churn` of them, one again."""


def _docs(n: int, night: int = 0, churn: float = 0.08) -> Any:
    """The corpus as of `night` (0: as built; 1 to 3: after each of `NIGHTS`)."""
    from corpus.models import Document

    every = max(2, round(1 / churn)) if churn else 0
    for i in range(n):
        text = f"Document {i} is about subject {i % 977} and place {i % 131}. It says fact {i}."
        if i == n // 2 and night:
            text += f" This document was edited on night {1 if night < 3 else 3}."
        elif every and night >= 2 and i % every == 1:
            text += f" Revision {i} changed its subject."  # a new sentence: new side rows
        yield Document(id=f"d{i:07d}", title=f"Doc {i}", text=text)


def _rows_scanned(query: Any) -> int:
    """Rows LanceDB's plan for `query` scans (its `analyze_plan`, summed over reads; "200.0 K" is read as
    200,000, so the figure is as rounded as LanceDB prints it)."""
    scale = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9}
    found = re.findall(r"rows_scanned=([\d.]+)(?: ([KMB]))?", query.analyze_plan())
    return sum(round(float(value) * scale[unit]) for value, unit in found)


def _after_sync(path: Path, n: int) -> dict[str, float]:
    """What the sync left: rows scanned by a changed document's chunk and sentence-vector reads, and whether
    each side table holds every key once."""
    from corpus.sentences import SENTENCE_TABLE, chunk_sentences, sentence_key
    from corpus.snapshot import latest_snapshot, open_side_table
    from corpus.table import open_table

    table = open_table(path)
    changed = f"d{n // 2:07d}"
    read = table.search().where(f"doc_id IN ('{changed}')").select(["chunk_id", "text"]).limit(n)
    out: dict[str, float] = {"doc_rows_scanned": _rows_scanned(read)}
    snapshot = latest_snapshot(path)
    assert snapshot is not None
    for kind in snapshot.tables:
        side = open_side_table(path, snapshot, kind)
        keys = side.search().select(["key"]).limit(max(side.count_rows(), 1)).to_arrow().column("key")
        out[f"{kind}_rows"] = len(keys)
        out[f"{kind}_distinct_keys"] = len(set(keys.to_pylist()))
    sentences = open_side_table(path, snapshot, SENTENCE_TABLE)
    if sentences is not None:
        texts = read.to_arrow().column("text").to_pylist()
        wanted = ", ".join(f"'{sentence_key(s)}'" for s in chunk_sentences(texts))
        lookup = sentences.search().where(f"key IN ({wanted})").select(["key"]).limit(max(sentences.count_rows(), 1))
        out["key_rows_scanned"] = _rows_scanned(lookup)
    return out


def index_step(step: str, n: int, folder: Path, sentence_vectors: bool = True, churn: float = 0.08) -> dict[str, float]:
    """One step in this process: `build` (full), one of `NIGHTS`, `scan` or `query`."""
    from corpus.chunk import SentenceChunker
    from corpus.index import IndexOptions, sync_index
    from corpus.retrieve import LanceRetriever
    from tests.fakes import HashEmbedder

    embedder = HashEmbedder(dim=384)
    path = folder / f"idx-{n}.lancedb"
    opts = IndexOptions(batch_chunks=20_000, ann_threshold=10**9, sentence_vectors=sentence_vectors)
    for library in ("lancedb", "pyarrow"):  # imported before the clock starts (1 to 3 s here): a step's own work
        importlib.import_module(library)
    t0 = time.perf_counter()
    if step == "scan":  # what any sync pays to learn what changed: read the stream, hash every document
        n_docs = sum(1 for doc in _docs(n, night=1, churn=churn) if doc.content_hash())
        assert n_docs == n
    elif step == "build":
        sync_index(_docs(n, churn=churn), SentenceChunker(), embedder, path, opts)
    elif step in NIGHTS:
        night = NIGHTS.index(step) + 1
        report = sync_index(_docs(n, night, churn), SentenceChunker(), embedder, path, opts)
        assert (report.changed == 1 or step == "churn") and not report.rebuilt, report
        seconds, rss = time.perf_counter() - t0, _rss_mb()
        return {"seconds": seconds, "rss_mb": rss, "changed": report.changed, **_after_sync(path, n)}
    else:
        retriever = LanceRetriever(path, embedder)
        retriever.retrieve("What is document 5 about?", 10, "hybrid")
        t0 = time.perf_counter()
        for i in range(20):
            retriever.retrieve(f"What is document {i * 37} about?", 10, "hybrid")
        return {"seconds": (time.perf_counter() - t0) / 20, "rss_mb": _rss_mb()}
    return {"seconds": time.perf_counter() - t0, "rss_mb": _rss_mb()}


def sweep_step(q: int, folder: Path) -> dict[str, float]:
    """One setting of a sweep over `q` questions with fake backends; this process's peak RSS."""
    import numpy as np

    from corpus.models import Hit
    from eval.compress import NoCompressor
    from eval.engine.generator import Generation
    from eval.rerank import DenseReranker
    from eval.run.sweep import run_sweep
    from eval.run.wiring import Components
    from eval.settings import CompressionSpec, GridConfig, SweepConfig
    from tests.conftest import write_jsonl
    from tests.fakes import ExtractingGenerator, HashEmbedder, count_words

    class Forgetful(ExtractingGenerator):
        """The fake engine without its test bookkeeping (it keeps every prompt it saw): the sweep's memory only."""

        def generate(self, prompts: Sequence[str], json_schema: Any = None) -> list[Generation]:
            out = super().generate(prompts, json_schema)
            self.batches.clear()
            self.schemas.clear()
            return out

    class Candidates:
        """Twenty stored-vector candidates per question, made up on the spot (no index)."""

        version = 1

        def retrieve(self, question: str, n: int, mode: str = "hybrid") -> list[Hit]:
            rng = np.random.default_rng(int(hashlib.sha256(question.encode()).hexdigest()[:8], 16))
            return [
                Hit(chunk_id=f"c{i}", doc_id=f"d{i}", title="T", text=f"Passage {i} of {question}.", score=1.0,
                    vector=rng.standard_normal(64).astype(np.float32).tobytes())
                for i in range(n)
            ]  # fmt: skip

    questions = write_jsonl(folder / f"q-{q}.jsonl", [
        {"id": f"q{i}", "question": f"What is fact {i}?", "answers": [f"fact {i}"]} for i in range(q)
    ])  # fmt: skip
    from corpus.chunk import SentenceChunker
    from corpus.index import sync_index
    from corpus.snapshot import latest_snapshot

    embedder = HashEmbedder()
    index = folder / f"sweep-{q}.lancedb"  # a real (tiny) index: the run's identity names its snapshot
    sync_index(list(_docs(5)), SentenceChunker(), embedder, index)
    snapshot = latest_snapshot(index)
    assert snapshot is not None
    comps = Components(
        embedder=embedder, retriever=Candidates(), rerankers={"dense": DenseReranker(embedder)},  # type: ignore[arg-type]
        compressors={"none": NoCompressor(count_words)}, generator=Forgetful(),
        index_version=snapshot.chunk_version, corpus_sha256=snapshot.corpus_sha256,
    )  # fmt: skip
    config = SweepConfig(
        index_path=index, questions_path=questions, store_path=folder / f"sweep-{q}.duckdb", embedder="hash",
        retrieve_n=20, probe_questions=0, grid=GridConfig(compressions=[CompressionSpec()], top_ks=[3]),
    )  # fmt: skip
    t0 = time.perf_counter()
    run_sweep(config, comps, reuse=False)
    return {"seconds": time.perf_counter() - t0, "rss_mb": _rss_mb()}


def _child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"error: step {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", default="10000,100000,1000000")
    parser.add_argument("--questions", default="1000,10000,100000", help="empty: no part 2")
    parser.add_argument(
        "--sentence-vectors",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="store sentence vectors and units, as `cribsheet run` does (default: on)",
    )
    parser.add_argument("--churn", type=float, default=0.08, help="share of the documents the churn night changes")
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, n, folder, sentence_vectors, churn = args.child
        result = (
            sweep_step(int(n), Path(folder))
            if kind == "sweep"
            else index_step(kind, int(n), Path(folder), sentence_vectors == "1", float(churn))
        )
        print(json.dumps(result))
        return
    sizes = [int(x) for x in args.chunks.split(",") if x]
    qs = [int(x) for x in args.questions.split(",") if x]
    rows: dict[int, dict[str, Any]] = {}
    flags = ("1" if args.sentence_vectors else "0", str(args.churn))
    with tempfile.TemporaryDirectory() as tmp:
        print("part 1: real LanceDB, hash-vector embedder (384-d vectors from sha256, no model), one chunk a document,")
        print(f"  sentence vectors {'on' if args.sentence_vectors else 'off'}; nights: one document, {args.churn:.0%}")
        print("  of the documents, one document (scan s: reading and hashing the corpus stream, which any sync pays to")
        print("  learn what changed; index s: the rest of the first sync: the diff, the writes, the snapshot)")
        print(
            f"  {'chunks':>9} {'build s':>8} {'1-doc s':>8} {'scan s':>7} {'index s':>8} {'churn s':>8} "
            f"{'1-doc s':>8} {'peak MB':>8} {'query ms':>9} {'doc rows':>9} {'key rows':>9} {'dup keys':>9}"
        )
        for n in sizes:
            build = _child("build", str(n), tmp, *flags)
            nights = {night: _child(night, str(n), tmp, *flags) for night in NIGHTS}
            query = _child("query", str(n), tmp, *flags)
            scan = _child("scan", str(n), tmp, *flags)
            sync, last = nights["sync"], nights["sync2"]
            duplicates = sum(
                int(v) - int(last[k.replace("_rows", "_distinct_keys")]) for k, v in last.items() if k.endswith("_rows")
            )
            rows[n] = {"build_s": build["seconds"], "sync_s": sync["seconds"], "sync_rss_mb": sync["rss_mb"],
                       "query_ms": query["seconds"] * 1000, "scan_s": scan["seconds"],
                       "index_side_s": max(sync["seconds"] - scan["seconds"], 0.0),
                       "churn_s": nights["churn"]["seconds"], "churn_changed": nights["churn"]["changed"],
                       "sync2_s": last["seconds"], "after_sync": sync, "after_churn": nights["churn"],
                       "after_sync2": last, "side_duplicate_rows": duplicates}  # fmt: skip
            r = rows[n]
            print(
                f"  {n:>9} {r['build_s']:8.1f} {r['sync_s']:8.2f} {r['scan_s']:7.2f} {r['index_side_s']:8.2f} "
                f"{r['churn_s']:8.2f} {r['sync2_s']:8.2f} {r['sync_rss_mb']:8.0f} {r['query_ms']:9.1f} "
                f"{last['doc_rows_scanned']:>9} {last.get('key_rows_scanned', '-'):>9} {duplicates:>9}"
            )
            for old in Path(tmp).glob(f"idx-{n}.lancedb"):
                subprocess.run(["rm", "-rf", str(old)], check=True)
        print("  (doc rows / key rows: rows LanceDB scans, after the last night, to read one changed document's chunks")
        print("   and its sentence vectors; dup keys: side-table rows beyond one per key, which must be 0)")
        sweeps: dict[int, dict[str, float]] = {}
        print("part 2: one setting over Q questions, fake engine and retriever (20 candidates with vectors each)")
        print(f"  {'questions':>9} {'seconds':>9} {'peak MB':>9} {'KB/question':>12}")
        for q in qs:
            sweeps[q] = _child("sweep", str(q), tmp, *flags)
            s = sweeps[q]
            print(f"  {q:>9} {s['seconds']:9.1f} {s['rss_mb']:9.0f} {s['rss_mb'] * 1024 / q:12.1f}")
    lo, hi = sizes[0], sizes[-1]
    report: dict[str, Any] = {
        "embedder": "hash (384-d, sha256; no model)",
        "sentence_vectors": args.sentence_vectors,
        "index": rows,
        "sweep": sweeps,
        "sync_time_ratio": rows[hi]["sync_s"] / rows[lo]["sync_s"],
        "sync_index_side_ratio": rows[hi]["index_side_s"] / max(rows[lo]["index_side_s"], 1e-3),
        "sync_rss_ratio": rows[hi]["sync_rss_mb"] / rows[lo]["sync_rss_mb"],
        "build_per_chunk_ratio": (rows[hi]["build_s"] / hi) / (rows[lo]["build_s"] / lo),
    }
    if len(qs) >= 2:
        report["sweep_rss_ratio"] = sweeps[qs[-1]]["rss_mb"] / sweeps[qs[-2]]["rss_mb"]
    goals = {
        "sync_time_ratio_le_2": report["sync_time_ratio"] <= 2,
        "sync_rss_ratio_le_2": report["sync_rss_ratio"] <= 2,
        "sweep_rss_ratio_le_2": report.get("sweep_rss_ratio", 0) <= 2,
    }
    for k, v in goals.items():
        print(f"goal {k}: {'met' if v else 'MISSED'}")
    print(json.dumps(report | {"goals": goals}))


if __name__ == "__main__":
    main()
