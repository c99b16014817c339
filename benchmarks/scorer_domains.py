"""Trained unit scorers against the bundled bi-encoder on the held-out splits of three domains, without
generation (the context each selector leaves is measured, as in benchmarks/pruned_domains.py).

Domains and held-out splits are benchmarks/pruned_domains.py's (encyclopedia: 329 hand-written questions;
django-docs: 126 hand-written; nodejs-docs: 295 from the structure-aware generator). Each question's top-8 is
the sweep's: hybrid retrieval of 20, dense reranking. For the bi-encoder (the index's stored unit vectors, what
`pruned` scores with today) and for each trained scorer given with --scorer NAME=FOLDER:

- unit-ranking AUC: the units of each top-8 labelled by the reference's content words as training labels them
  (positive: at least 60 %, negative: at most 25 %), mean per question (the ranking inside one context) and
  pooled;
- `pruned` 4x and `pruned-auto` (defaults, ceiling 8x) with that scorer: context token recall and its loss
  against the uncompressed top-8 (points, with a 95 % interval of the paired per-question loss), realized
  context ratio, prompt ratio (prompt tokens the prefill pays, uncompressed / these), and the scorer's seconds
  per question (one batch per question);
- as reranker of the 20 candidates: gold-document recall@3 and @8 against dense, retrieval order and (with
  --query-likelihood) query likelihood under the bundled generator, and its seconds per question.

The encyclopedia index is built where missing (runs/bench-levers/index.lancedb); the documentation indexes as
docs/pruning.md says.

    .venv/bin/python benchmarks/scorer_domains.py --scorer django=runs/scorer-django --scorer nodejs=runs/scorer-nodejs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

POSITIVE, NEGATIVE = 0.6, 0.25
"""Unit labels, as `cribsheet train-scorer` draws them (eval/train/pairs.py PairRules)."""
PREFILL_S_PER_TOKEN = 0.81 / 1000
"""SmolLM2-135M bf16 prefill on this kind of CPU, 2 threads: 1,000 tokens in 0.81 s (docs/design.md)."""


class MemoScorer:
    """A scorer whose scores are kept by (question, unit): the AUC pass, `pruned` and `pruned-auto` score
    each unit once; the seconds of each question's first (real) batch are recorded."""

    name = "memo"

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.kept: dict[tuple[str, str], float] = {}
        self.seconds: dict[str, float] = {}

    def score(self, question: str, units: Sequence[str]) -> Any:
        import numpy as np

        missing = list(dict.fromkeys(u for u in units if (question, u) not in self.kept))
        if missing:
            start = time.perf_counter()
            got = self.inner.score(question, missing)
            self.seconds[question] = self.seconds.get(question, 0.0) + time.perf_counter() - start
            self.kept.update({(question, u): float(s) for u, s in zip(missing, got, strict=True)})
        return np.array([self.kept[(question, u)] for u in units], dtype=np.float32)


