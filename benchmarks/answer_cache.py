"""The semantic answer cache's threshold, chosen on tuning pairs and judged on held-out pairs.

Pairs come from the question generator over the bundled corpus (`corpus.question_pairs`): paraphrases of
the same fact (should hit) and near misses (the same sentence asked about another slot, or the same
question about another document's subject: must not hit). Pairs are split by sha256 of their id: even
last hex digit -> tuning (the threshold is chosen there: the lowest threshold whose false-hit rate on
near misses is at most the budget), odd -> evaluation (the figures reported). Two methods: cosine alone,
and cosine plus the product's guard (`eval.answer_cache.same_specifics`: both questions name the same
numbers and names). The guard was designed knowing how the generator builds near misses, so the generated
evaluation pairs flatter it; `benchmarks/data/answer_cache_pairs.json` holds 20 hand-written paraphrases and
20 near misses (another entity, or another attribute in a lower-case word) that neither the generator nor
the guard was built around, reported apart. The embedder is the sweep's own (all-MiniLM-L6-v2). Prints a
table per threshold, then one JSON line.

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
THRESHOLDS = [round(0.80 + 0.01 * i, 2) for i in range(20)] + [0.995, 0.999]


def _rates(sims: np.ndarray, should_hit: np.ndarray, t: float, guard: np.ndarray | None = None) -> tuple[float, float]:
    hit = (sims >= t) & (guard if guard is not None else True)
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

    from eval.answer_cache import same_specifics

    guard = np.array([same_specifics(p.a, p.b) for p in pairs])
    hand = json.loads((ROOT / "benchmarks" / "data" / "answer_cache_pairs.json").read_text())
    hand_pairs = [(a, b, True) for a, b in hand["paraphrase"]] + [(a, b, False) for a, b in hand["near_miss"]]
    hand_vec = {t: v for t in {x for a, b, _ in hand_pairs for x in (a, b)} for v in [emb.embed_query(t)]}
    hand_sims = np.array([float(hand_vec[a] @ hand_vec[b]) for a, b, _ in hand_pairs])
    hand_should = np.array([h for _, _, h in hand_pairs])
    hand_guard = np.array([same_specifics(a, b) for a, b, _ in hand_pairs])
    print(
        f"pairs: {len(pairs)} generated ({int(tune.sum())} tuning, {int((~tune).sum())} evaluation), "
        f"{len(hand_pairs)} hand-written"
    )
    figures: dict[str, object] = {
        "pairs": len(pairs),
        "by_kind": {k: int((kinds == k).sum()) for k in sorted(set(kinds))},
        "budget": args.budget,
        "lookup_s_per_question": round(query_s, 5),
        "embed_s_per_text_batched": round(embed_s, 5),
    }
    for method, g, hg in (("cosine", None, None), ("cosine_guard", guard, hand_guard)):
        gt = g[tune] if g is not None else None
        ge = g[~tune] if g is not None else None
        chosen = next((t for t in THRESHOLDS if _rates(sims[tune], should[tune], t, gt)[1] <= args.budget), None)
        print(f"method: {method}")
        print(
            f"{'threshold':>10}{'hit tune':>10}{'false tune':>12}{'hit eval':>10}{'false eval':>12}"
            f"{'hit hand':>10}{'false hand':>12}"
        )
        for t in THRESHOLDS:
            ht, ft = _rates(sims[tune], should[tune], t, gt)
            he, fe = _rates(sims[~tune], should[~tune], t, ge)
            hh, fh = _rates(hand_sims, hand_should, t, hg)
            mark = "  <- chosen" if t == chosen else ""
            print(f"{t:>10.3f}{ht:>10.3f}{ft:>12.3f}{he:>10.3f}{fe:>12.3f}{hh:>10.3f}{fh:>12.3f}{mark}")
        figures[f"{method}_chosen_threshold"] = chosen
        if chosen is None:
            print(f"no threshold up to {THRESHOLDS[-1]} keeps the false-hit rate within {args.budget}")
            continue
        he, fe = _rates(sims[~tune], should[~tune], chosen, ge)
        hh, fh = _rates(hand_sims, hand_should, chosen, hg)
        figures |= {
            f"{method}_eval_hit_rate": round(he, 3),
            f"{method}_eval_false_hit_rate": round(fe, 4),
            f"{method}_hand_hit_rate": round(hh, 3),
            f"{method}_hand_false_hit_rate": round(fh, 3),
        }
        for k in ("near_miss_attribute", "near_miss_entity"):
            sel = ~tune & (kinds == k)
            hit = (sims[sel] >= chosen) & (g[sel] if g is not None else True)
            figures[f"{method}_eval_false_hit_{k}"] = round(float(hit.mean()), 4)
        print(
            f"chosen on tuning pairs: {chosen}; evaluation hit {he:.3f}, false hit {fe:.4f}; "
            f"hand-written hit {hh:.3f}, false hit {fh:.3f}"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
