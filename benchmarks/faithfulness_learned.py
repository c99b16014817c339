"""How far a learned verdict gets on the real labelled answers: the ceiling of the offline signals.

The claim checker's rules reach 0.90 balanced accuracy on the real answers they were written on (`tune`)
and less on the held-out splits. This asks whether the signals the checker can compute offline, combined
by a model fitted on `tune` instead of by hand, carry over better. Per answer it computes 20 features:
the rules' verdict and which checks failed, and generic ones (words of the claim in its best span, MiniLM
closeness of the claim to that span and to any context sentence, words the context lacks, claim count and
length, cut at the token limit, compressed or not). Two class-balanced logistic regressions (L2, fitted by
Newton's method on standardised features): `generic` (no rule output) and `all`. They are scored by
5-fold cross-validation on `tune` (folds by sha256 of the question) and, fitted on all of `tune`, on the
held-out `test` and `handwritten` splits. `--lm` adds the generator LM's pointwise mutual information of
each claim (mean token log-probability given its span and the question, minus given the question alone;
SmolLM2-135M through transformers), cross-validated on `tune` only, with its time per claim.
Prints a table per split, then one JSON line.
Usage: .venv/bin/python benchmarks/faithfulness_learned.py [--lm]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.faithfulness_validation import _CUT_TOKENS, REAL, confusion  # noqa: E402

CHECKS = ("numbers_ok", "names_ok", "polarity_ok", "roles_ok", "attributes_ok", "slot_ok")
GENERIC = [0, 1, *range(10, 20)]
"""Feature columns that are no rule output: claim count, cut, and the lexical/embedding/length ones."""
FOLDS = 5


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 50) -> np.ndarray:
    """Weights (intercept last) of a class-balanced L2 logistic regression, by Newton's method."""
    a = np.hstack([x, np.ones((len(x), 1))])
    weight = np.where(y, len(y) / (2 * y.sum()), len(y) / (2 * (~y).sum()))
    penalty = np.full(a.shape[1], 1 / l2)
    penalty[-1] = 0.0  # the intercept is not shrunk
    w = np.zeros(a.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-a @ w))
        grad = a.T @ (weight * (p - y)) + penalty * w
        hess = (a * (weight * p * (1 - p))[:, None]).T @ a + np.diag(penalty) + 1e-9 * np.eye(a.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def fitted(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A predictor of "supported" from standardised features, fitted on (x, y)."""
    mu, sd = x.mean(0), x.std(0) + 1e-9
    w = fit_logistic((x - mu) / sd, y)
    return lambda z: np.hstack([(z - mu) / sd, np.ones((len(z), 1))]) @ w > 0


def answer_features(
    result: Any,
    vectors: dict[str, np.ndarray],
    sentences: list[str],
    context_words: set[str],
    cut: bool,
    compressed: bool,
) -> list[float]:
    """The 20 features of one answer with claims (see the module docstring)."""
    from corpus.text import content_words

    claims = result.claims
    best = [float(vectors[v.claim] @ vectors[v.best_span]) for v in claims]
    anywhere = [max(float(vectors[v.claim] @ vectors[s]) for s in sentences) for v in claims]
    novel = []
    for v in claims:
        words = content_words(v.claim)
        novel.append(sum(w not in context_words for w in words) / max(1, len(words)))
    lexical = [v.lexical for v in claims]
    row = [len(claims), float(cut), float(result.score == 1.0), float(np.mean([v.supported for v in claims]))]
    row += [float(any(getattr(v, check) is False for v in claims)) for check in CHECKS]
    for values in (lexical, best, anywhere):
        row += [min(values), float(np.mean(values))]
    row += [max(novel), float(np.mean(novel)), float(np.log1p(sum(len(v.claim.split()) for v in claims)))]
    return [*row, float(not compressed)]


def score(labels: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    """The validation benchmark's confusion counts ("unsupported" is the positive class)."""
    return confusion(labels.tolist(), predicted.tolist())


def lm_pmi(items: Sequence[tuple[str, str, str]]) -> list[float]:
    """Per (claim, span, question): mean log-probability of the claim given span and question, minus given the
    question alone, under the generator's LM.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eval.engine.bundled_models import smollm2_dir

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()))
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir()), dtype=torch.float32).eval()

    def mean_logprob(prefix: str, text: str) -> float:
        a = tokenizer.encode(prefix, add_special_tokens=False)
        b = tokenizer.encode(" " + text, add_special_tokens=False)
        with torch.inference_mode():
            logits = model(torch.tensor([a + b])).logits[0, len(a) - 1 : -1]
        return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(b)[:, None]).mean())

    return [
        mean_logprob(f"Passage: {span}\nQuestion: {q}\nStatement:", claim)
        - mean_logprob(f"Question: {q}\nStatement:", claim)
        for claim, span, q in items
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lm", action="store_true", help="add the LM's PMI per claim (tune only; slow)")
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    from transformers import AutoTokenizer

    from corpus.embed import SentenceTransformerEmbedder, VectorCache
    from corpus.text import content_words, sentence_spans
    from eval.engine.bundled_models import smollm2_dir
    from eval.faithfulness.checker import ClaimChecker

    embedder = SentenceTransformerEmbedder()
    checker = ClaimChecker(embedder)
    vector_cache = VectorCache(embedder, 1_000_000)
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()))
    cases = json.loads(REAL.read_text())["cases"]
    data: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, list[Any], list[dict[str, Any]]]] = {}
    for split in ("tune", "test", "handwritten"):
        real = [c for c in cases if c["split"] == split and c["label"] != "no_claims"]
        cut = [len(tokenizer.encode(c["answer"], add_special_tokens=False)) >= _CUT_TOKENS for c in real]
        results = checker.check_many([(c["answer"], c["context"] or "", c["question"]) for c in real], cut)
        contexts = [c["context"] or "" for c in real]
        sentences = [[ctx[s:e] for s, e, _ in sentence_spans(ctx)] or [ctx] for ctx in contexts]
        texts = {t for r in results for v in r.claims for t in (v.claim, v.best_span)}
        texts |= {s for r, sents in zip(results, sentences, strict=True) if r.claims for s in sents}
        unique = sorted(texts)
        vectors = dict(zip(unique, vector_cache(unique), strict=True))
        ok = np.array([r.status == "ok" for r in results])
        rows = [
            answer_features(r, vectors, sents, set(content_words(ctx)), k, not c["setting"].startswith("none"))
            if r.status == "ok"
            else [0.0] * 20
            for r, sents, ctx, k, c in zip(results, sentences, contexts, cut, real, strict=True)
        ]
        labels = np.array([c["label"] == "supported" for c in real])
        data[split] = (np.array(rows), labels, ok, results, real)

    report: dict[str, Any] = {}
    x, y, ok, results, real = data["tune"]
    fold = np.array([int(hashlib.sha256(c["question"].encode()).hexdigest(), 16) % FOLDS for c in real])
    columns = {"generic": GENERIC, "all": list(range(20))}
    variants = {name: x[:, cols] for name, cols in columns.items()}
    if args.lm:
        start = time.perf_counter()
        items = [(v.claim, v.best_span, c["question"]) for r, c in zip(results, real, strict=True) for v in r.claims]
        pmi = iter(lm_pmi(items))
        per = [[next(pmi) for _ in r.claims] for r in results]
        seconds = time.perf_counter() - start
        extra = np.array([[min(p), float(np.mean(p))] if p else [0.0, 0.0] for p in per])
        variants |= {f"{name}+lm": np.hstack([x[:, cols], extra]) for name, cols in columns.items()}
        report["lm_seconds_per_claim"] = round(seconds / len(items), 3)
        print(f"LM PMI of {len(items)} claims in {seconds:.0f} s")
    print(f"\n{'split':<13}{'verdict':<16}{'n':>5}{'bal. acc.':>11}{'precision':>11}")

    def show(split: str, name: str, predicted: np.ndarray, labels: np.ndarray) -> None:
        c = score(labels, predicted)
        print(f"{split:<13}{name:<16}{len(labels):>5}{c['balanced_accuracy']:>11}{c['precision_unsupported']:>11}")
        report[f"{split}_{name}"] = c

    show("tune", "rules", x[:, 2] > 0, y)
    for name, features in variants.items():
        predicted = np.zeros(len(y), dtype=bool)
        for k in range(FOLDS):
            predicted[fold == k] = fitted(features[fold != k], y[fold != k])(features[fold == k])
        show("tune", f"{name} (cv)", predicted & ok, y)
    for split in ("test", "handwritten"):
        xs, ys, oks, _, _ = data[split]
        show(split, "rules", xs[:, 2] > 0, ys)
        for name, cols in columns.items():
            show(split, name, fitted(x[:, cols], y)(xs[:, cols]) & oks, ys)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