def interval(diffs: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of the normal 95 % interval of paired differences."""
    mean = statistics.mean(diffs)
    half = 1.96 * statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
    return mean, half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scorer",
        action="append",
        default=[],
        help="NAME=FOLDER (cross-encoder) or NAME=KIND:FOLDER of a trained scorer; repeat",
    )
    parser.add_argument("--domains", nargs="*", default=["encyclopedia", "django-docs", "nodejs-docs"])
    parser.add_argument("--limit", type=int, default=None, help="first N held-out questions per domain")
    parser.add_argument(
        "--query-likelihood", action="store_true", help="also rerank by query likelihood (the generator, ~3 s/q)"
    )
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    from pruned_domains import domains

    from corpus.embed import SentenceTransformerEmbedder
    from corpus.retrieve import LanceRetriever
    from corpus.sentences import SentenceVectors
    from eval.compress.pruned import PrunedCompressor, PrunedConfig
    from eval.compress.pruned_auto import AutoPrunedCompressor, AutoPrunedConfig
    from eval.compress.scorer import build_scorer, scored_text
    from eval.metrics import context_token_recall
    from eval.prompt import context_block
    from eval.rerank import DenseReranker, RerankerDeps, build_reranker
    from eval.run.tune_pruning import prompt_counter, token_counter
    from eval.train.card import per_question_auc, ranking_auc
    from eval.train.pairs import unit_spans_of

    # NAME=FOLDER (a cross-encoder) or NAME=KIND:FOLDER (cross-encoder or bi-encoder, as the scorer registry names them)
    scorers = {n: ref if ref.partition(":")[0] in ("cross-encoder", "bi-encoder") else f"cross-encoder:{ref}"
               for n, ref in (s.split("=", 1) for s in args.scorer)}  # fmt: skip
    count, prompt = token_counter(None), prompt_counter(None)
    emb = SentenceTransformerEmbedder()
    work = Path(tempfile.mkdtemp(prefix="cribsheet-scorer-domains-"))
    figures: dict[str, Any] = {}
    rows: list[tuple[str, ...]] = []
    rerank_rows: list[tuple[str, ...]] = []
    ql: Any = None
    if args.query_likelihood:  # the 135M generator through vLLM: mean log p(question | passage)
        from eval.engine.generator import GeneratorConfig
        from eval.run.wiring import build_generator

        ql = build_reranker("query-likelihood", RerankerDeps(embedder=emb, scorer=build_generator(GeneratorConfig())))
    for domain, (index, splits) in domains(work, emb).items():
        if domain not in args.domains:
            continue
        questions = splits["test"][: args.limit] if args.limit else splits["test"]
        retriever, dense = LanceRetriever(index, emb), DenseReranker(emb)
        stored = SentenceVectors(index, retriever.version)  # the snapshot the chunks come from
        candidates = [(q, retriever.retrieve(q.question, 20)) for q in questions]
        tops = [(q, dense.rerank(q.question, hits)[:8]) for q, hits in candidates]
        base = [
            context_token_recall(context_block([h.heading for h in t], [h.text for h in t]), q.answers) for q, t in tops
        ]
        full_prompt = statistics.mean(
            prompt(context_block([h.heading for h in t], [h.text for h in t]), q.question) for q, t in tops
        )
        print(f"\n{domain}: {len(questions)} held-out questions, uncompressed context token recall "
              f"{statistics.mean(base):.3f}, {full_prompt:.0f} prompt tokens")  # fmt: skip

        # Every scorer's unit scores, labelled units of each top-8 (the AUC pass scores what pruned will).
        labelled: list[tuple[str, list[Any], list[float]]] = []
        for q, t in tops:
            spans = unit_spans_of([h.text for h in t], stored)
            recalls = [context_token_recall(s[1], q.answers) for s in spans]
            labelled.append((q.question, spans, recalls))
        unit_scores: dict[str, list[list[float]]] = {}
        vectors, _ = stored.lookup_with_cost(list({s[1] for _, spans, _ in labelled for s in spans}))
        unit_scores["bi-encoder"] = []
        for question, spans, _ in labelled:
            qv = emb.embed_query(question)
            missing = [sp[1] for sp in spans if sp[1] not in vectors]
            if missing:
                vectors |= dict(zip(missing, emb.embed_documents(missing), strict=True))
            unit_scores["bi-encoder"].append([float(vectors[sp[1]] @ qv) for sp in spans])
        memos = {name: MemoScorer(build_scorer(ref)) for name, ref in scorers.items()}
        for name, memo in memos.items():
            unit_scores[name] = [
                [float(x) for x in memo.score(question, [scored_text(spans, i) for i in range(len(spans))])]
                for question, spans, _ in labelled
            ]
        for name in ["bi-encoder", *memos]:
            qs, ys, ss = [], [], []
            for (question, _, recalls), scores in zip(labelled, unit_scores[name], strict=True):
                for r, s in zip(recalls, scores, strict=True):
                    if r >= POSITIVE or r <= NEGATIVE:
                        qs.append(question)
                        ys.append(1.0 if r >= POSITIVE else 0.0)
                        ss.append(s)
            auc_q, auc = per_question_auc(qs, ys, ss), ranking_auc(ys, ss)
            scorer_s = statistics.mean(memos[name].seconds.values()) if name in memos else None
            key = f"{domain}_{name}"
            figures[f"{key}_unit_auc_per_question"] = round(auc_q or 0.0, 3)
            figures[f"{key}_unit_auc"] = round(auc or 0.0, 3)
            if scorer_s is not None:
                figures[f"{key}_scorer_s_per_question"] = round(scorer_s, 3)
            for label, ratio in (("pruned-4x", 4.0), ("pruned-auto", 8.0)):
                scorer = memos.get(name)
                comp = (
                    PrunedCompressor(count, emb, stored, True, PrunedConfig(), scorer)
                    if label == "pruned-4x"
                    else AutoPrunedCompressor(count, emb, stored, AutoPrunedConfig(), scorer)
                )
                recalls, tok_in, tok_out, prompts = [], 0, 0, []
                for q, t in tops:
                    r = comp.compress([h.text for h in t], q.question, ratio)
                    kept = r.kept if r.kept is not None else list(range(len(t)))
                    context = context_block([t[i].heading for i in kept], r.texts)
                    recalls.append(context_token_recall(context, q.answers))
                    tok_in, tok_out = tok_in + r.tokens_in, tok_out + r.tokens_out
                    prompts.append(prompt(context, q.question))
                loss, half = interval([b - k for b, k in zip(base, recalls, strict=True)])
                prompt_ratio = full_prompt / statistics.mean(prompts)
                saved_s = (full_prompt - statistics.mean(prompts)) * PREFILL_S_PER_TOKEN
                cost = f"{scorer_s:.3f} s ({scorer_s / saved_s:.2f}x the prefill saved)" if scorer_s else "-"
                rows.append((domain, name, label, f"{auc_q or 0:.3f}", f"{-100 * loss:+.1f} ± {100 * half:.1f}",
                             f"{tok_in / max(tok_out, 1):.2f}x", f"{prompt_ratio:.2f}x", cost))  # fmt: skip
                figures[f"{key}_{label}_loss_points"] = round(100 * loss, 1)
                figures[f"{key}_{label}_loss_ci_points"] = round(100 * half, 1)
                figures[f"{key}_{label}_context_ratio"] = round(tok_in / max(tok_out, 1), 2)
                figures[f"{key}_{label}_prompt_ratio"] = round(prompt_ratio, 2)
                print(f"  {name:<12} {label:<12} AUC/question {auc_q or 0:.3f} (pooled {auc or 0:.3f})  loss "
                      f"{-100 * loss:+.1f} ± {100 * half:.1f} points  {tok_in / max(tok_out, 1):.2f}x context  "
                      f"{prompt_ratio:.2f}x prompt  scorer {cost}")  # fmt: skip
        # Rerankers of the 20 candidates: gold-document recall at 3 and 8.
        rerankers: dict[str, Any] = {"retrieval order": None, "dense": dense}
        rerankers |= {name: build_reranker(ref, RerankerDeps()) for name, ref in scorers.items()}
        if ql is not None:
            rerankers["query-likelihood"] = ql
        for name, reranker in rerankers.items():
            at3, at8, seconds = [], [], []
            for q, hits in candidates:
                start = time.perf_counter()
                ranked = reranker.rerank(q.question, hits) if reranker is not None else list(hits)
                seconds.append(time.perf_counter() - start)
                gold = set(q.gold_doc_ids)
                at3.append(float(any(h.doc_id in gold for h in ranked[:3])))
                at8.append(float(any(h.doc_id in gold for h in ranked[:8])))
            r3, r8, sec = statistics.mean(at3), statistics.mean(at8), statistics.mean(seconds)
            rerank_rows.append((domain, name, f"{r3:.3f}", f"{r8:.3f}", f"{sec:.3f}"))
            figures[f"{domain}_rerank_{name.replace(' ', '_')}_recall_at_3"] = round(r3, 3)
            figures[f"{domain}_rerank_{name.replace(' ', '_')}_recall_at_8"] = round(r8, 3)
            figures[f"{domain}_rerank_{name.replace(' ', '_')}_s_per_question"] = round(sec, 3)
            print(f"  reranker {name:<16} recall@3 {r3:.3f}  recall@8 {r8:.3f}  {sec:.3f} s/question")
    print("\nheld-out splits: unit scorer x selector (loss: context token recall vs uncompressed top-8, 95 % CI)")
    print(f"{'domain':<14}{'scorer':<12}{'selector':<13}{'AUC/q':>7}{'loss (points)':>16}{'context':>9}"
          f"{'prompt':>8}  scorer s/question")  # fmt: skip
    for r in rows:
        print(f"{r[0]:<14}{r[1]:<12}{r[2]:<13}{r[3]:>7}{r[4]:>16}{r[5]:>9}{r[6]:>8}  {r[7]}")
    print("\nrerankers of the 20 hybrid candidates: gold-document recall")
    print(f"{'domain':<14}{'reranker':<18}{'@3':>7}{'@8':>7}{'s/question':>12}")
    for r in rerank_rows:
        print(f"{r[0]:<14}{r[1]:<18}{r[2]:>7}{r[3]:>7}{r[4]:>12}")
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
