"""Scale-out and reuse, side by side in one run; each part prints a table, then one JSON line.

- `memory`: peak RSS and throughput of indexing N documents (the bundled corpus replicated with new ids,
  streamed, never held in memory) at each size, each in a fresh process: memory should be flat in corpus size.
- `ray`: indexing the bundled corpus in this process, on Ray with 1 worker and with 2 workers (a local
  cluster; on a 2-core machine 2 workers can at best match one process using both cores); then a small real
  sweep (vLLM) single-process vs 2 Ray workers: identical rows and metrics?
- `reuse`: the demo grid is swept once (or reused from an earlier run of this benchmark), then the demo grid
  plus one new setting is timed against that setting alone in a fresh store: the ratio should be <= 1.2.

Usage: .venv/bin/python benchmarks/scale.py [memory|ray|reuse|all] [--docs 10000 100000] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).with_name("cribsheet"))


def _replicated(corpus: Path, n: int) -> Iterator[object]:
    """The first `n` documents of the bundled corpus repeated with new ids (`ID~rK`), streamed."""
    from corpus.sources import SkipLog, SourceConfig, iter_documents

    made, copy = 0, 0
    while True:
        for doc in iter_documents(SourceConfig(path=corpus), SkipLog()):
            if made == n:
                return
            yield doc.model_copy(update={"id": f"{doc.id}~r{copy}"}) if copy else doc
            made += 1
        copy += 1


def index_once(work: Path, n: int, ann: bool) -> dict[str, float]:
    """Index `n` documents in this process; peak RSS and throughput (run in a fresh process per size)."""
    from corpus.bundled import CORPUS_FILE
    from corpus.chunk import SentenceChunker
    from corpus.embed import SentenceTransformerEmbedder
    from corpus.index import IndexOptions, sync_index
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    emb = SentenceTransformerEmbedder()
    chunker = SentenceChunker(count_tokens=emb.count_tokens)
    opts = IndexOptions(rebuild=True, **({} if ann else {"ann_threshold": 10**9}))
    t0 = time.perf_counter()
    rep = sync_index(_replicated(work / CORPUS_FILE, n), chunker, emb, work / f"scale-{n}.lancedb", opts)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"documents": rep.n_documents, "chunks": rep.n_chunks, "seconds": seconds, "peak_rss_mb": peak}


def _dataset(work: Path) -> None:
    from corpus.bundled import CORPUS_FILE, build_bundled

    if not (work / CORPUS_FILE).exists():
        build_bundled(work)


def memory(work: Path, sizes: list[int], ann: bool) -> dict[str, object]:
    """Each size indexed in a fresh process."""
    results = []
    for n in sizes:
        cmd = [sys.executable, __file__, "_index", "--work", str(work), "--docs", str(n)] + (["--ann"] if ann else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        results.append(json.loads(out))
        shutil.rmtree(work / f"scale-{n}.lancedb", ignore_errors=True)
    print(f"{'documents':>10}{'chunks':>10}{'seconds':>10}{'chunks/s':>10}{'peak RSS MB':>13}")
    for r in results:
        rate = r["chunks"] / r["seconds"]
        print(f"{r['documents']:>10}{r['chunks']:>10}{r['seconds']:>10.1f}{rate:>10.1f}{r['peak_rss_mb']:>13.0f}")
    small, big = results[0], results[-1]
    figures = {
        "part": "memory",
        "ann_index": ann,
        "sizes": [r["documents"] for r in results],
        "peak_rss_mb": [round(r["peak_rss_mb"]) for r in results],
        "chunks_per_s": [round(r["chunks"] / r["seconds"], 1) for r in results],
        "peak_rss_ratio": round(big["peak_rss_mb"] / small["peak_rss_mb"], 3),
        "throughput_ratio": round((big["chunks"] / big["seconds"]) / (small["chunks"] / small["seconds"]), 3),
    }
    print(json.dumps(figures))
    return figures


def _timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[:3])} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - t0


def ray_part(work: Path, sweep_questions: int) -> dict[str, object]:
    """Indexing in-process vs Ray 1 vs Ray 2 workers; then a real sweep single-process vs 2 Ray workers."""
    from corpus.bundled import CORPUS_FILE, DEMO_FILE

    corpus = str(work / CORPUS_FILE)
    base = [CLI, "index", "--corpus", corpus, "--rebuild"]
    seconds = {
        "in_process": _timed([*base, "--index", str(work / "idx-local.lancedb")]),
        "ray_1": _timed([*base, "--index", str(work / "idx-ray1.lancedb"), "--workers", "1"]),
        "ray_2": _timed([*base, "--index", str(work / "idx-ray2.lancedb"), "--workers", "2"]),
    }
    print(f"{'indexing':<14}{'seconds':>9}")
    for k, v in seconds.items():
        print(f"{k:<14}{v:>9.1f}")
    sweep = [CLI, "sweep", "--index", str(work / "idx-local.lancedb"), "--questions", str(work / DEMO_FILE)]
    sweep += ["--limit", str(sweep_questions), "--top-k", "3", "--compression", "none", "--compression", "extractive:4"]
    sweep += ["--probe-questions", "2", "--no-reuse"]
    for name in ("local", "ray"):
        (work / f"sweep-{name}.duckdb").unlink(missing_ok=True)
    seconds["sweep_local"] = _timed([*sweep, "--store", str(work / "sweep-local.duckdb")])
    seconds["sweep_ray_2"] = _timed([*sweep, "--store", str(work / "sweep-ray.duckdb"), "--workers", "2"])
    same = _same_rows(work / "sweep-local.duckdb", work / "sweep-ray.duckdb")
    print(
        f"sweep single {seconds['sweep_local']:.1f} s, Ray 2 workers {seconds['sweep_ray_2']:.1f} s; rows equal: {same}"
    )
    figures = {
        "part": "ray",
        **{f"{k}_s": round(v, 1) for k, v in seconds.items()},
        "index_ray2_vs_ray1": round(seconds["ray_1"] / seconds["ray_2"], 3),
        "index_ray2_vs_in_process": round(seconds["in_process"] / seconds["ray_2"], 3),
        "sweep_rows_equal": same,
    }
    print(json.dumps(figures))
    return figures


def _same_rows(a: Path, b: Path) -> dict[str, object]:
    import duckdb

    cols = "setting_hash, question_id, answer, answer_contains, answer_token_recall, context_text, faithfulness, status"
    rows = []
    for path in (a, b):
        with duckdb.connect(str(path), read_only=True) as con:
            rows.append(con.execute(f"SELECT {cols} FROM samples ORDER BY setting_hash, question_id").fetchall())
    differing = sum(x != y for x, y in zip(rows[0], rows[1], strict=False)) + abs(len(rows[0]) - len(rows[1]))
    return {"rows": len(rows[0]), "identical": rows[0] == rows[1], "differing": differing}


def reuse(work: Path, limit: int | None = None) -> dict[str, object]:
    """Demo grid (computed once, or reused), then demo grid + one setting vs that setting alone. Nothing may
    change the code in between: the code version is part of the reuse key."""
    from corpus.bundled import DEMO_FILE

    index = work / "idx-local.lancedb"
    if not index.exists():
        _timed([CLI, "index", "--corpus", str(work / "corpus.jsonl"), "--index", str(index)])
    demo = [CLI, "sweep", "--index", str(index), "--questions", str(work / DEMO_FILE)]
    demo += ["--limit", str(limit)] if limit else []
    grid = ["--top-k", "3", "--top-k", "8"] + [
        a for c in ("none", "llmlingua:4", "longllmlingua:4") for a in ("--compression", c)
    ]
    store = work / "reuse.duckdb"
    first = _timed([*demo, *grid, "--store", str(store)])
    added = ["--compression", "extractive:4"]
    with_one = _timed([*demo, *grid, *added, "--store", str(store)])
    (work / "alone.duckdb").unlink(missing_ok=True)
    alone = _timed([*demo, "--top-k", "3", "--top-k", "8", *added, "--store", str(work / "alone.duckdb"), "--no-reuse"])
    print(f"demo grid first sweep (or reused): {first:.1f} s")
    print(f"demo grid + extractive:4 (k3, k8) after it: {with_one:.1f} s; the added settings alone: {alone:.1f} s")
    figures = {
        "part": "reuse",
        "first_s": round(first, 1),
        "with_added_s": round(with_one, 1),
        "alone_s": round(alone, 1),
        "ratio": round(with_one / alone, 3),
    }
    print(json.dumps(figures))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", default="all", choices=["all", "memory", "ray", "reuse", "_index"])
    parser.add_argument("--docs", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench-scale")
    parser.add_argument("--ann", action="store_true", help="memory: let the ANN index build past its threshold")
    parser.add_argument("--sweep-questions", type=int, default=8)
    parser.add_argument("--limit", type=int, default=None, help="reuse: only the first N demo questions")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.part == "_index":
        print(json.dumps(index_once(args.work, args.docs[0], args.ann)))
        return
    _dataset(args.work)
    if args.part in ("all", "memory"):
        memory(args.work, args.docs, args.ann)
    if args.part in ("all", "ray"):
        ray_part(args.work, args.sweep_questions)
    if args.part in ("all", "reuse"):
        reuse(args.work, args.limit)


if __name__ == "__main__":
    main()
