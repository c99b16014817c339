"""`cribsheet train-scorer`: a unit scorer trained on the user's own corpus and questions, end to end: refuse
questions a sweep or gate is scored on, label pairs on the index (kept in a work folder, so a resumed run does
not retrieve again), fine-tune, then rank the validation split with the new scorer and with the bundled
bi-encoder, and write the card into the model folder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from corpus.digests import file_sha256
from corpus.embed import EMBEDDERS, Embedder
from corpus.errors import CribsheetError
from corpus.lease import reader_lease
from corpus.load import read_jsonl
from corpus.models import Question
from corpus.retrieve import LanceRetriever
from corpus.runtime import installed_versions
from corpus.sentences import SentenceVectors
from corpus.weights import weights_fingerprint
from eval.compress.identity import code_version
from eval.train.card import CARD_JSON, RankingFigures, ScorerCard, ranking_figures
from eval.train.fit import Progress, TrainConfig, base_model_path, bf16, learning_rate, train_scorer_model
from eval.train.pairs import (
    PairRules,
    ScorerPair,
    build_pairs,
    pairs_digest,
    passage_pool,
    read_pairs,
    read_training_questions,
    refuse_overlap,
    split_of,
    write_pairs,
)


@dataclass(frozen=True)
class ScorerInputs:
    """What a scorer is trained from and where it goes."""

    index_path: Path
    questions_path: Path
    out: Path
    """The model folder to write (`cross-encoder:OUT` or `bi-encoder:OUT` loads it, by the training's kind)."""
    embedder: str = "minilm-l6-v2"
    """The index's embedder (retrieval for hard negatives, and the bi-encoder the card compares with)."""
    index_version: int | None = None
    not_on: tuple[Path, ...] = ()
    """Question files a sweep or gate is scored on: a training question among theirs is refused."""
    limit: int | None = None
    """Only the first N questions."""
    work: Path | None = None
    """Pairs and checkpoints (None: `.OUT.training` beside the model folder)."""


def work_folder(inputs: ScorerInputs) -> Path:
    """Where the pairs and checkpoints of `inputs` are kept."""
    return inputs.work or inputs.out.parent / f".{inputs.out.name}.training"


def check_out_folder(out: Path) -> None:
    """Refuse to replace a folder that holds something other than a scorer this command wrote."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / CARD_JSON).is_file())):
        raise CribsheetError(f"{out}: exists and is not a scorer folder (no {CARD_JSON}); choose another --out")


def bi_encoder_scores(pairs: Sequence[ScorerPair], embedder: Embedder, stored: SentenceVectors) -> list[float]:
    """The cosine `pruned` scores each pair's unit with: the unit's stored vector (embedded here when the index
    lacks it) against the question's vector.
    """
    import numpy as np

    found, _ = stored.lookup_with_cost(list(dict.fromkeys(p.unit for p in pairs)))
    missing = list(dict.fromkeys(p.unit for p in pairs if p.unit not in found))
    if missing:
        found |= dict(zip(missing, embedder.embed_documents(missing), strict=True))
    queries = {q: embedder.embed_query(q) for q in dict.fromkeys(p.question for p in pairs)}
    return [float(np.dot(found[p.unit], queries[p.question])) for p in pairs]


def trained_scores(model: Path, kind: str, pairs: Sequence[ScorerPair]) -> list[float]:
    """The trained scorer's score of each pair, through the registered scorer that loads it at query time."""
    from eval.compress.scorer import build_scorer

    scorer = build_scorer(f"{kind}:{model}")
    by_question: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        by_question.setdefault(p.question, []).append(i)
    found: dict[int, float] = {}
    for question, rows in by_question.items():
        for i, s in zip(rows, scorer.score(question, [pairs[i].scored for i in rows]), strict=True):
            found[i] = float(s)
    return [found[i] for i in range(len(pairs))]


def figures(pairs: Sequence[ScorerPair], scores: Sequence[float]) -> RankingFigures:
    """The ranking figures of `scores` on `pairs`."""
    return ranking_figures([p.question for p in pairs], [p.label for p in pairs], [p.kind for p in pairs], scores)


def split_documents(questions: Sequence[Question], rules: PairRules, split: str) -> list[str]:
    """The gold documents of the questions in `split` (by `split_of`), sorted."""
    return sorted({d for q in questions if split_of(q, rules.validation_share) == split for d in q.gold_doc_ids})


def labelled_pairs(
    inputs: ScorerInputs,
    questions: Sequence[Question],
    retriever: LanceRetriever,
    stored: SentenceVectors,
    rules: PairRules,
    index_sha256: str,
    progress: Progress,
) -> tuple[list[ScorerPair], dict[str, float]]:
    """The pairs of `questions` on the index, read from the work folder when an earlier run labelled the same
    questions on the same index with the same rules; and their counts (questions, without positive, and the
    seconds labelling took in the run that did it).
    """
    key = hashlib.sha256(
        json.dumps(
            {
                "questions": [q.model_dump(mode="json") for q in questions],
                "index": index_sha256,
                "rules": rules.model_dump(mode="json"),
                "code": code_version(build_pairs),  # a fix to the labelling rules labels again
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()[:16]
    work = work_folder(inputs)
    pairs_file, meta_file = work / f"pairs-{key}.jsonl", work / f"pairs-{key}.json"
    if pairs_file.is_file() and meta_file.is_file():
        return read_pairs(pairs_file), json.loads(meta_file.read_text())
    start = time.perf_counter()
    made = build_pairs(questions, retriever, stored, passage_pool(retriever.table), rules, progress)
    meta = {
        "questions": made.questions,
        "without_positive": made.without_positive,
        "seconds": time.perf_counter() - start,
    }
    work.mkdir(parents=True, exist_ok=True)
    write_pairs(pairs_file, made.pairs)
    meta_file.write_text(json.dumps(meta))  # written last: pairs without it are labelled again
    return made.pairs, meta


def train_scorer(
    inputs: ScorerInputs,
    rules: PairRules | None = None,
    config: TrainConfig | None = None,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
) -> ScorerCard:
    """Train a unit scorer from `inputs` and write it, with its card, to `inputs.out`."""
    rules, config = rules or PairRules(), config or TrainConfig()
    tick = progress or (lambda stage, done, total: None)
    questions = read_training_questions(inputs.questions_path, inputs.limit)
    for held in inputs.not_on:
        refuse_overlap(questions, inputs.questions_path, [q for _, q in read_jsonl(held, Question)], held)
    restore_interrupted_swap(inputs.out)
    check_out_folder(inputs.out)
    embedder = embedder or EMBEDDERS.build(EMBEDDERS.spec(inputs.embedder), None)
    with reader_lease(inputs.index_path, inputs.index_version) as snapshot:  # no run row: reclaim keeps it by this
        retriever = LanceRetriever(inputs.index_path, embedder, snapshot.chunk_version)
        stored = SentenceVectors(inputs.index_path, retriever.version)
        if not stored.available:
            raise CribsheetError(
                f"{inputs.index_path}: no sentence vectors (units) in this index; rebuild it with "
                "`cribsheet index --sentence-vectors`"
            )
        index_sha256 = snapshot.index_sha256
        pairs, meta = labelled_pairs(inputs, questions, retriever, stored, rules, index_sha256, tick)
    staged = inputs.out.with_name(f".{inputs.out.name}.new")  # the model and its card, swapped in together
    shutil.rmtree(staged, ignore_errors=True)
    trained = train_scorer_model(pairs, staged, work_folder(inputs), config, tick)
    validation = [p for p in pairs if p.split == "validation"]
    train = [p for p in pairs if p.split == "train"]
    card = ScorerCard(
        kind=config.kind,
        model=str(inputs.out),
        weights=weights_fingerprint(staged),
        base_model=base_model_path(config),
        base_weights=weights_fingerprint(base_model_path(config)),
        questions_path=str(inputs.questions_path),
        questions_sha256=file_sha256(inputs.questions_path),
        index_path=str(inputs.index_path),
        index_sha256=index_sha256,
        refused_overlap_with=[str(p) for p in inputs.not_on],
        refused_overlap_sha256={str(p): file_sha256(p) for p in inputs.not_on},
        train_documents=split_documents(questions, rules, "train"),
        validation_documents=split_documents(questions, rules, "validation"),
        pairs_sha256=pairs_digest(pairs),
        pair_rules=rules.model_dump(mode="json"),
        questions=int(meta["questions"]),
        questions_without_positive=int(meta["without_positive"]),
        train_pairs=len(train),
        train_questions=len({p.question_id for p in train}),
        validation_pairs=len(validation),
        validation_questions=len({p.question_id for p in validation}),
        positives=sum(p.kind == "positive" for p in pairs),
        hard_negatives=sum(p.kind == "hard" for p in pairs),
        easy_negatives=sum(p.kind == "easy" for p in pairs),
        training=config.model_dump(mode="json")
        | {"learning_rate": learning_rate(config), "precision": "bfloat16" if bf16(config) else "float32"},
        libraries=library_versions(),
        steps=trained.steps,
        resumed_from_step=trained.resumed_from,
        pairs_seconds=round(meta["seconds"], 1),
        train_seconds=round(trained.seconds, 1),
        loss_curve=trained.loss_curve,
        validation=figures(validation, trained_scores(staged, config.kind, validation)) if validation else _none(),
        bi_encoder=figures(validation, bi_encoder_scores(validation, embedder, stored)) if validation else _none(),
    )
    card.write(staged)
    swap_into_place(staged, inputs.out)
    return card


def _previous(out: Path) -> Path:
    return out.with_name(f".{out.name}.previous")


def swap_into_place(staged: Path, out: Path) -> None:
    """Replace `out` by `staged` (the model with its card): two renames, the old folder moved aside first and
    removed last. A reader sees the old scorer or the new one, each with its card; a kill between the two
    renames leaves the old one aside, which the next run puts back (`restore_interrupted_swap`).
    """
    previous = _previous(out)
    shutil.rmtree(previous, ignore_errors=True)
    if out.exists():
        out.rename(previous)
    staged.rename(out)
    shutil.rmtree(previous, ignore_errors=True)


def restore_interrupted_swap(out: Path) -> None:
    """Put back the scorer a killed swap moved aside (no `out`, its previous folder beside it)."""
    previous = _previous(out)
    if previous.is_dir() and not out.exists():
        previous.rename(out)


def library_versions() -> dict[str, str]:
    """The versions of the libraries that trained the weights (what reproduces them, with the card's knobs)."""
    return installed_versions(("torch", "transformers", "sentence-transformers", "accelerate"))


def _none() -> RankingFigures:
    return RankingFigures(auc=None, auc_hard=None, auc_per_question=None)
