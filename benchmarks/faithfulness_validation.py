"""Validates the offline faithfulness checker on a labelled set built from the bundled corpus.

Faithful: sentences and short spans of the context passage. Unfaithful: a sentence of another passage,
the passage sentence with a name swapped, or with a number changed. Prints a table, then one JSON line.
Usage: .venv/bin/python benchmarks/faithfulness_validation.py [--docs N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=200)
    args = parser.parse_args()
    from eval.runtime import quiet_offline_env

    quiet_offline_env()

    from corpus.bundled import CORPUS_FILE, build_bundled
    from corpus.embed import SentenceTransformerEmbedder
    from corpus.sources import SkipLog, SourceConfig, iter_documents
    from eval.faithfulness import ClaimChecker
    from eval.faithfulness_validation import build_cases, validate

    work = Path(tempfile.mkdtemp(prefix="cribsheet-faith-"))
    build_bundled(work)
    docs = list(iter_documents(SourceConfig(path=work / CORPUS_FILE), SkipLog()))
    cases = build_cases(docs, args.docs)
    start = time.perf_counter()
    report = validate(ClaimChecker(SentenceTransformerEmbedder()), cases)
    seconds = time.perf_counter() - start
    print(f"{report.n} labelled answers from {args.docs} passages, checked in {seconds:.1f} s")
    print(f"accuracy {report.accuracy:.3f}   precision {report.precision:.3f}   recall {report.recall:.3f}")
    for kind, acc in report.by_kind.items():
        n = sum(c.kind == kind for c in cases)
        print(f"  {kind:<16} n={n:<4} accuracy {acc:.3f}")
    print(
        json.dumps(
            {
                "cases": report.n,
                "accuracy": round(report.accuracy, 4),
                "precision": round(report.precision, 4),
                "recall": round(report.recall, 4),
                "seconds": round(seconds, 2),
                **{f"{k}_accuracy": round(v, 4) for k, v in report.by_kind.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
