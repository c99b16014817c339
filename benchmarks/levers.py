"""The levers, measured side by side in one run: TTFT, end-to-end crib-sheet latency, compressor cost, warm cache.

For each compressor at 4x on the top-8 context of a sample of bundled answerable questions:
- TTFT ratio uncompressed / 4x (generator alone, serial probes after a cache reset),
- end-to-end ratio: retrieve + rerank + compress (cold: nothing cached) + TTFT,
- compressor seconds as a fraction of the prefill seconds it saves, and the break-even per token,
- answer and context answer recall;
plus cold/warm TTFT of the stable prefix (system prompt alone, and with pinned reference documents).
Prints a table, then one JSON object as the last line.
Usage: .venv/bin/python benchmarks/levers.py [--questions N] [--index PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import levers_knobs  # benchmarks/levers_knobs.py, next to this script

COMPRESSORS = ["none", "llmlingua", "longllmlingua", "extractive", "engine-lingua", "pruned"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--ratio", type=float, default=4.0)
    parser.add_argument("--retrieve", type=int, default=20, help="candidates retrieved before reranking")
    parser.add_argument("--max-model-len", type=int, default=4096, help="8192 for the ~4,000-token point")
    parser.add_argument("--compressors", nargs="+", default=COMPRESSORS)
    parser.add_argument("--knobs", action="store_true", help="also vary the engine's prefill knobs")
    parser.add_argument("--no-cited", action="store_true", help="skip the cited-json pass")
    parser.add_argument("--index", type=Path, default=Path("runs/bench-levers/index.lancedb"))
    args = parser.parse_args()
    names = args.compressors if "none" in args.compressors else ["none", *args.compressors]
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()

    from corpus.bundled import CORPUS_FILE, answerable_questions, bundled_index
    from corpus.embed import SentenceTransformerEmbedder
    from corpus.index import IndexOptions
    from corpus.retrieve import LanceRetriever
    from corpus.sources import SkipLog, SourceConfig, iter_documents
    from eval.compress import COMPRESSORS as REGISTRY
    from eval.compress import CompressorDeps
    from eval.compress.cache import MemoryCache
    from eval.engine.bundled_models import smollm2_dir
    from eval.engine.generator import GeneratorConfig
    from eval.metrics import answer_contains, context_answer_recall
    from eval.prompt import PromptLayout, context_block
    from eval.rerank import DenseReranker
    from eval.run.wiring import build_generator
    from eval.settings import CompressorConfig

    work = Path(tempfile.mkdtemp(prefix="cribsheet-levers-"))
    emb = SentenceTransformerEmbedder()
    # The index stores sentence vectors, so the pruned compressor pays only a lookup at query time.
    retriever = LanceRetriever(bundled_index(args.index, work, emb, IndexOptions(sentence_vectors=True)), emb)
    questions = answerable_questions(work, limit=args.questions)
    reranker = DenseReranker(emb)
    lm = str(smollm2_dir())
    gen_config = GeneratorConfig(model=lm, max_model_len=args.max_model_len)
    gen: Any = build_generator(gen_config)

    def fresh_compressors() -> dict:
        # A fresh in-memory cache per compressor: the bill for a passage never seen before.
        deps = CompressorDeps(
            count_tokens=gen.count_tokens,
            default_model=lm,
            embedder=emb,
            scorer=gen,
            cache=MemoryCache(),
            index_path=args.index,
        )
        defaults = CompressorConfig().model_dump()
        return {name: REGISTRY.build(REGISTRY.spec(name, defaults), deps) for name in names}

    compressors = fresh_compressors()
    layout = PromptLayout(gen.tokenizer)
    prefix = layout.stable_prefix()

    rows: dict[str, list[dict]] = {c: [] for c in names}
    for q in questions:
        t0 = time.perf_counter()
        hits = retriever.retrieve(q.question, args.retrieve)
        t1 = time.perf_counter()
        top = reranker.rerank(q.question, hits)[: args.top_k]
        t2 = time.perf_counter()
        for name in names:
            comp = compressors[name].compress([h.text for h in top], q.question, args.ratio if name != "none" else 1.0)
            kept = comp.kept if comp.kept is not None else list(range(len(top)))
            titles = [top[i].heading for i in kept] if len(kept) == len(comp.texts) else [""] * len(comp.texts)
            context = context_block(titles, comp.texts)
            prompt = layout.render(context, q.question)
            gen.reset_cache()
            gen.warm(prefix)
            probe = gen.probe(prompt)
            rows[name].append(
                {
                    "retrieve": t1 - t0,
                    "rerank": t2 - t1,
                    # Cold: what this context's compression costs from nothing, whichever earlier question
                    # computed (and cached) some of its passages; the paid cost is kept beside it.
                    "compress": comp.seconds if comp.cold_seconds is None else comp.cold_seconds,
                    "compress_paid": comp.seconds,
                    "ttft": probe.ttft_s,  # None when the engine reported none: left out of means, never 0
                    "prefill": probe.prefill_s,
                    "tokens_in": comp.tokens_in,
                    "tokens_out": comp.tokens_out,
                    "prompt": prompt,
                    "context": context,
                    "golds": q.answers,
                    "question": q.question,
                    "docs": [top[i].doc_id for i in kept] if len(kept) == len(comp.texts) else [],
                    "n_passages": len(comp.texts),  # numbered in the prompt: what a citation may name
                    "gold_docs": list(q.gold_doc_ids),
                    "uncached": probe.prompt_tokens - probe.cached_tokens,
                }
            )
    # The same passages again (as for a later question that retrieves them, or after an index-time
    # precompute): agnostic compressors hit their cache; extractive reuses its sentence vectors.
    for i, q in enumerate(questions):
        top = reranker.rerank(q.question, retriever.retrieve(q.question, args.retrieve))[: args.top_k]
        for name in names:
            start = time.perf_counter()
            compressors[name].compress([h.text for h in top], q.question, args.ratio if name != "none" else 1.0)
            rows[name][i]["compress_warm"] = time.perf_counter() - start
    for name in names:
        answers = gen.generate([r["prompt"] for r in rows[name]])
        for r, a in zip(rows[name], answers, strict=True):
            r["answer_recall"] = answer_contains(a.text, r["golds"])
            r["context_recall"] = context_answer_recall(r["context"], r["golds"])

    def mean(name: str, key: str) -> float:
        values = [r[key] for r in rows[name] if r[key] is not None]
        if not values:
            sys.exit(f"error: the engine reported no {key} for {name}; run with a vLLM that reports metrics")
        return statistics.fmean(values)

    base_ttft, base_prefill = mean("none", "ttft"), mean("none", "prefill")
    base_e2e = mean("none", "retrieve") + mean("none", "rerank") + base_ttft
    prefill_per_token = base_prefill / mean("none", "uncached")
    figures: dict[str, float | int] = {
        "questions": len(questions),
        "top_k": args.top_k,
        "generator_prefill_s_per_token": round(prefill_per_token, 6),
    }
    print(f"{len(questions)} answerable questions, top-{args.top_k} context, requested ratio {args.ratio:g}x")
    header = (
        f"{'compressor':<15}{'ratio':>7}{'TTFT s':>8}{'TTFT x':>8}{'compress s':>11}{'e2e s':>8}{'e2e x':>7}"
        f"{'cost/saved':>11}{'s/token':>10}{'warm s':>8}{'warm c/s':>9}{'ans rec':>8}{'ctx rec':>8}"
    )
    print(header)
    for name in names:
        ttft, comp_s = mean(name, "ttft"), mean(name, "compress")
        e2e = mean(name, "retrieve") + mean(name, "rerank") + comp_s + ttft
        realized = sum(r["tokens_in"] for r in rows[name]) / max(1, sum(r["tokens_out"] for r in rows[name]))
        saved = base_prefill - mean(name, "prefill")
        cost_fraction = comp_s / saved if saved > 0 else float("inf")
        per_token = comp_s / mean(name, "tokens_in")
        warm_s = mean(name, "compress_warm")
        warm_fraction = warm_s / saved if saved > 0 else float("inf")
        print(
            f"{name:<15}{realized:>7.2f}{ttft:>8.3f}{base_ttft / ttft:>8.2f}{comp_s:>11.3f}{e2e:>8.3f}"
            f"{base_e2e / e2e:>7.2f}{cost_fraction:>11.2f}{per_token:>10.5f}{warm_s:>8.3f}{warm_fraction:>9.2f}"
            f"{mean(name, 'answer_recall'):>8.3f}{mean(name, 'context_recall'):>8.3f}"
        )
        key = name.replace("-", "_")
        figures |= {
            f"{key}_realized_ratio": round(realized, 3),
            f"{key}_ttft_s": round(ttft, 4),
            f"{key}_compress_s": round(comp_s, 4),  # cold
            f"{key}_compress_paid_s": round(mean(name, "compress_paid"), 4),
            f"{key}_answer_recall": round(mean(name, "answer_recall"), 3),
            f"{key}_context_answer_recall": round(mean(name, "context_recall"), 3),
        }
        if name != "none":
            figures |= {
                f"{key}_ttft_speedup_ratio": round(base_ttft / ttft, 3),
                f"{key}_e2e_speedup_ratio": round(base_e2e / e2e, 3),
                f"{key}_cost_over_prefill_saved_ratio": round(cost_fraction, 3),
                f"{key}_compress_s_per_token": round(per_token, 6),
                f"{key}_warm_compress_s": round(warm_s, 4),
                f"{key}_warm_cost_over_prefill_saved_ratio": round(warm_fraction, 3),
                f"{key}_warm_e2e_speedup_ratio": round(base_e2e / (e2e - comp_s + warm_s), 3),
            }
    print(f"break-even: a compressor pays on one request only below {prefill_per_token:.6f} s per context token")

    docs = [
        d for _, d in zip(range(12), iter_documents(SourceConfig(path=work / CORPUS_FILE), SkipLog()), strict=False)
    ]
    for label, lay in [
        ("system prompt", layout),
        ("system + pinned docs", PromptLayout(gen.tokenizer, pinned=[f"{d.title}: {d.text}" for d in docs])),
    ]:
        stable = lay.stable_prefix()
        gen.reset_cache()
        cold = gen.probe(stable)
        warm = gen.probe(stable)
        ratio = (warm.ttft_s or 0) / (cold.ttft_s or 1)
        print(
            f"stable prefix ({label}): {cold.prompt_tokens} tokens, {warm.cached_tokens} served from cache; "
            f"TTFT cold {cold.ttft_s:.3f} s, warm {warm.ttft_s:.3f} s, warm/cold {ratio:.3f}"
        )
        key = "prefix" if label == "system prompt" else "pinned_prefix"
        figures |= {
            f"{key}_tokens": cold.prompt_tokens,
            f"{key}_cached_tokens": warm.cached_tokens,
            f"{key}_warm_cold_ratio": round(ratio, 3),
        }
    if not args.no_cited:
        try:
            figures |= levers_knobs.cited(gen, layout, rows)
        except Exception as exc:  # structured output refused by this engine build: a finding, reported
            print(f"cited-json: the engine failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            figures["cited_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    if args.knobs:
        gen.close()
        prompts = [r["prompt"] for r in rows["none"]]
        golds = [r["golds"] for r in rows["none"]]
        figures |= levers_knobs.knobs(gen_config, prompts, golds, prefix, n_probe=min(8, len(prompts)))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
