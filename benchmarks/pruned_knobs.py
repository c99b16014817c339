"""The pruned selector's scoring knobs across three domains, tune splits only (no held-out split is read).

`rank_prior` (score taken off per place a passage stands below the reranker's first) and `word_overlap`
(weight of the share of the question's content words a sentence has) were chosen on encyclopedia questions
alone (`pruned_selection.py`). This prints, for `pruned` 4× and `pruned-auto` (8× ceiling, its other knobs at
their defaults), the context token recall loss against uncompressed (points) and the realized ratio on the
tune splits of the three domains of `pruned_domains.py` (top-8, dense reranking), for a grid of both knobs.

    .venv/bin/python benchmarks/pruned_knobs.py
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

RANK_PRIORS = [0.0, 0.02, 0.04, 0.08]
WORD_OVERLAPS = [0.0, 0.2, 0.4, 0.8, 1.2]


def main() -> None:
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    import pruned_domains
    from transformers import AutoTokenizer

    from corpus.embed import SentenceTransformerEmbedder
    from corpus.retrieve import LanceRetriever
    from corpus.sentences import SentenceVectors
    from eval.compress.extractive import ExtractiveConfig
    from eval.compress.pruned import PrunedCompressor
    from eval.compress.pruned_auto import AutoPrunedCompressor, AutoPrunedConfig
    from eval.engine.bundled_models import smollm2_dir
    from eval.metrics import context_token_recall
    from eval.prompt import context_block
    from eval.rerank import DenseReranker

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    emb = SentenceTransformerEmbedder()
    found: dict[tuple[str, float, float, str], tuple[float, float]] = {}
    names = []
    for domain, (index, splits) in pruned_domains.domains(Path(tempfile.mkdtemp()), emb).items():
        names.append(domain)
        retriever, reranker = LanceRetriever(index, emb), DenseReranker(emb)
        stored = SentenceVectors(index, retriever.version)  # the snapshot the chunks come from
        tops = [(q, reranker.rerank(q.question, retriever.retrieve(q.question, 20))[:8]) for q in splits["tune"]]
        base = statistics.mean(
            context_token_recall(context_block([h.heading for h in t], [h.text for h in t]), q.answers) for q, t in tops
        )
        for prior, overlap in itertools.product(RANK_PRIORS, WORD_OVERLAPS):
            selectors: dict[str, tuple[Any, float]] = {
                "pruned 4x": (
                    PrunedCompressor(
                        count, emb, stored, True, ExtractiveConfig(rank_prior=prior, word_overlap=overlap)
                    ),
                    4.0,
                ),
                "pruned-auto": (
                    AutoPrunedCompressor(count, emb, stored, AutoPrunedConfig(rank_prior=prior, word_overlap=overlap)),
                    8.0,
                ),
            }
            for kind, (comp, ratio) in selectors.items():
                recall, realized = pruned_domains.selector_recall(comp, tops, ratio)
                found[(domain, prior, overlap, kind)] = (100 * (base - recall), realized)
        print(f"{domain}: {len(tops)} tune questions", flush=True)
    for kind in ("pruned 4x", "pruned-auto"):
        print(f"\n{kind}: context token recall loss (points) and realized ratio, tune splits")
        print(f"{'rank_prior':>10} {'word_overlap':>12}" + "".join(f"{d[:14]:>18}" for d in names))
        for prior, overlap in itertools.product(RANK_PRIORS, WORD_OVERLAPS):
            cells = "".join(
                f"{found[(d, prior, overlap, kind)][0]:>10.1f}{found[(d, prior, overlap, kind)][1]:>7.2f}x "
                for d in names
            )
            print(f"{prior:>10} {overlap:>12}{cells}")


if __name__ == "__main__":
    main()
