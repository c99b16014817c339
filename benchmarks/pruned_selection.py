"""How the pruned selector's defaults were chosen: context answer recall at 4x over a grid of its two terms.

The selector scores a sentence by its similarity to the question, less `rank_prior` per place its passage
stands below the reranker's first, plus `word_overlap` times the share of the question's content words it
has (eval/compress/extractive.py). This script retrieves and reranks top-8 contexts (no generation) and
reports, for each grid point, the share of answerable questions whose final 4x context still holds a gold
answer:
- tune: benchmarks/data/pruned_tune_questions.json, 120 questions written by people about bundled corpus
  documents (the defaults are the lowest grid point within one question of the best here);
- held out: the FanOutQA demo's 75 answerable questions (never used to choose).
Prints a table, then one JSON line. Usage: .venv/bin/python benchmarks/pruned_selection.py [--ratio 4]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

TUNE = Path(__file__).parent / "data" / "pruned_tune_questions.json"
RANK_PRIORS = [0.0, 0.02, 0.04, 0.08, 0.12]
WORD_OVERLAPS = [0.0, 0.2, 0.4, 0.8]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ratio", type=float, default=4.0)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--index", type=Path, default=Path("runs/bench-levers/index.lancedb"))
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    from transformers import AutoTokenizer

    from corpus.bundled import answerable_questions, bundled_index
    from corpus.embed import SentenceTransformerEmbedder
    from corpus.index import IndexOptions
    from corpus.models import Question
    from corpus.retrieve import LanceRetriever
    from corpus.sentences import SentenceVectors
    from eval.compress.extractive import ExtractiveConfig
    from eval.compress.pruned import PrunedCompressor
    from eval.engine.bundled_models import smollm2_dir
    from eval.metrics import context_answer_recall
    from eval.prompt import context_block
    from eval.rerank import DenseReranker

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    work = Path(tempfile.mkdtemp(prefix="cribsheet-pruned-"))
    emb = SentenceTransformerEmbedder()
    index = bundled_index(args.index, work, emb, IndexOptions(sentence_vectors=True))
    retriever, reranker = LanceRetriever(index, emb), DenseReranker(emb)
    stored = SentenceVectors(index, retriever.version)  # the snapshot the chunks come from
    sets = {
        "tune": [Question.model_validate(q) for q in json.loads(TUNE.read_text())["questions"]],
        "held_out": answerable_questions(work),
    }
    contexts = {
        name: [(q, reranker.rerank(q.question, retriever.retrieve(q.question, 20))[: args.top_k]) for q in questions]
        for name, questions in sets.items()
    }
    recall: dict[str, dict[tuple[float, float], float]] = {name: {} for name in sets}
    for prior in RANK_PRIORS:
        for overlap in WORD_OVERLAPS:
            config = ExtractiveConfig(rank_prior=prior, word_overlap=overlap)
            pruner = PrunedCompressor(count, emb, stored, config=config)
            for name, items in contexts.items():
                hits = 0
                for q, top in items:
                    comp = pruner.compress([h.text for h in top], q.question, args.ratio)
                    context = context_block([top[i].heading for i in comp.kept or []], comp.texts)
                    hits += context_answer_recall(context, q.answers) == 1.0
                recall[name][prior, overlap] = hits / len(items)
    best = max(recall["tune"].values())
    tolerance = 1 / len(sets["tune"]) + 1e-9
    chosen = min((k for k, v in recall["tune"].items() if v >= best - tolerance), key=lambda k: (k[0] + k[1], k))
    print(f"context answer recall at {args.ratio:g}x, top-{args.top_k} (tune n={len(sets['tune'])}, held out n=75)")
    print(f"{'rank_prior':>11}{'word_overlap':>13}{'tune':>7}{'held out':>10}")
    for key in recall["tune"]:
        mark = "  <- chosen on tune" if key == chosen else ""
        print(f"{key[0]:>11.2f}{key[1]:>13.1f}{recall['tune'][key]:>7.3f}{recall['held_out'][key]:>10.3f}{mark}")
    defaults = ExtractiveConfig()
    result = {
        "chosen_rank_prior": chosen[0],
        "chosen_word_overlap": chosen[1],
        "defaults": [defaults.rank_prior, defaults.word_overlap],
        "tune_similarity_alone": round(recall["tune"][0.0, 0.0], 3),
        "tune_chosen": round(recall["tune"][chosen], 3),
        "held_out_similarity_alone": round(recall["held_out"][0.0, 0.0], 3),
        "held_out_chosen": round(recall["held_out"][chosen], 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
