"""The semantic answer cache through the product: a real `cribsheet sweep` (vLLM, LanceDB, DuckDB) over question
pairs, the cache off and on side by side in one run, every question a serial latency probe.

The questions are evaluation-split pairs of `corpus.question_pairs` (the half `benchmarks/answer_cache.py`
never tunes on): paraphrases (the second question should be served from the first) and near misses (it must
not be). All first questions come before all second ones, so a second question can only hit an answered one.
Reported: hit rate on paraphrases (served from its own first question), false-hit rate on near misses (any
hit), hits on other questions, answer recall of the hits against the same questions answered by the engine,
and the latency a hit saves: end-to-end (retrieve + rerank + compress + TTFT) with the cache off minus the
hit's lookup, per hit. Prints a table, then one JSON line.

Usage: .venv/bin/python benchmarks/answer_cache_sweep.py [--pairs 40] [--threshold 0.80] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).with_name("cribsheet"))


def _questions(work: Path, n_pairs: int) -> tuple[Path, dict[str, tuple[str, bool]]]:
    """A question file of evaluation pairs: half paraphrases, half near misses (both kinds); the pair of each
    second question (its first question's id, should it hit)."""
    from corpus.bundled import CORPUS_FILE, build_bundled
    from corpus.question_pairs import question_pairs
    from corpus.sources import SkipLog, SourceConfig, iter_documents

    if not (work / CORPUS_FILE).exists():
        build_bundled(work)
    pairs = question_pairs(iter_documents(SourceConfig(path=work / CORPUS_FILE), SkipLog()))
    held_out = sorted(
        (p for p in pairs if int(hashlib.sha256(p.id.encode()).hexdigest()[-1], 16) % 2), key=lambda p: p.id
    )
    chosen = [p for p in held_out if p.should_hit][: n_pairs // 2]
    for kind in ("near_miss_attribute", "near_miss_entity"):
        chosen += [p for p in held_out if p.kind == kind][: n_pairs // 4]
    first = [{"id": f"{p.id}-a", "question": p.a, "answers": p.answers_a, "gold_doc_ids": [p.doc_id]} for p in chosen]
    # A near miss about another subject has no known answer: kept out of answer metrics (answerable false).
    second = [
        {"id": f"{p.id}-b", "question": p.b, "answers": p.answers_b or ["(unknown)"], "answerable": bool(p.answers_b)}
        for p in chosen
    ]
    path = work / "answer_cache_pairs.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in first + second))
    return path, {f"{p.id}-b": (f"{p.id}-a", p.should_hit) for p in chosen}


def _mean(values: Iterable[float | None]) -> float | None:
    """Mean of the known values (a failed row has none), rounded; None when there is none."""
    known = [v for v in values if v is not None]
    return round(statistics.fmean(known), 3) if known else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--threshold", type=float, default=0.80, help="the cache threshold (chosen by answer_cache.py)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench-scale")
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    args.work.mkdir(parents=True, exist_ok=True)
    questions, second = _questions(args.work, args.pairs)
    asked = [json.loads(line) for line in questions.read_text().splitlines()]
    answerable = {q["id"] for q in asked if q.get("answerable", True)}
    n = 2 * len(second)
    index, store = args.work / "idx-local.lancedb", args.work / "answer-cache.duckdb"
    if not index.exists():
        from corpus.bundled import CORPUS_FILE

        subprocess.run([CLI, "index", "--corpus", str(args.work / CORPUS_FILE), "--index", str(index)], check=True)
    store.unlink(missing_ok=True)
    cmd = [CLI, "sweep", "--index", str(index), "--questions", str(questions), "--store", str(store)]
    cmd += ["--top-k", "8", "--compression", "none", "--answer-cache", "off", "--answer-cache", str(args.threshold)]
    cmd += ["--probe-questions", str(n), "--no-reuse"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        sys.exit(f"sweep failed: {proc.stderr.strip().splitlines()[-1:]}")
    seconds = time.perf_counter() - t0
    import duckdb

    with duckdb.connect(str(store), read_only=True) as con:
        rows = con.execute(
            "SELECT question_id, answer_cache IS NOT NULL, cache_hit_of, e2e_cold_s, answer_contains FROM samples"
        ).fetchall()
    off = {q: (e2e, ans) for q, cached, _, e2e, ans in rows if not cached}
    on = {q: (hit, e2e, ans) for q, cached, hit, e2e, ans in rows if cached}
    right = [q for q, (a, should) in second.items() if should and on[q][0] == a]
    false = [q for q, (_, should) in second.items() if not should and on[q][0] is not None]
    other = [q for q, (hit, _, _) in on.items() if hit is not None and second.get(q, ("", False))[0] != hit]
    hits = [q for q, (hit, _, _) in on.items() if hit is not None]
    scored = [q for q in hits if q in answerable]  # a near miss about another subject has no known answer
    saved = [off[q][0] - on[q][1] for q in hits if off[q][0] is not None and on[q][1] is not None]
    n_para = sum(s for _, s in second.values())
    figures = {
        "questions": n,
        "threshold": args.threshold,
        "sweep_s": round(seconds, 1),
        "paraphrase_hit_rate": round(len(right) / n_para, 3),
        "near_miss_false_hit_rate": round(len(false) / (len(second) - n_para), 3),
        "hits_on_another_question": len(other),
        "hits": len(hits),
        "hit_answer_recall": _mean(on[q][2] for q in scored),
        "same_questions_engine_answer_recall": _mean(off[q][1] for q in scored),
        "e2e_off_s_mean": round(statistics.fmean(e for e, _ in off.values() if e is not None), 4),
        "hit_lookup_s_mean": round(statistics.fmean(on[q][1] for q in hits), 4) if hits else None,
        "saved_s_per_hit": round(statistics.fmean(saved), 4) if saved else None,
    }
    print(
        f"{n} questions ({n_para} paraphrase pairs, {len(second) - n_para} near-miss pairs), threshold {args.threshold}"
    )
    print(f"paraphrases served from their own first question: {len(right)} of {n_para}")
    print(f"near misses served from a cached answer (false hits): {len(false)} of {len(second) - n_para}")
    print(f"hits on another question than the pair's: {len(other)}; saved per hit: {figures['saved_s_per_hit']} s")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
