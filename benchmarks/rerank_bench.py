"""Which reranker should be the offline default? Recall@k of the gold document before and after reranking.

Candidates: the retriever's own order (hybrid RRF), dense cosine (the embedder), and query likelihood
(UPR: mean log p(question | passage) under the generator LM through vLLM prompt_logprobs).
Runs on every bundled answerable question. Prints a table, then one JSON object as the last line.
Usage: .venv/bin/python benchmarks/rerank_bench.py [--questions N] [--candidates N] [--index PATH]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

KS = (1, 3, 5, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=None)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--index", type=Path, default=Path("runs/demo/index.lancedb"))
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()

    from corpus.bundled import QUESTIONS_FILE, answerable_questions, bundled_index
    from corpus.embed import SentenceTransformerEmbedder
    from corpus.retrieve import LanceRetriever
    from eval.engine.generator import GeneratorConfig
    from eval.rerank import RerankerDeps, build_reranker
    from eval.run.wiring import build_generator

    work = Path(tempfile.mkdtemp(prefix="cribsheet-rerank-"))
    emb = SentenceTransformerEmbedder()
    retriever = LanceRetriever(bundled_index(args.index, work, emb), emb)
    questions = answerable_questions(work, QUESTIONS_FILE, args.questions)
    gen: Any = build_generator(GeneratorConfig())
    deps = RerankerDeps(embedder=emb, scorer=gen)
    rerankers = {name: build_reranker(name, deps) for name in ("none", "dense", "query-likelihood")}

    hits_at = {name: dict.fromkeys(KS, 0) for name in rerankers}
    seconds = dict.fromkeys(rerankers, 0.0)
    for q in questions:
        cands = retriever.retrieve(q.question, args.candidates)
        gold = set(q.gold_doc_ids)
        for name, reranker in rerankers.items():
            start = time.perf_counter()
            ranked = reranker.rerank(q.question, cands)
            seconds[name] += time.perf_counter() - start
            for k in KS:
                hits_at[name][k] += bool(gold & {h.doc_id for h in ranked[:k]})
    n = len(questions)
    print(f"{n} answerable questions, {args.candidates} hybrid candidates each")
    print(f"{'reranker':<18}" + "".join(f"{'R@' + str(k):>8}" for k in KS) + f"{'s/question':>12}")
    figures: dict[str, float | int] = {"questions": n, "candidates": args.candidates}
    for name in rerankers:
        print(f"{name:<18}" + "".join(f"{hits_at[name][k] / n:>8.3f}" for k in KS) + f"{seconds[name] / n:>12.3f}")
        key = name.replace("-", "_")
        figures |= {f"{key}_recall_at_{k}": round(hits_at[name][k] / n, 3) for k in KS}
        figures[f"{key}_s_per_question"] = round(seconds[name] / n, 4)
    best = max(rerankers, key=lambda m: (hits_at[m][3], hits_at[m][1], -seconds[m]))
    figures["ql_over_dense_recall_at_3_ratio"] = round(hits_at["query-likelihood"][3] / max(1, hits_at["dense"][3]), 3)
    print(f"best by recall@3 (then @1, then speed): {best}")
    print(json.dumps(figures | {"best": best}))


if __name__ == "__main__":
    main()
