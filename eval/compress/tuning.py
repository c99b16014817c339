"""Per-corpus tuning of `pruned-auto`: the knobs that compress a corpus hardest while its context still holds
the answers of the user's own tune questions (no generation: the context each setting leaves is measured).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eval.compress.base import Compressor
from eval.compress.pruned_auto import AutoPrunedConfig
from eval.metrics import context_token_recall
from eval.prompt import context_block

SHARES = (0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95)
"""Relevance shares tried (the default, 0.95, is the last)."""
WHOLE = (0, 1, 2)
"""Passages kept whole tried (the default is 2)."""
ONE_SIDED_95 = 1.645
"""Normal quantile of a one-sided 95 % bound for one setting."""
CONFIDENCE = 0.95
"""Confidence that the chosen setting's loss is within its bound, the choice among the grid included."""
MIN_QUESTIONS = 30
"""Fewest tune questions the bound is trusted on (below it, a setting that lost nothing on a handful of
questions would pass with a bound of 0)."""

PromptCounter = Callable[[str, str], int]
"""Tokens the prefill pays for a prompt with this context and question: the rendered prompt less its cached
stable prefix (passage titles, question and template included: they do not compress)."""


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
    """Upper bound of that loss, simultaneous over the grid: mean + z standard errors of the paired
    differences, z the one-sided normal quantile at 1 - 0.05 / (settings tried) (Bonferroni; 2.82 for 21), so
    with 95 % confidence every setting's loss is within its bound, the one chosen as best included."""
    ratio: float
    """Realized ratio: context tokens in / out over all questions."""
    prompt_tokens: float | None = None
    """Mean prompt tokens the prefill pays (None: not measured)."""
    prompt_ratio: float | None = None
    """The uncompressed prompts' mean tokens over this setting's: the end-to-end speed-up's ceiling."""

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
    z: float
    """The normal quantile of the bounds (`simultaneous_z` of the grid's size)."""
    chosen: TunedPoint | None
    """The fastest setting whose loss bound is within `max_loss` (None: no setting is): `choose`."""
    prompt_tokens: float | None = None
    """Mean prompt tokens the prefill pays uncompressed (None: not measured)."""


def loss_upper_bound(base: Sequence[float], kept: Sequence[float], z: float = ONE_SIDED_95) -> float:
    """Upper bound of the mean paired loss (uncompressed minus compressed, per question): mean + `z` standard
    errors (1.645: one-sided 95 % for one setting looked at alone).
    """
    diffs = [b - k for b, k in zip(base, kept, strict=True)]
    spread = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
    return float(statistics.mean(diffs) + z * spread / len(diffs) ** 0.5)


def simultaneous_z(settings: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided normal quantile that bounds `settings` losses at once with `confidence` (Bonferroni: each
    at 1 - (1 - confidence) / settings). Choosing the best of many settings on the same questions picks the
    one luck flattered most; a bound that holds for all of them at once holds for that one too.
    """
    return statistics.NormalDist().inv_cdf(1 - (1 - confidence) / max(settings, 1))


@dataclass(frozen=True)
class LeftContexts:
    """What a compressor left of the tune contexts."""

    recalls: list[float]
    """Each context's context token recall."""
    ratio: float
    """Realized ratio over all of them (context tokens in / out)."""
    prompt_tokens: float | None
    """Mean prompt tokens the prefill pays (None: no prompt counter)."""


def context_recalls(
    comp: Compressor, contexts: Sequence[TuneContext], ratio: float, prompt: PromptCounter | None = None
) -> LeftContexts:
    """Each context's context token recall after `comp` at `ratio` (titles of the passages it keeps, as the prompt
    shows them), the realized ratio over all of them, and with `prompt` the mean prompt tokens the prefill pays.
    """
    recalls, tokens_in, tokens_out, prompts = [], 0, 0, []
    for c in contexts:
        r = comp.compress(list(c.texts), c.question, ratio)
        kept = r.kept if r.kept is not None else list(range(len(c.texts)))
        context = context_block([c.titles[i] for i in kept], r.texts)
        recalls.append(context_token_recall(context, c.answers))
        tokens_in, tokens_out = tokens_in + r.tokens_in, tokens_out + r.tokens_out
        if prompt:
            prompts.append(prompt(context, c.question))
    return LeftContexts(recalls, tokens_in / max(tokens_out, 1), statistics.mean(prompts) if prompts else None)


def uncompressed_prompt_tokens(contexts: Sequence[TuneContext], prompt: PromptCounter | None) -> float | None:
    """Mean prompt tokens the prefill pays for the whole top-k (None without a prompt counter)."""
    if prompt is None:
        return None
    return statistics.mean(prompt(context_block(c.titles, c.texts), c.question) for c in contexts)


def tune_pruned_auto(
    make: Callable[[AutoPrunedConfig], Compressor],
    contexts: Sequence[TuneContext],
    base: AutoPrunedConfig | None = None,
    ratio: float = 8.0,
    max_loss: float = 0.05,
    shares: Sequence[float] = SHARES,
    whole: Sequence[int] = WHOLE,
    advance: Callable[[int, int], None] | None = None,
    prompt: PromptCounter | None = None,
) -> PruningTuning:
    """Try every share x passages-kept-whole on `contexts` (the other knobs as in `base`) at ratio `ratio` as
    the ceiling; choose the fastest setting whose loss is within `max_loss` with 95 % confidence, the choice
    among the grid included (`simultaneous_z`, `choose`), so a setting that passes on these questions by chance
    (or the luckiest of the grid) is not taken. `advance(done, total)` is called after each setting; `prompt`
    counts the prompt tokens the prefill pays.
    """
    if not contexts:
        raise ValueError("no tune questions with reference answers")
    base = base or AutoPrunedConfig()
    uncompressed = [context_token_recall(context_block(c.titles, c.texts), c.answers) for c in contexts]
    full_prompt = uncompressed_prompt_tokens(contexts, prompt)
    points: list[TunedPoint] = []
    grid = list(itertools.product(shares, whole))
    z = simultaneous_z(len(grid))
    for share, kept_whole in grid:
        comp = make(base.model_copy(update={"relevance_share": share, "whole_passages": kept_whole}))
        left = context_recalls(comp, contexts, ratio, prompt)
        points.append(
            TunedPoint(
                relevance_share=share,
                whole_passages=kept_whole,
                recall=statistics.mean(left.recalls),
                loss=statistics.mean(uncompressed) - statistics.mean(left.recalls),
                loss_bound=loss_upper_bound(uncompressed, left.recalls, z),
                ratio=left.ratio,
                prompt_tokens=left.prompt_tokens,
                prompt_ratio=full_prompt / left.prompt_tokens if full_prompt and left.prompt_tokens else None,
            )
        )
        if advance:
            advance(len(points), len(grid))
    chosen = choose(points, max_loss)
    return PruningTuning(len(contexts), statistics.mean(uncompressed), max_loss, points, z, chosen, full_prompt)


def choose(points: Sequence[TunedPoint], max_loss: float) -> TunedPoint | None:
    """The fastest point whose loss bound is within `max_loss` (None: no point is): the fewest prompt tokens the
    prefill pays where they were counted (a setting that keeps a few words of many passages also pays each one's
    title), else the largest realized context ratio.
    """
    ok = [p for p in points if p.loss_bound <= max_loss]
    return max(ok, key=lambda p: (p.prompt_ratio or 0.0, p.ratio, p.relevance_share, p.whole_passages)) if ok else None
