"""Fine-tuning a unit scorer from labelled pairs, on CPU, seeded, resumable.

The starting point is the bundled all-MiniLM-L6-v2. Two kinds: a cross-encoder (the bi-encoder's weights with
a new one-label head: sentence-transformers' `CrossEncoder`, trained by its `CrossEncoderTrainer` with binary
cross-entropy), or the bi-encoder itself fine-tuned (its `SentenceTransformerTrainer` with in-batch and hard
negatives, MultipleNegativesRankingLoss, on (question, positive unit, hard negative) triplets). Either
trainer writes a checkpoint every `save_steps` steps into a work folder keyed by the pairs' digest, this
config and the base weights, so a run killed at any point (kill -9 included) resumes from its last complete
checkpoint (one whose trainer state was written, the trainer's last file), and a run with other pairs or
knobs starts its own. The finished model is written beside the folder it is asked for and renamed into it;
`train_scorer` asks for a staging folder, adds the card, and swaps the two in (`swap_into_place`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from corpus.weights import weights_fingerprint
from eval.train.pairs import ScorerPair, pairs_digest

Progress = Callable[[str, int, int], None]

STATE_FILE = "trainer_state.json"
"""What the trainer writes last into a checkpoint: a checkpoint without it was cut off mid-write."""
ELAPSED_FILE = "cribsheet-elapsed.json"
"""Training seconds spent up to a checkpoint (across resumed runs), written beside it."""


class TrainConfig(BaseModel):
    """How the scorer is fine-tuned."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["cross-encoder", "bi-encoder"] = "cross-encoder"
    """What is trained: a cross-encoder (reads question and unit together; `cross-encoder:OUT`) or the
    bi-encoder fine-tuned (embeds them apart; `bi-encoder:OUT`)."""
    base_model: str | None = None
    """Folder or hub id to start from; None: the bundled all-MiniLM-L6-v2."""
    epochs: float = Field(default=1.0, gt=0.0)
    """Passes over the training pairs."""
    batch_size: int = Field(default=32, ge=1)
    learning_rate: float | None = Field(default=None, gt=0.0)
    """Peak learning rate; None: 5e-5 for a cross-encoder (its head is new), 2e-5 for a bi-encoder (every
    weight is already trained)."""
    warmup_ratio: float = Field(default=0.1, ge=0.0, lt=1.0)
    """Share of the steps over which the learning rate rises from 0."""
    max_length: int = Field(default=128, ge=16)
    """Tokens read at most (of question and unit together, or of each alone for a bi-encoder), in training and
    at query time (saved with the model)."""
    precision: Literal["auto", "float32", "bfloat16"] = "auto"
    """Training arithmetic: bfloat16 autocast where the CPU computes it natively (AVX512-BF16 or AMX: about
    2x faster at 128 tokens on this project's machine), else float32 (auto); the weights stay float32."""
    seed: int = 0
    """Seeds the new head, the data order and dropout."""
    save_steps: int = Field(default=50, ge=1)
    """Steps between checkpoints (what a killed run loses at most)."""
    logging_steps: int = Field(default=10, ge=1)
    """Steps between points of the loss curve."""


def learning_rate(config: TrainConfig) -> float:
    """The peak learning rate `config` trains with."""
    if config.learning_rate is not None:
        return config.learning_rate
    return 5e-5 if config.kind == "cross-encoder" else 2e-5


@dataclass(frozen=True)
class Trained:
    """What a training run produced."""

    steps: int
    seconds: float
    """Training seconds, summed over resumed runs."""
    resumed_from: int | None
    """The checkpoint step this run resumed from (None: from the start)."""
    loss_curve: list[tuple[int, float]]
    """(step, mean training loss over the last `logging_steps` steps)."""


def base_model_path(config: TrainConfig) -> str:
    """The folder or hub id training starts from."""
    if config.base_model:
        return config.base_model
    from corpus.embed import bundled_minilm_path

    return str(bundled_minilm_path())


