"""Indexing throughput vs a bare sentence-transformers encode, peak memory, retrieval latency and recall.

Runs on the bundled corpus and questions. Prints a table, then one JSON object as the last line.
Usage: .venv/bin/python benchmarks/index_bench.py [--docs N]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=None, help="index only the first N documents")
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()

    from corpus.bundled import CORPUS_FILE, QUESTIONS_FILE, build_bundled
    from corpus.chunk import ChunkerConfig, SentenceChunker
    from corpus.embed import SentenceTransformerEmbedder
    from corpus.index import IndexOptions, indexed_text, sync_index
    from corpus.load import read_jsonl
    from corpus.models import Question
    from corpus.retrieve import RETRIEVAL_MODES, LanceRetriever
    from corpus.sources import SkipLog, SourceConfig, iter_documents
    from eval.rerank import DenseReranker

    work = Path(tempfile.mkdtemp(prefix="cribsheet-bench-"))
    build_bundled(work)
    docs = list(iter_documents(SourceConfig(path=work / CORPUS_FILE), SkipLog()))[: args.docs]
    questions = [q for _, q in read_jsonl(work / QUESTIONS_FILE, Question) if q.answerable]

    emb = SentenceTransformerEmbedder()
    emb.embed_documents(["warm up the model"] * 8)
    chunker = SentenceChunker(ChunkerConfig(), emb.count_tokens)
    texts = [indexed_text(c) for c in chunker.chunk(docs)]

    t0 = time.perf_counter()
    emb.embed_documents(texts)
    bare_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    report = sync_index(docs, chunker, emb, work / "index.lancedb", IndexOptions(rebuild=True))
    index_s = time.perf_counter() - t0
    assert report.n_chunks == len(texts), (report.n_chunks, len(texts))

    retriever = LanceRetriever(work / "index.lancedb", emb)
    reranker = DenseReranker(emb)
    latency: dict[str, list[float]] = {m: [] for m in RETRIEVAL_MODES}
    recall: dict[str, dict[int, float]] = {}
    for mode in RETRIEVAL_MODES:
        hits_at = {5: 0, 20: 0}
        reranked_at = {5: 0, 20: 0}
        for q in questions:
            start = time.perf_counter()
            hits = retriever.retrieve(q.question, 20, mode)
            latency[mode].append(time.perf_counter() - start)
            gold = set(q.gold_doc_ids)
            reranked = reranker.rerank(q.question, hits)
            for k in hits_at:
                hits_at[k] += bool(gold & {h.doc_id for h in hits[:k]})
                reranked_at[k] += bool(gold & {h.doc_id for h in reranked[:k]})
        recall[mode] = {k: v / len(questions) for k, v in hits_at.items()}
        recall[f"{mode}+dense"] = {k: v / len(questions) for k, v in reranked_at.items()}
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    n = len(texts)
    throughput_ratio = bare_s / index_s
    print(f"corpus: {len(docs)} documents, {n} chunks; questions: {len(questions)} answerable")
    print(f"{'stage':<34}{'seconds':>10}{'chunks/s':>12}")
    print(f"{'bare sentence-transformers encode':<34}{bare_s:>10.1f}{n / bare_s:>12.1f}")
    print(f"{'cribsheet index (chunk+embed+write)':<34}{index_s:>10.1f}{n / index_s:>12.1f}")
    print(f"throughput ratio index/bare: {throughput_ratio:.3f}   peak RSS: {peak_mb:.0f} MB")
    print(f"{'retrieval':<16}{'p50 ms':>9}{'p95 ms':>9}{'recall@5':>10}{'recall@20':>11}")
    for mode in RETRIEVAL_MODES:
        lat = latency[mode]
        print(
            f"{mode:<16}{1000 * statistics.median(lat):>9.1f}{1000 * _pct(lat, 0.95):>9.1f}"
            f"{recall[mode][5]:>10.3f}{recall[mode][20]:>11.3f}"
        )
        print(
            f"{mode + ' + dense':<16}{'':>9}{'':>9}{recall[mode + '+dense'][5]:>10.3f}"
            f"{recall[mode + '+dense'][20]:>11.3f}"
        )
    figures = {
        "documents": len(docs),
        "chunks": n,
        "questions": len(questions),
        "bare_encode_s": round(bare_s, 2),
        "index_s": round(index_s, 2),
        "index_throughput_ratio": round(throughput_ratio, 3),
        "peak_rss_mb": round(peak_mb),
        **{f"{m}_p50_ms": round(1000 * statistics.median(latency[m]), 2) for m in RETRIEVAL_MODES},
        **{f"{m}_p95_ms": round(1000 * _pct(latency[m], 0.95), 2) for m in RETRIEVAL_MODES},
        **{f"{m.replace('+', '_')}_recall_at_{k}": round(v, 3) for m, r in recall.items() for k, v in r.items()},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
