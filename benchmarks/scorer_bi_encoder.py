"""Does a scorer trained on questions like people's beat the bundled bi-encoder on Django's held-out
questions people wrote? Two ways of training on the same pairs, side by side (an experiment, not a product
path):

- `cribsheet train-scorer` (a cross-encoder from the bundled MiniLM) on the questions file, run beforehand;
- the bundled MiniLM bi-encoder itself, fine-tuned here with MultipleNegativesRankingLoss on (question,
  positive unit, one hard negative) triplets from the same labelled pairs (`train-scorer`'s pairs file).

The questions: benchmarks/data/django_people_like_train.jsonl, 548 questions written by two helper models
in the voice of developers about Django 5.2's topics/ and ref/ documents (outside the held-out questions'
gold documents), each with the answering sentence copied from the document as its reference. Then
benchmarks/scorer_domains.py runs on the held-out split with the fine-tuned bi-encoder as a unit scorer
(it embeds the units at query time) and as a reranker.

    cribsheet train-scorer --index runs/django-train/index.lancedb \\
        --questions benchmarks/data/django_people_like_train.jsonl --out runs/scorer-django-people \\
        --not-on runs/held-out/django-docs-test.jsonl --not-on benchmarks/data/django_qa.jsonl
    .venv/bin/python benchmarks/scorer_bi_encoder.py --pairs runs/.scorer-django-people.training/pairs-*.jsonl \\
        --out runs/bi-encoder-django-people
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


class BiEncoderScorer:
    """Cosine of a (fine-tuned) bi-encoder between the question and each unit, embedded at query time."""

    name = "bi-encoder"

    def __init__(self, model: str, device: str = "cpu", batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(model, device=device)
        self.batch_size = batch_size

    def score(self, question: str, units: Sequence[str]) -> np.ndarray:
        q = self.model.encode([question], normalize_embeddings=True)[0]
        u = self.model.encode(list(units), normalize_embeddings=True, batch_size=self.batch_size)
        return np.asarray(u @ q, dtype=float)


class BiEncoderReranker:
    """The same cosine over whole passages."""

    def __init__(self, model: str, device: str | None = None) -> None:
        self.scorer = BiEncoderScorer(model)

    def rerank(self, question: str, hits: Sequence[Any]) -> list[Any]:
        scores = self.scorer.score(question, [h.text for h in hits])
        return [hits[i] for i in np.argsort(-scores, kind="stable")]


def fine_tune(pairs_file: Path, out: Path, epochs: float, seed: int) -> None:
    """Fine-tune the bundled MiniLM on the training split of `pairs_file`; per-question AUC on its
    validation split (held out by question) against the bundled weights."""
    import importlib

    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    from corpus.embed import bundled_minilm_path
    from eval.train.card import per_question_auc
    from eval.train.pairs import read_pairs

    dataset = importlib.import_module("datasets").Dataset  # Hugging Face's (the repo's datasets/ is data only)
    pairs = read_pairs(pairs_file)
    rng = random.Random(seed)
    by_question: dict[tuple[str, str], list[Any]] = {}
    for p in pairs:
        if p.split == "train":
            by_question.setdefault((p.question_id, p.question), []).append(p)
    rows: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    for (_, question), found in by_question.items():
        negatives = [p for p in found if p.label == 0.0 and p.kind == "hard"] or [p for p in found if p.label == 0.0]
        for positive in (p for p in found if p.label == 1.0):
            if negatives:
                rows["anchor"].append(question)
                rows["positive"].append(positive.unit)
                rows["negative"].append(rng.choice(negatives).unit)
    base = str(bundled_minilm_path())
    model = SentenceTransformer(base, device="cpu")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out) + ".work", num_train_epochs=epochs, per_device_train_batch_size=32,
        learning_rate=2e-5, seed=seed, save_strategy="no", logging_steps=20, report_to=[], use_cpu=True,
    )  # fmt: skip
    start = time.perf_counter()
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=dataset.from_dict(rows).shuffle(seed=seed),
        loss=MultipleNegativesRankingLoss(model),
    )
    trainer.train()
    print(f"{len(rows['anchor'])} triplets, {time.perf_counter() - start:.0f} s of training")
    model.save(str(out))
    validation = [p for p in pairs if p.split == "validation"]
    for name, m in (("bundled", SentenceTransformer(base, device="cpu")), ("fine-tuned", model)):
        qv = m.encode([p.question for p in validation], normalize_embeddings=True, batch_size=64)
        uv = m.encode([p.unit for p in validation], normalize_embeddings=True, batch_size=64)
        auc = per_question_auc([p.question for p in validation], [p.label for p in validation], list((qv * uv).sum(1)))
        print(f"validation (held out by question): {name} bi-encoder AUC per question {auc or 0:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=Path, required=True, help="train-scorer's labelled pairs (JSONL)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the fine-tuned bi-encoder")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--domains", nargs="*", default=["django-docs"])
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    fine_tune(args.pairs, args.out, args.epochs, args.seed)

    import eval.compress.scorer as scorer_module
    import eval.rerank as rerank_module

    # scorer_domains loads each --scorer folder as a cross-encoder; here it gets the bi-encoder instead
    scorer_module.CrossEncoderScorer = BiEncoderScorer  # type: ignore[misc,assignment]
    rerank_module.CrossEncoderReranker = BiEncoderReranker  # type: ignore[misc,assignment]
    import runpy

    sys.argv = ["scorer_domains.py", "--scorer", f"fine-tuned-bi={args.out}", "--domains", *args.domains]
    runpy.run_path(str(Path(__file__).resolve().parent / "scorer_domains.py"), run_name="__main__")


if __name__ == "__main__":
    main()