class LengthBuckets:
    """Training batches of pairs of similar length, in a seeded random order: each run of 50 batches' worth
    of shuffled pairs is sorted by length and cut into batches, and the batches are shuffled. Padding follows
    the longest pair of a batch, so random batches of documentation units (median 41 tokens, one in four
    batches holding a 128-token code block) cost about twice the compute of sorted ones. The trainer's
    `batch_sampler` (it calls `set_epoch`; the order depends only on the seed and the epoch, so a resumed
    run skips exactly the batches it had done).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        drop_last: bool,
        valid_label_columns: list[str] | None = None,
        generator: Any = None,
        seed: int = 0,
    ) -> None:
        self.lengths = [len(q) + len(t) for q, t in zip(dataset["query"], dataset["text"], strict=True)]
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order `__iter__` gives."""
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        """The batches of pair indices of the current epoch."""
        import random

        rng = random.Random(f"{self.seed}\x1f{self.epoch}")
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        span = self.batch_size * 50
        out: list[list[int]] = []
        for start in range(0, len(order), span):
            run = sorted(order[start : start + span], key=lambda i: self.lengths[i])
            out += [run[i : i + self.batch_size] for i in range(0, len(run), self.batch_size)]
        if self.drop_last:
            out = [b for b in out if len(b) == self.batch_size]
        rng.shuffle(out)
        return out

    def __iter__(self) -> Any:
        return iter(self.batches())

    def __len__(self) -> int:
        n = len(self.lengths)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def bf16(config: TrainConfig) -> bool:
    """Whether training autocasts to bfloat16."""
    if config.precision != "auto":
        return config.precision == "bfloat16"
    from corpus.embed import cpu_computes_bf16

    return cpu_computes_bf16()


