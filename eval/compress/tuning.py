"""Per-corpus tuning of `pruned-auto`: the knobs that compress a corpus hardest while its context still holds
the answers of the user's own tune questions (no generation: the context each setting leaves is measured).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eval.compress.base import Compressor
from eval.compress.extractive import AutoPrunedConfig
from eval.metrics import context_token_recall
from eval.prompt import context_block

SHARES = (0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95)
"""Relevance shares tried (the default, 0.95, is the last)."""
WHOLE = (0, 1, 2)
"""Passages kept whole tried (the default is 2)."""
ONE_SIDED_95 = 1.645
"""Normal quantile of a one-sided 95 % bound."""
MIN_QUESTIONS = 30
"""Fewest tune questions the bound is trusted on (below it, a setting that lost nothing on a handful of
questions would pass with a bound of 0)."""


@dataclass(frozen=True)
class TuneContext:
    """One tune question's top-k as the sweep would prompt it: titles and texts in reranker order."""

    question: str
    answers: Sequence[str]
    titles: Sequence[str]
    texts: Sequence[str]


@dataclass(frozen=True)
class TunedPoint:
    """One setting's figures on the tune questions."""

    relevance_share: float
    whole_passages: int
    recall: float
    """Mean context token recall of what the setting leaves."""
    loss: float
    """Mean paired loss against the uncompressed context (share of the answer's content words, 0-1)."""
    loss_bound: float
    """One-sided 95 % upper bound of that loss (mean + 1.645 standard errors of the paired differences)."""
    ratio: float
    """Realized ratio: context tokens in / out over all questions."""

    @property
    def name(self) -> str:
        """`s0.95 w2`: share and passages kept whole."""
        return f"s{self.relevance_share} w{self.whole_passages}"


@dataclass(frozen=True)
class PruningTuning:
    """Every setting tried and the one chosen."""

    questions: int
    baseline_recall: float
    """Mean context token recall of the uncompressed top-k."""
    max_loss: float
    points: list[TunedPoint]
    chosen: TunedPoint | None
    """The largest realized ratio whose loss bound is within `max_loss` (None: no setting is)."""


def loss_upper_bound(base: Sequence[float], kept: Sequence[float]) -> float:
    """One-sided 95 % upper bound of the mean paired loss (uncompressed minus compressed, per question)."""
    diffs = [b - k for b, k in zip(base, kept, strict=True)]
    spread = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
    return float(statistics.mean(diffs) + ONE_SIDED_95 * spread / len(diffs) ** 0.5)


def context_recalls(comp: Compressor, contexts: Sequence[TuneContext], ratio: float) -> tuple[list[float], float]:
    """Each context's context token recall after `comp` at `ratio` (titles of the passages it keeps, as the prompt
    shows them), and the realized ratio over all of them (context tokens in / out).
    """
    recalls, tokens_in, tokens_out = [], 0, 0
    for c in contexts:
        r = comp.compress(list(c.texts), c.question, ratio)
        kept = r.kept if r.kept is not None else list(range(len(c.texts)))
        recalls.append(context_token_recall(context_block([c.titles[i] for i in kept], r.texts), c.answers))
        tokens_in, tokens_out = tokens_in + r.tokens_in, tokens_out + r.tokens_out
    return recalls, tokens_in / max(tokens_out, 1)


def tune_pruned_auto(
    make: Callable[[AutoPrunedConfig], Compressor],
    contexts: Sequence[TuneContext],
    base: AutoPrunedConfig | None = None,
    ratio: float = 8.0,
    max_loss: float = 0.05,
    shares: Sequence[float] = SHARES,
    whole: Sequence[int] = WHOLE,
    advance: Callable[[int, int], None] | None = None,
) -> PruningTuning:
    """Try every share x passages-kept-whole on `contexts` (the other knobs as in `base`) at ratio `ratio` as
    the ceiling; choose the largest realized ratio whose loss is within `max_loss` with 95 % confidence, so a
    setting that passes on these questions by chance is not taken. `advance(done, total)` is called after each
    setting.
    """
    if not contexts:
        raise ValueError("no tune questions with reference answers")
    base = base or AutoPrunedConfig()
    uncompressed = [context_token_recall(context_block(c.titles, c.texts), c.answers) for c in contexts]
    points: list[TunedPoint] = []
    grid = list(itertools.product(shares, whole))
    for share, kept_whole in grid:
        comp = make(base.model_copy(update={"relevance_share": share, "whole_passages": kept_whole}))
        recalls, realized = context_recalls(comp, contexts, ratio)
        points.append(
            TunedPoint(
                relevance_share=share,
                whole_passages=kept_whole,
                recall=statistics.mean(recalls),
                loss=statistics.mean(uncompressed) - statistics.mean(recalls),
                loss_bound=loss_upper_bound(uncompressed, recalls),
                ratio=realized,
            )
        )
        if advance:
            advance(len(points), len(grid))
    return PruningTuning(len(contexts), statistics.mean(uncompressed), max_loss, points, choose(points, max_loss))


def choose(points: Sequence[TunedPoint], max_loss: float) -> TunedPoint | None:
    """The point with the largest realized ratio whose loss bound is within `max_loss` (None: no point is)."""
    ok = [p for p in points if p.loss_bound <= max_loss]
    return max(ok, key=lambda p: (p.ratio, p.relevance_share, p.whole_passages)) if ok else None
