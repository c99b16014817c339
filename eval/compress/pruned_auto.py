"""`pruned-auto`: the pruned selector with a budget by relevance mass (the ratio is a ceiling), and what a
kept unit brings with it (a pronoun's antecedent, a question word's best unit, the structure units of
`corpus.units`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from corpus.embed import Embedder
from corpus.sentences import SentenceVectors
from corpus.text import PRONOUN_START
from corpus.units import Span, structure_units
from eval.compress.base import TokenCounter
from eval.compress.pruned import PrunedCompressor, PrunedConfig, register_pruned
from eval.compress.scorer import UnitScorer

if TYPE_CHECKING:
    import numpy as np


class AutoPrunedConfig(PrunedConfig):
    """The pruned selector with a budget by relevance."""

    relevance_share: float = Field(default=0.95, gt=0.0, le=1.0)
    """Share of the context's relevance mass the kept sentences must hold (0.95 and temperature 0.1, with
    antecedents and structure units: chosen on three domains' tune splits, benchmarks/pruned_domains.py)."""
    temperature: float = Field(default=0.1, gt=0.0, le=1.0)
    """Softness of the relevance mass: a sentence's mass is exp((score - best score) / temperature)."""
    keep_antecedents: bool = True
    """A kept sentence that opens with a pronoun ("It", "This", "They") brings the sentence before it in its
    passage, so the pronoun keeps its referent."""
    keep_structure: bool = True
    """A kept list item or code block brings the lead-in that announces it (the sentence ending in ":" before
    it), a kept table row brings its table's first row (the header), and a kept sentence under a question-like
    heading ("How do I ...?") brings the heading's first answer sentence."""
    whole_passages: int = Field(default=2, ge=0, le=100)
    """The reranker's first this-many passages are kept whole and their relevance mass counts as held; the
    other passages are pruned (2: chosen on the three domains' tune splits, December 2; 0: prune every one)."""
    keep_question_words: bool = True
    """Every content word of the question that the context has stays in it: a word the budget's choice lacks
    brings the best-scored sentence that has it (a name, an option, a command the answer sits next to; on:
    chosen on the three domains' tune splits, December 2)."""
    keep_section_lead: bool = True
    """A kept heading of its passage (from the document's outline: a heading, an API signature, a defined
    term), or a kept unit under one, brings the section's first prose sentence, which says what the section
    is about, past an API entry's parameter list or a code block (on: chosen on the three domains' tune
    splits, December 2)."""


class AutoPrunedCompressor(PrunedCompressor):
    """`pruned` with a budget by relevance: the smallest set of best-scored sentences that holds
    `relevance_share` of the context's relevance mass, and never fewer tokens than `tokens_in / ratio` (the
    ratio is a ceiling). A question one sentence answers compresses to the ceiling; one whose answer spans
    several close-scored sentences keeps them. A word of the question the context has stays in it, and a kept
    sentence that opens with a pronoun keeps its predecessor.
    """

    def __init__(
        self,
        count_tokens: TokenCounter,
        embedder: Embedder,
        stored: SentenceVectors,
        config: AutoPrunedConfig,
        scorer: UnitScorer | None = None,
    ) -> None:
        super().__init__(count_tokens, embedder, stored, True, config, scorer)
        self.name = "pruned-auto"
        self.share = config.relevance_share
        self.temperature = config.temperature
        self.keep_antecedents = config.keep_antecedents
        self.keep_structure = config.keep_structure
        self.keep_section_lead = config.keep_section_lead
        self.whole_passages = config.whole_passages
        self.keep_question_words = config.keep_question_words

    def units(self, spans: list[Span]) -> dict[int, list[int]]:
        """List items and code -> their lead-in; rows -> their header; a heading and what is under it -> the
        section's first prose sentence.
        """
        return structure_units(spans, self.keep_section_lead) if self.keep_structure else {}

    def select(
        self, sims: np.ndarray, sizes: list[int], tokens_in: int, ratio: float, sentences: list[tuple[int, str]]
    ) -> set[int]:
        """The sentences of the first `whole_passages` passages, then best-scored first until the relevance
        share and the ceiling's floor of tokens are both met.
        """
        import numpy as np

        floor = max(1, round(tokens_in / ratio))
        mass = np.exp((sims - sims.max()) / self.temperature)
        wanted = self.share * float(mass.sum())
        whole = {i for i, (pi, _) in enumerate(sentences) if pi < self.whole_passages}
        chosen: set[int] = set(whole)
        held, used = float(sum(mass[i] for i in whole)), sum(sizes[i] for i in whole)
        for i in np.argsort(-sims, kind="stable"):
            if held >= wanted and used >= floor:
                break
            if i in chosen:
                continue
            chosen.add(int(i))
            held += float(mass[i])
            used += sizes[i]
        return chosen

    def complete(
        self,
        chosen: set[int],
        sims: np.ndarray,
        sentences: list[tuple[int, str]],
        asked: set[str],
        words: list[set[str]],
    ) -> set[int]:
        """With `keep_question_words`, each content word of the question the context has and the choice lacks
        brings the best-scored sentence that has it; with `keep_antecedents`, a kept sentence opening with a
        pronoun brings the one before it.
        """
        chosen = set(chosen)
        if self.keep_question_words and asked:
            kept = set().union(*(words[i] for i in chosen))
            for word in sorted(asked - kept):
                holders = [i for i, w in enumerate(words) if word in w]
                if holders and word not in kept:
                    best = max(holders, key=lambda i: (float(sims[i]), -i))
                    chosen.add(best)
                    kept |= words[best]
        if self.keep_antecedents:
            for i in sorted(chosen):
                if i > 0 and sentences[i - 1][0] == sentences[i][0] and PRONOUN_START.match(sentences[i][1]):
                    chosen.add(i - 1)
        return chosen


register_pruned(
    "pruned-auto",
    AutoPrunedConfig,
    lambda count, embedder, stored, config, scorer: AutoPrunedCompressor(count, embedder, stored, config, scorer),
    "The pruned selector with a budget by relevance mass (the ratio is a ceiling) and pronoun antecedents.",
)
