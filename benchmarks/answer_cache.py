"""The semantic answer cache's threshold, chosen on tuning pairs and judged on held-out pairs.

Pairs come from the question generator over the bundled corpus (`corpus.question_pairs`): paraphrases of
the same fact (should hit) and near misses (the same sentence asked about another slot, or the same
question about another document's subject: must not hit). Pairs are split by sha256 of their id: even
last hex digit -> tuning (the threshold is chosen there: the lowest threshold whose false-hit rate on
near misses is at most the budget), odd -> evaluation (the figures reported). Three methods: cosine alone;
cosine plus the first guard (`eval.answer_cache.guard.same_specifics`: both questions name the same numbers and
names); cosine plus the product's whole guard (`question_guard`: the same names and numbers, and the same
thing asked: answer types that meet and every content word one question has alone standing for one the
other has alone, by word-embedding cosine >= WORD_MATCH). The generated near misses change a name, a number
or a wh-slot, which the first guard was designed around, so the generated evaluation pairs flatter it.
Hand-written pairs, reported apart, change lower-case words as well ("tallest" -> "oldest"):
- `answer_cache_pairs_tune.json` (50 + 50): WORD_MATCH was chosen on these (the scan is printed first);
- `answer_cache_pairs_test.json` (50 + 50): held out, written apart from the tuning pairs and never used
  to choose anything;
- `answer_cache_pairs.json` (20 + 20): the first hand-written set, held out from every threshold, but the
  word pairs it swaps were looked at while the word guard was designed (docs/design.md).
The embedder is the sweep's own (all-MiniLM-L6-v2). Prints a table per method and threshold, then one JSON
line.

Usage: .venv/bin/python benchmarks/answer_cache.py [--budget 0.01] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
THRESHOLDS = [round(0.50 + 0.01 * i, 2) for i in range(50)] + [0.995, 0.999]


def _rates(sims: np.ndarray, should_hit: np.ndarray, t: float, guard: np.ndarray | None = None) -> tuple[float, float]:
    hit = (sims >= t) & (guard if guard is not None else True)
    return float(hit[should_hit].mean()), float(hit[~should_hit].mean())


HAND_SETS = {
    "tune": "answer_cache_pairs_tune.json",  # chose WORD_MATCH
    "test": "answer_cache_pairs_test.json",  # held out: written apart, never used to choose anything
    "first": "answer_cache_pairs.json",  # held out from the threshold; its word pairs were seen (docs/design.md)
}
WORD_MATCHES = [0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8]


@dataclass
class HandPairs:
    """Hand-written pairs: (a, b), whether they should hit, and their cosine similarity."""

    pairs: list[tuple[str, str]]
    should: np.ndarray
    sims: np.ndarray

    def guarded(self, guard: Callable[[str, str], bool] | None) -> np.ndarray | None:
        return np.array([guard(a, b) for a, b in self.pairs]) if guard else None


def _hand(name: str, emb: Any) -> HandPairs:
    data = json.loads((ROOT / "benchmarks" / "data" / HAND_SETS[name]).read_text())
    labelled = [(a, b, True) for a, b in data["paraphrase"]] + [(a, b, False) for a, b in data["near_miss"]]
    return HandPairs(
        [(a, b) for a, b, _ in labelled],
        np.array([h for _, _, h in labelled]),
        np.array([float(emb.embed_query(a) @ emb.embed_query(b)) for a, b, _ in labelled]),
    )


def _word_match_scan(h: HandPairs, emb: Any) -> dict[str, list[float]]:
    """Hit and false-hit rates of the guard alone (no cosine threshold) per WORD_MATCH, on `h`: how the
    word threshold was chosen (the lowest with no false hit on the tuning pairs).
    """
    from eval.answer_cache.guard import question_guard

    print(f"{'word match':>10}{'hit':>8}{'false':>8}   (hand-written tuning pairs, guard alone)")
    scan: dict[str, list[float]] = {}
    for m in WORD_MATCHES:
        hit, false = _rates(np.ones(len(h.pairs)), h.should, 0.0, h.guarded(question_guard(emb.embed_query, m)))
        print(f"{m:>10.2f}{hit:>8.3f}{false:>8.3f}")
        scan[str(m)] = [round(hit, 3), round(false, 3)]
    return scan


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

    from eval.answer_cache.guard import question_guard, same_specifics

    word_guard = question_guard(emb.embed_query)
    guards: dict[str, Callable[[str, str], bool] | None] = {
        "cosine": None,
        "cosine_names": same_specifics,
        "cosine_guard": word_guard,
    }
    hand = {name: _hand(name, emb) for name in HAND_SETS}
    print(
        f"pairs: {len(pairs)} generated ({int(tune.sum())} tuning, {int((~tune).sum())} evaluation); hand-written "
        + ", ".join(f"{name} {len(h.should)}" for name, h in hand.items())
    )
    figures: dict[str, object] = {
        "pairs": len(pairs),
        "by_kind": {k: int((kinds == k).sum()) for k in sorted(set(kinds))},
        "budget": args.budget,
        "lookup_s_per_question": round(query_s, 5),
        "embed_s_per_text_batched": round(embed_s, 5),
    }
    figures["word_match_scan_hand_tune"] = _word_match_scan(hand["tune"], emb)
    for method, guard in guards.items():
        g = np.array([guard(p.a, p.b) for p in pairs]) if guard else None
        hand_g = {name: h.guarded(guard) for name, h in hand.items()}
        gt = g[tune] if g is not None else None
        ge = g[~tune] if g is not None else None
        chosen = next((t for t in THRESHOLDS if _rates(sims[tune], should[tune], t, gt)[1] <= args.budget), None)
        print(f"method: {method}")
        print(
            f"{'threshold':>10}{'hit tune':>10}{'false tune':>12}{'hit eval':>10}{'false eval':>12}"
            + "".join(f"{'hit ' + n:>10}{'false ' + n:>12}" for n in hand)
        )
        for t in THRESHOLDS:
            cells = [*_rates(sims[tune], should[tune], t, gt), *_rates(sims[~tune], should[~tune], t, ge)]
            for name, h in hand.items():
                cells += _rates(h.sims, h.should, t, hand_g[name])
            mark = "  <- chosen" if t == chosen else ""
            print(
                f"{t:>10.3f}"
                + "".join(f"{c:>10.3f}" if k % 2 == 0 else f"{c:>12.3f}" for k, c in enumerate(cells))
                + mark
            )
        figures[f"{method}_chosen_threshold"] = chosen
        if chosen is None:
            print(f"no threshold up to {THRESHOLDS[-1]} keeps the false-hit rate within {args.budget}")
            continue
        he, fe = _rates(sims[~tune], should[~tune], chosen, ge)
        figures |= {f"{method}_eval_hit_rate": round(he, 3), f"{method}_eval_false_hit_rate": round(fe, 4)}
        summary = [f"chosen on tuning pairs: {chosen}; generated evaluation hit {he:.3f}, false hit {fe:.4f}"]
        for name, h in hand.items():
            hh, fh = _rates(h.sims, h.should, chosen, hand_g[name])
            figures |= {
                f"{method}_hand_{name}_hit_rate": round(hh, 3),
                f"{method}_hand_{name}_false_hit_rate": round(fh, 3),
            }
            summary.append(f"hand-written {name} hit {hh:.3f}, false hit {fh:.3f}")
        for k in ("near_miss_attribute", "near_miss_entity"):
            sel = ~tune & (kinds == k)
            hit = (sims[sel] >= chosen) & (g[sel] if g is not None else True)
            figures[f"{method}_eval_false_hit_{k}"] = round(float(hit.mean()), 4)
        print("; ".join(summary))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