def run_key(pairs: Sequence[ScorerPair], config: TrainConfig) -> str:
    """What a training run is keyed by: its pairs, its knobs and the base weights."""
    payload = {
        "pairs": pairs_digest(pairs),
        "config": config.model_dump(mode="json"),
        "base": weights_fingerprint(base_model_path(config)),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def last_checkpoint(folder: Path) -> Path | None:
    """The newest complete checkpoint in `folder` (its trainer state written and readable), or None."""
    found: list[tuple[int, Path]] = []
    for path in folder.glob("checkpoint-*") if folder.is_dir() else []:
        step = path.name.rpartition("-")[2]
        try:
            json.loads((path / STATE_FILE).read_text())
        except (OSError, ValueError):
            continue  # cut off mid-write
        if step.isdigit():
            found.append((int(step), path))
    return max(found)[1] if found else None


def _callbacks(progress: Progress, seconds_before: float) -> list[Any]:
    from transformers import TrainerCallback

    class Report(TrainerCallback):
        """Progress after every step; at every checkpoint the seconds spent so far, written beside it."""

        def __init__(self) -> None:
            self.start = time.perf_counter()

        def elapsed(self) -> float:
            return seconds_before + time.perf_counter() - self.start

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            progress("train scorer", int(state.global_step), int(state.max_steps))

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                (folder / ELAPSED_FILE).write_text(json.dumps({"seconds": self.elapsed()}))

    return [Report()]


def train_scorer_model(
    pairs: Sequence[ScorerPair],
    out: Path,
    work: Path,
    config: TrainConfig | None = None,
    progress: Progress | None = None,
) -> Trained:
    """Fine-tune the scorer `config.kind` names on the training split of `pairs` and write it to `out` (a
    folder `cross-encoder:OUT` or `bi-encoder:OUT` loads). Checkpoints go under `work/<run key>/`; a run with
    the same key resumes from its last complete checkpoint. The checkpoints are removed once the model is in
    place.
    """
    config = config or TrainConfig()
    train = [p for p in pairs if p.split == "train"]
    if not train or not any(p.label for p in train) or all(p.label for p in train):
        raise ValueError("training needs positive and negative pairs in the training split")
    from transformers import set_seed

    folder = work / run_key(pairs, config)
    checkpoints = folder / "checkpoints"
    resume = last_checkpoint(checkpoints)
    before = 0.0
    if resume is not None and (resume / ELAPSED_FILE).is_file():
        before = float(json.loads((resume / ELAPSED_FILE).read_text())["seconds"])
    set_seed(config.seed)  # a cross-encoder's new head
    common = {
        "output_dir": str(checkpoints),
        "num_train_epochs": config.epochs,
        "per_device_train_batch_size": config.batch_size,
        "learning_rate": learning_rate(config),
        "warmup_steps": config.warmup_ratio,  # a float below 1: the share of the steps (transformers 5)
        "seed": config.seed,
        "data_seed": config.seed,
        "save_strategy": "steps",
        "save_steps": config.save_steps,
        "save_total_limit": 2,
        "logging_steps": config.logging_steps,
        "report_to": "none",
        "use_cpu": True,
        "disable_tqdm": True,  # the caller's progress: a bar on a terminal, a heartbeat line without one
        "dataloader_num_workers": 0,
        "bf16": bf16(config),
    }
    make = _cross_encoder_trainer if config.kind == "cross-encoder" else _bi_encoder_trainer
    model, trainer = make(train, config, common, _callbacks(progress or (lambda stage, done, total: None), before))
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # the loss curve goes to the card, not to stdout
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
    seconds = before + time.perf_counter() - start
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(str(partial))
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    shutil.rmtree(checkpoints, ignore_errors=True)
    curve = [(int(h["step"]), float(h["loss"])) for h in trainer.state.log_history if "loss" in h]
    steps = int(trainer.state.global_step)
    return Trained(steps, seconds, int(resume.name.rpartition("-")[2]) if resume else None, curve)


def _dataset() -> Any:
    # Hugging Face `datasets`, by module: the repository's data folder of the same name (no package) would
    # otherwise stand for it in the type checker.
    return importlib.import_module("datasets").Dataset


def _cross_encoder_trainer(
    train: Sequence[ScorerPair], config: TrainConfig, common: dict[str, Any], callbacks: list[Any]
) -> tuple[Any, Any]:
    """A one-label CrossEncoder from the base weights and its trainer: binary cross-entropy over the pairs,
    in batches of similar length.
    """
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    model = CrossEncoder(base_model_path(config), num_labels=1, max_length=config.max_length, device="cpu")
    data = _dataset().from_dict(
        {"query": [p.question for p in train], "text": [p.scored for p in train], "label": [p.label for p in train]}
    )
    args = CrossEncoderTrainingArguments(
        **common,
        batch_sampler=LengthBuckets,  # type: ignore[arg-type]  # called like a sampler factory: any callable
    )
    trainer = CrossEncoderTrainer(
        model=model, args=args, train_dataset=data, loss=BinaryCrossEntropyLoss(model), callbacks=callbacks
    )
    return model, trainer


def triplets(train: Sequence[ScorerPair], seed: int) -> dict[str, list[str]]:
    """(question, positive unit, negative unit) rows of a bi-encoder's training: each positive of a question
    with one of its negatives (a hard one when it has any), drawn by a generator seeded by `seed` and the
    question, so the rows do not depend on the order of the pairs. What the scorer reads (`scored`) stands
    for each unit.
    """
    import random

    by_question: dict[str, list[ScorerPair]] = {}
    for p in train:
        by_question.setdefault(p.question_id, []).append(p)
    rows: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    for qid in sorted(by_question):
        found = sorted(by_question[qid], key=lambda p: (-p.label, p.scored, p.unit))
        negatives = [p for p in found if p.label == 0.0 and p.kind == "hard"] or [p for p in found if p.label == 0.0]
        rng = random.Random(f"{seed}\x1f{qid}")
        for positive in (p for p in found if p.label == 1.0):
            if negatives:
                rows["anchor"].append(positive.question)
                rows["positive"].append(positive.scored)
                rows["negative"].append(rng.choice(negatives).scored)
    return rows


def _bi_encoder_trainer(
    train: Sequence[ScorerPair], config: TrainConfig, common: dict[str, Any], callbacks: list[Any]
) -> tuple[Any, Any]:
    """The base bi-encoder and its trainer: MultipleNegativesRankingLoss over (question, positive, hard
    negative) triplets, every other unit of a batch a further negative; no batch holds one question twice
    (its other positive would count as a negative).
    """
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers

    model = SentenceTransformer(base_model_path(config), device="cpu")
    model.max_seq_length = config.max_length
    # The trainer drafts a Hub model card and draws its widget examples behind a stray progress bar (and the
    # global `random` state): this command writes its own card.
    model.model_card_data.set_widget_examples = lambda dataset: None  # type: ignore[method-assign]
    rows = triplets(train, config.seed)
    if not rows["anchor"]:
        raise ValueError("training a bi-encoder needs questions with a positive and a negative unit")
    args = SentenceTransformerTrainingArguments(**common, batch_sampler=BatchSamplers.NO_DUPLICATES)
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=_dataset().from_dict(rows),
        loss=MultipleNegativesRankingLoss(model),
        callbacks=callbacks,
    )
    return model, trainer
