"""The semantic answer cache's threshold, chosen on tuning pairs and judged on held-out pairs.

Pairs come from the question generator over the bundled corpus (`corpus.question_pairs`): paraphrases of
the same fact (should hit) and near misses (the same sentence asked about another slot, or the same
question about another document's subject: must not hit). Pairs are split by sha256 of their id: even
last hex digit -> tuning (the threshold is chosen there: the lowest threshold whose false-hit rate on
near misses is at most the budget), odd -> evaluation (the figures reported). The embedder is the
sweep's own (all-MiniLM-L6-v2). Prints a table per threshold, then one JSON line.

Usage: .venv/bin/python benchmarks/answer_cache.py [--budget 0.01] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
THRESHOLDS = [round(0.80 + 0.01 * i, 2) for i in range(20)]


def _rates(sims: np.ndarray, should_hit: np.ndarray, t: float) -> tuple[float, float]:
    hit = sims >= t
    return float(hit[should_hit].mean()), float(hit[~should_hit].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=0.01, help="false-hit rate allowed on near misses")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench-scale")
    args = parser.parse_args()
    from corpus.bundled import CORPUS_FILE, build_bundled
    from corpus.embed import SentenceTransformerEmbedder
    from corpus.question_pairs import question_pairs
    from corpus.runtime import quiet_offline_env
    from corpus.sources import SkipLog, SourceConfig, iter_documents

    quiet_offline_env()
    if not (args.work / CORPUS_FILE).exists():
        build_bundled(args.work)
    pairs = question_pairs(iter_documents(SourceConfig(path=args.work / CORPUS_FILE), SkipLog()))
    emb = SentenceTransformerEmbedder()
    texts = sorted({t for p in pairs for t in (p.a, p.b)})
    t0 = time.perf_counter()
    vectors = dict(zip(texts, emb.embed_documents(texts), strict=True))
    embed_s = (time.perf_counter() - t0) / len(texts)
    one = time.perf_counter()
    for text in texts[:50]:
        emb.embed_query(text)
    query_s = (time.perf_counter() - one) / 50
    sims = np.array([float(vectors[p.a] @ vectors[p.b]) for p in pairs])
    should = np.array([p.should_hit for p in pairs])
    kinds = np.array([p.kind for p in pairs])
    tune = np.array([int(hashlib.sha256(p.id.encode()).hexdigest()[-1], 16) % 2 == 0 for p in pairs])

    chosen = next((t for t in THRESHOLDS if _rates(sims[tune], should[tune], t)[1] <= args.budget), None)
    print(f"pairs: {len(pairs)} ({int(tune.sum())} tuning, {int((~tune).sum())} evaluation)")
    print(f"{'threshold':>10}{'hit (tune)':>12}{'false (tune)':>14}{'hit (eval)':>12}{'false (eval)':>14}")
    for t in THRESHOLDS:
        ht, ft = _rates(sims[tune], should[tune], t)
        he, fe = _rates(sims[~tune], should[~tune], t)
        mark = "  <- chosen" if t == chosen else ""
        print(f"{t:>10.2f}{ht:>12.3f}{ft:>14.3f}{he:>12.3f}{fe:>14.3f}{mark}")
    figures: dict[str, object] = {
        "pairs": len(pairs),
        "by_kind": {k: int((kinds == k).sum()) for k in sorted(set(kinds))},
        "budget": args.budget,
        "chosen_threshold": chosen,
        "lookup_s_per_question": round(query_s, 5),
        "embed_s_per_text_batched": round(embed_s, 5),
    }
    if chosen is not None:
        ev = ~tune
        hit, false = _rates(sims[ev], should[ev], chosen)
        figures |= {"eval_hit_rate": round(hit, 3), "eval_false_hit_rate": round(false, 4)}
        for k in ("near_miss_attribute", "near_miss_entity"):
            sel = ev & (kinds == k)
            figures[f"eval_false_hit_{k}"] = round(float((sims[sel] >= chosen).mean()), 4)
        n_false = int(((sims >= chosen) & ~should & ev).sum())
        figures["eval_false_hits"] = n_false
        print(f"chosen on tuning pairs: {chosen}; evaluation: hit rate {hit:.3f}, false-hit rate {false:.4f}")
    else:
        print(f"no threshold up to {THRESHOLDS[-1]} keeps the false-hit rate within {args.budget}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
