"""`cribsheet train-scorer`: a unit scorer fine-tuned on your own index and questions (a shell over
`eval.train.train_scorer`).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from corpus.errors import CribsheetError
from flows.app import app, error_message, prepare_environment
from flows.terminal import fail, out, progress, show_path

if TYPE_CHECKING:
    from eval.train.card import ScorerCard


class TrainKind(StrEnum):
    """What `train-scorer` fine-tunes."""

    cross_encoder = "cross-encoder"
    bi_encoder = "bi-encoder"


@app.command("train-scorer")
def train_scorer(
    questions: Annotated[
        Path,
        typer.Option(
            help="JSONL questions with reference answers (generated or written): never ones you are judged on."
        ),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Model folder to write (load it as KIND:OUT).")],
    config_file: Annotated[
        Path | None,
        typer.Option(
            "--config", help="A sweep's YAML file: its index, embedder and retrieval; its questions are refused."
        ),
    ] = None,
    index_path: Annotated[
        Path | None, typer.Option("--index", help="LanceDB folder built with --sentence-vectors.")
    ] = None,
    not_on: Annotated[
        list[Path],
        typer.Option(
            "--not-on", help="A sweep or gate question file: training on any of its questions is refused; repeat."
        ),
    ] = [],  # noqa: B006
    kind: Annotated[
        TrainKind,
        typer.Option(
            help="cross-encoder (reads question and unit together) or bi-encoder (the bundled MiniLM fine-tuned)."
        ),
    ] = TrainKind.cross_encoder,
    limit: Annotated[int | None, typer.Option(help="Only the first N questions.")] = None,
    epochs: Annotated[float, typer.Option(min=0.01, help="Passes over the training pairs.")] = 1.0,
    batch_size: Annotated[int, typer.Option(min=1, help="Pairs per training step.")] = 32,
    learning_rate: Annotated[
        float | None, typer.Option(min=0.0, help="Peak learning rate [5e-5 cross-encoder, 2e-5 bi-encoder].")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seeds the new head, the data order and the negatives' draws.")] = 0,
    hard_negatives: Annotated[int, typer.Option(min=0, help="Hard negatives per question at most.")] = 14,
    easy_negatives: Annotated[int, typer.Option(min=0, help="Easy negatives per question.")] = 2,
    save_steps: Annotated[int, typer.Option(min=1, help="Steps between checkpoints (a killed run resumes).")] = 50,
) -> None:
    """Fine-tune a unit scorer from the bundled MiniLM on your own index and questions: pairs of
    (question, unit) labelled by the reference (positive: a unit holding its content words; hard negatives:
    other units of the retrieved passages; easy: units of random passages), trained on CPU, seeded, resumable
    (run the same command again after an interruption). Writes the model and its card (card.json, card.md:
    data digest, pairs, steps, minutes, loss curve, validation AUC against the bundled bi-encoder's).
    A cross-encoder by default; --kind bi-encoder fine-tunes the MiniLM bi-encoder itself on (question,
    positive, hard negative) triplets. Use it as `scorer: KIND:OUT` of the pruned compressors or as reranker
    `KIND:OUT`.
    """
    prepare_environment()
    from eval.settings import SweepConfig
    from eval.train.fit import TrainConfig
    from eval.train.pairs import PairRules
    from eval.train.train_scorer import ScorerInputs
    from eval.train.train_scorer import train_scorer as run_training
    from flows.config import load_config

    try:
        held = tuple(not_on)
        rules = PairRules(seed=seed, hard_negatives=hard_negatives, easy_negatives=easy_negatives)
        if config_file:
            sweep = load_config(SweepConfig, config_file, {"index_path": index_path} if index_path else {})
            held += (sweep.questions_path,)
            rules = rules.model_copy(update={"retrieve_n": sweep.retrieve_n, "retrieval": sweep.grid.retrievals[0]})
            inputs = ScorerInputs(
                sweep.index_path, questions, out_dir, sweep.embedder, sweep.index_version, held, limit
            )
        elif index_path is None:
            raise CribsheetError("give --index or a sweep --config")
        else:
            inputs = ScorerInputs(index_path, questions, out_dir, not_on=held, limit=limit)
        config = TrainConfig(
            kind=kind.value,
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            seed=seed,
            save_steps=save_steps,
        )
        with progress() as tick:
            card = run_training(inputs, rules, config, tick)
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc))
    _print_card(card, out_dir)


def _print_card(card: ScorerCard, out_dir: Path) -> None:
    """What `train-scorer` wrote: pairs, steps and loss, the held-out AUC against the bundled bi-encoder's."""
    curve = card.loss_curve
    loss = f", loss {curve[0][1]:.3f} -> {curve[-1][1]:.3f}" if curve else ""
    out.print(
        f"{card.train_pairs} training pairs of {card.train_questions} questions, {card.steps} steps in "
        f"{card.train_seconds / 60:.1f} min{loss}",
        highlight=False,
    )
    v, b = card.validation, card.bi_encoder
    if v.auc is not None and b.auc is not None:
        out.print(
            f"validation ({card.validation_pairs} pairs of {card.validation_questions} held-out questions): AUC "
            f"{v.auc:.3f} (bundled bi-encoder {b.auc:.3f}), per question {v.auc_per_question or 0:.3f} "
            f"({b.auc_per_question or 0:.3f})",
            highlight=False,
        )
    out.print(f"use it: compressor scorer {card.kind}:{out_dir}, or reranker {card.kind}:{out_dir}", highlight=False)
    show_path(out_dir.resolve())
