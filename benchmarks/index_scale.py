"""Does a nightly sync cost what changed, and does a sweep's memory stay flat in the question count?

Part 1, the index (real LanceDB, a hash-vector embedder: 384-d vectors from sha256, no model; said so in the
output): a corpus of N chunks (one chunk a document) built in full, then one document changed and synced, then
one query. Reported per N: full build seconds, one-document sync seconds and the sync's peak RSS (its own
process), query milliseconds, and the sync split in two: the scan (reading and hashing the corpus stream,
which any sync pays to learn what changed, timed alone in its own process) and the rest. Each size runs in a
fresh process, so peak RSS is that step's.

Part 2, the sweep (a fake engine and a fake retriever that hands each question 20 candidates with stored
vectors, so what is measured is the sweep's own memory, not a model's): one setting over Q questions, the
run's peak RSS per question.

The last line is one JSON object: `sync_time_ratio` and `sync_rss_ratio` (the largest N against the smallest),
`sync_index_side_ratio` (the sync less the scan), `sweep_rss_ratio` (the largest Q against the middle one).
Goals: both sync ratios <= 2, full build time about linear, peak RSS at the largest Q <= 2x the middle one.
Usage:
  .venv/bin/python benchmarks/index_scale.py [--chunks 10000,100000,1000000] [--questions 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
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


def _docs(n: int, changed: bool = False) -> Any:
    from corpus.models import Document

    for i in range(n):
        text = f"Document {i} is about subject {i % 977} and place {i % 131}. It says fact {i}."
        if changed and i == n // 2:
            text += " This document was edited tonight."
        yield Document(id=f"d{i:07d}", title=f"Doc {i}", text=text)


def index_step(step: str, n: int, folder: Path) -> dict[str, float]:
    """One step in this process: `build` (full), `sync` (one document changed) or `query`."""
    from corpus.chunk import SentenceChunker
    from corpus.index import IndexOptions, sync_index
    from corpus.retrieve import LanceRetriever
    from tests.fakes import HashEmbedder

    embedder = HashEmbedder(dim=384)
    path = folder / f"idx-{n}.lancedb"
    opts = IndexOptions(batch_chunks=20_000, ann_threshold=10**9)
    t0 = time.perf_counter()
    if step == "scan":  # what any sync pays to learn what changed: read the stream, hash every document
        n_docs = sum(1 for doc in _docs(n, changed=True) if doc.content_hash())
        assert n_docs == n
    elif step == "build":
        sync_index(_docs(n), SentenceChunker(), embedder, path, opts)
    elif step == "sync":
        report = sync_index(_docs(n, changed=True), SentenceChunker(), embedder, path, opts)
        assert report.changed == 1 and not report.rebuilt, report
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


def _child(*args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"error: step {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", default="10000,100000,1000000")
    parser.add_argument("--questions", default="1000,10000,100000")
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, n, folder = args.child
        result = sweep_step(int(n), Path(folder)) if kind == "sweep" else index_step(kind, int(n), Path(folder))
        print(json.dumps(result))
        return
    sizes = [int(x) for x in args.chunks.split(",") if x]
    qs = [int(x) for x in args.questions.split(",") if x]
    rows: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        print("part 1: real LanceDB, hash-vector embedder (384-d vectors from sha256, no model), one chunk a document")
        print("  (scan s: reading and hashing the corpus stream, which any sync pays to learn what changed; index s:")
        print("   the rest of the sync, what the index costs: the diff, the writes, the snapshot)")
        print(
            f"  {'chunks':>9} {'full build s':>13} {'1-doc sync s':>13} {'scan s':>10} {'index s':>10} "
            f"{'sync peak MB':>13} {'query ms':>9}"
        )
        for n in sizes:
            build = _child("build", str(n), tmp)
            sync = _child("sync", str(n), tmp)
            query = _child("query", str(n), tmp)
            scan = _child("scan", str(n), tmp)
            rows[n] = {"build_s": build["seconds"], "sync_s": sync["seconds"], "sync_rss_mb": sync["rss_mb"],
                       "query_ms": query["seconds"] * 1000, "scan_s": scan["seconds"],
                       "index_side_s": max(sync["seconds"] - scan["seconds"], 0.0)}  # fmt: skip
            r = rows[n]
            print(
                f"  {n:>9} {r['build_s']:13.1f} {r['sync_s']:13.2f} {r['scan_s']:10.2f} {r['index_side_s']:10.2f} "
                f"{r['sync_rss_mb']:13.0f} {r['query_ms']:9.1f}"
            )
            for old in Path(tmp).glob(f"idx-{n}.lancedb"):
                subprocess.run(["rm", "-rf", str(old)], check=True)
        sweeps: dict[int, dict[str, float]] = {}
        print("part 2: one setting over Q questions, fake engine and retriever (20 candidates with vectors each)")
        print(f"  {'questions':>9} {'seconds':>9} {'peak MB':>9} {'KB/question':>12}")
        for q in qs:
            sweeps[q] = _child("sweep", str(q), tmp)
            s = sweeps[q]
            print(f"  {q:>9} {s['seconds']:9.1f} {s['rss_mb']:9.0f} {s['rss_mb'] * 1024 / q:12.1f}")
    lo, hi = sizes[0], sizes[-1]
    report: dict[str, Any] = {
        "embedder": "hash (384-d, sha256; no model)",
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
