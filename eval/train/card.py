"""A trained scorer's card: what it was trained on, how, and how well it ranks on questions it never saw,
beside the bundled bi-encoder's cosine on the same pairs. Written as `card.json` and `card.md` into the model
folder (neither is a weights file, so the folder's weights fingerprint is the model's alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CARD_JSON = "card.json"
CARD_MD = "card.md"


def ranking_auc(labels: Sequence[float], scores: Sequence[float]) -> float | None:
    """Probability that a positive outscores a negative (ties count half): the Mann-Whitney AUC; None
    without both a positive and a negative.
    """
    pos = [s for s, y in zip(scores, labels, strict=True) if y >= 0.5]
    neg = [s for s, y in zip(scores, labels, strict=True) if y < 0.5]
    if not pos or not neg:
        return None
    import numpy as np

    both = np.asarray([*pos, *neg], dtype=float)
    order = both.argsort(kind="stable")
    ranks = np.empty(len(both))
    sorted_scores = both[order]
    i = 0
    while i < len(both):  # average ranks over ties
        j = i
        while j + 1 < len(both) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    wins = ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2
    return float(wins / (len(pos) * len(neg)))


def per_question_auc(questions: Sequence[str], labels: Sequence[float], scores: Sequence[float]) -> float | None:
    """Mean over questions (with a positive and a negative) of each question's AUC: how well the units of
    one context are ranked, which is what pruning needs.
    """
    groups: dict[str, tuple[list[float], list[float]]] = {}
    for q, y, s in zip(questions, labels, scores, strict=True):
        ys, ss = groups.setdefault(q, ([], []))
        ys.append(y)
        ss.append(s)
    aucs = [a for ys, ss in groups.values() if (a := ranking_auc(ys, ss)) is not None]
    return sum(aucs) / len(aucs) if aucs else None


class RankingFigures(BaseModel):
    """A scorer's ranking of the validation pairs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    auc: float | None
    """Over all validation pairs: positives against every negative."""
    auc_hard: float | None
    """Positives against hard negatives (other units of the retrieved passages) only."""
    auc_per_question: float | None
    """Mean of each question's own AUC: the ranking within one context."""


def ranking_figures(
    questions: Sequence[str], labels: Sequence[float], kinds: Sequence[str], scores: Sequence[float]
) -> RankingFigures:
    """The three AUCs of `scores` on pairs with these questions, labels and kinds."""
    hard = [i for i, k in enumerate(kinds) if k != "easy"]
    return RankingFigures(
        auc=ranking_auc(labels, scores),
        auc_hard=ranking_auc([labels[i] for i in hard], [scores[i] for i in hard]),
        auc_per_question=per_question_auc(questions, labels, scores),
    )


class ScorerCard(BaseModel):
    """What `cribsheet train-scorer` wrote, and its figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["cross-encoder", "bi-encoder"] = "cross-encoder"
    """What was trained (cards written before bi-encoders were trained say nothing: a cross-encoder)."""
    model: str
    """The model folder (`KIND:MODEL` loads it)."""
    weights: str | None
    """Its weights fingerprint (what a run's identity records)."""
    base_model: str
    base_weights: str | None
    questions_path: str
    questions_sha256: str
    index_path: str
    index_sha256: str
    refused_overlap_with: list[str]
    """Question files checked for shared questions (by normalised text) and shared gold documents before
    training: none was shared."""
    refused_overlap_sha256: dict[str, str] = Field(default_factory=dict)
    """Each of those files' sha256 when it was checked (a file rewritten since is not the one checked)."""
    libraries: dict[str, str] = Field(default_factory=dict)
    """Versions of the libraries that trained the weights (torch, transformers, sentence-transformers)."""
    train_documents: list[str] = Field(default_factory=list)
    """The gold documents the training questions ask about (the scorer saw their units)."""
    validation_documents: list[str] = Field(default_factory=list)
    """The gold documents of the validation questions: held out by document, none among `train_documents`."""
    pairs_sha256: str
    """sha256 of the training data (every pair, both splits, canonical JSON lines)."""
    pair_rules: dict[str, object]
    questions: int
    questions_without_positive: int
    train_pairs: int
    train_questions: int
    validation_pairs: int
    validation_questions: int
    positives: int
    hard_negatives: int
    easy_negatives: int
    training: dict[str, object]
    """The training knobs (TrainConfig)."""
    steps: int
    resumed_from_step: int | None
    pairs_seconds: float
    """Labelling the pairs (retrieval and units), in the run that labelled them (a resumed run reads them)."""
    train_seconds: float
    """Fine-tuning, summed over resumed runs."""
    loss_curve: list[tuple[int, float]]
    validation: RankingFigures
    """The trained scorer on the validation pairs (questions held out by sha256 of their normalised text)."""
    bi_encoder: RankingFigures
    """The bundled bi-encoder's cosine (the index's stored unit vectors, what `pruned` scores with) on the same
    pairs."""

    def markdown(self) -> str:
        """The card for people."""

        def f(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.3f}"

        first, last = (self.loss_curve[0][1], self.loss_curve[-1][1]) if self.loss_curve else (None, None)
        lines = [
            f"# Unit scorer `{Path(self.model).name}`",
            "",
            f"A {self.kind} fine-tuned from `{self.base_model}` (weights {self.base_weights}) by `cribsheet "
            f"train-scorer`; load it as `{self.kind}:{self.model}` (reranker, or `scorer:` of the pruned "
            f"compressors). Weights fingerprint: `{self.weights}`.",
            "",
            "## Data",
            "",
            f"- questions: `{self.questions_path}` (sha256 {self.questions_sha256[:12]}), {self.questions} "
            f"answerable, {self.questions_without_positive} without a positive unit among their candidates",
            f"- index: `{self.index_path}` (sha256 {self.index_sha256[:12]})",
            f"- pairs: sha256 {self.pairs_sha256[:12]}; training {self.train_pairs} pairs of "
            f"{self.train_questions} questions, validation {self.validation_pairs} pairs of "
            f"{self.validation_questions} questions (held out by question)",
            f"- labels: {self.positives} positives, {self.hard_negatives} hard negatives, {self.easy_negatives} "
            f"easy negatives; rules {self.pair_rules}",
            "- checked for no shared question with: "
            + (", ".join(f"`{p}`" for p in self.refused_overlap_with) or "nothing (no --not-on or --config)"),
            "",
            "## Training",
            "",
            f"- {self.steps} steps, {self.train_seconds / 60:.1f} min of training"
            + (f" (resumed from step {self.resumed_from_step})" if self.resumed_from_step else "")
            + f", {self.pairs_seconds / 60:.1f} min labelling pairs",
            f"- loss {f(first)} at the start, {f(last)} at the end; knobs {self.training}",
            "",
            "## Validation (questions held out by question)",
            "",
            "| scorer | AUC | AUC vs hard negatives | mean AUC per question |",
            "|---|---|---|---|",
            f"| this {self.kind} | {f(self.validation.auc)} | {f(self.validation.auc_hard)} | "
            f"{f(self.validation.auc_per_question)} |",
            f"| bundled bi-encoder (cosine) | {f(self.bi_encoder.auc)} | {f(self.bi_encoder.auc_hard)} | "
            f"{f(self.bi_encoder.auc_per_question)} |",
            "",
        ]
        return "\n".join(lines)

    def write(self, folder: Path) -> None:
        """`card.json` and `card.md` into `folder`."""
        (folder / CARD_JSON).write_text(self.model_dump_json(indent=2) + "\n")
        (folder / CARD_MD).write_text(self.markdown())


def read_card(folder: Path) -> ScorerCard | None:
    """The card of a scorer folder, None when it has none."""
    path = folder / CARD_JSON
    return ScorerCard.model_validate_json(path.read_text()) if path.is_file() else None
