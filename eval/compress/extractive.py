"""Query-aware sentence selection by embedder similarity: a compressor at the price of an embedder."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from corpus.embed import Embedder, VectorCache
from corpus.errors import CribsheetError
from corpus.sentences import SentenceVectors, Unit, unit_spans
from corpus.text import LIST_ITEM, PRONOUN_START, content_words

if TYPE_CHECKING:
    import numpy as np

from eval.compress.base import COMPRESSORS, CompressionResult, Compressor, CompressorDeps, TokenCounter
from eval.compress.cache import Cached, CompressionCache, MemoryCache, cache_key
from eval.compress.identity import code_version, compressor_identity


class ExtractiveConfig(BaseModel):
    """Sentence selection by the embedder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_cached: int = Field(default=200_000, ge=1)
    """Sentence vectors kept in memory across the sweep."""
    rank_prior: float = Field(default=0.04, ge=0.0, le=1.0)
    """Score taken off per place a sentence's passage stands below the reranker's first: the reranker's order
    is evidence too (0: similarity alone)."""
    word_overlap: float = Field(default=0.4, ge=0.0, le=5.0)
    """Score added for the share of the question's content words the sentence has (query-aware only): names
    and rare words a sentence embedding underweights (0: similarity alone)."""


class ExtractiveCompressor:
    """Query-aware sentence selection by embedder similarity to the question: an embedder-sized scorer.

    Keeps the best-scored sentences until the token budget is met, in their original order; passages with no
    kept sentence are dropped (`kept` says which remain). A sentence's score is its similarity to the
    question, less `rank_prior` per place its passage stands below the reranker's first, plus
    `word_overlap` times the share of the question's content words it has. Sentence vectors do not depend
    on the question, so they are kept (by sentence text) and a passage seen before costs only the
    question's embedding and a dot product.
    """

    name = "extractive"
    query_aware = True

    def __init__(
        self,
        count_tokens: TokenCounter,
        embedder: Embedder,
        config: ExtractiveConfig | None = None,
        bills: CompressionCache | None = None,
        identity: str = "",
    ) -> None:
        config = config or ExtractiveConfig()
        self.count = count_tokens
        self.embedder = embedder
        self.calls = 0
        self.rank_prior = config.rank_prior
        self.word_overlap = config.word_overlap
        self.max_cached = config.max_cached
        self._sentence_vectors = VectorCache(embedder, config.max_cached)
        self._passages: dict[str, np.ndarray] = {}
        """Sentence vectors by passage, kept across calls (at most `max_cached` sentences in all)."""
        self._held = 0
        self.bills: CompressionCache = bills or MemoryCache()
        """What embedding each passage's sentences cost the first time, by content key: kept with the index's
        compression cache, so every later setting, question and run is billed the same seconds."""
        self.identity = identity or "extractive-vectors"

    def compress(self, passages: Sequence[str], question: str, ratio: float) -> CompressionResult:
        """The sentences most similar to `question` until the token budget is met."""
        import numpy as np

        start = time.perf_counter()
        self.calls += 1
        split = self.split(passages)
        # The split is not scoring: pruned reads the units the index stored (a LanceDB scan, whose time follows
        # the index and the machine's load, not this request). It is paid here and kept out of the cold bill,
        # which times again only the scoring (the stored vectors' read is likewise replaced by their bill).
        splitting = time.perf_counter() - start
        spans = [
            (pi, p[u[0] : u[1]], u[2], u[3])
            for pi, (p, units) in enumerate(zip(passages, split, strict=True))
            for u in units
        ]
        sentences = [(pi, text) for pi, text, _, _ in spans]
        tokens_in = sum(self.count(p) for p in passages)
        if not sentences:
            return CompressionResult(texts=[], tokens_in=tokens_in, tokens_out=0, seconds=0.0, calls=1, kept=[])
        sizes = [self.count(s) for _, s in sentences]
        embed_start = time.perf_counter()
        vectors, vector_bill = self.vectors_and_cost(passages, sentences)
        embedding = time.perf_counter() - embed_start
        sims = vectors @ self.query_vector(question, vectors)
        sims = sims - self.rank_prior * np.array([pi for pi, _ in sentences], dtype=sims.dtype)
        asked = set(content_words(question)) if self.query_aware else set()
        words = [set(content_words(s)) for _, s in sentences] if asked else []
        if asked and self.word_overlap:
            shares = [len(asked & w) / len(asked) for w in words]
            sims = sims + self.word_overlap * np.array(shares, dtype=sims.dtype)
        chosen = self.complete(self.select(sims, sizes, tokens_in, ratio, sentences), sims, sentences, asked, words)
        units = self.units(spans)
        chosen |= {j for i in chosen for j in units.get(i, ())}
        texts: list[str] = []
        kept: list[int] = []
        for pi in range(len(passages)):
            picked = [i for i, (p, _) in enumerate(sentences) if p == pi and i in chosen]
            if picked:
                texts.append(join_units([(spans[i][1], spans[i][3]) for i in picked]))
                kept.append(pi)
        seconds = time.perf_counter() - start
        return CompressionResult(
            texts=texts,
            tokens_in=tokens_in,
            tokens_out=sum(self.count(t) for t in texts),
            seconds=seconds,
            # From nothing: the scoring done here plus what every passage's sentence vectors cost when they
            # were first computed, whoever computed them (an earlier setting, question or run).
            cold_seconds=seconds - splitting - embedding + vector_bill,
            calls=1,
            kept=kept,
        )

    def select(
        self, sims: np.ndarray, sizes: list[int], tokens_in: int, ratio: float, sentences: list[tuple[int, str]]
    ) -> set[int]:
        """The best-scored sentences until `tokens_in / ratio` tokens are kept (a sentence that would pass
        the budget is skipped for a shorter one further down).
        """
        import numpy as np

        budget = max(1, round(tokens_in / ratio))
        chosen: set[int] = set()
        used = 0
        for i in np.argsort(-sims, kind="stable"):
            if chosen and used + sizes[i] > budget:
                continue  # try shorter sentences further down; stop only when the budget is exhausted
            chosen.add(int(i))
            used += sizes[i]
            if used >= budget:
                break
        return chosen

    def complete(
        self,
        chosen: set[int],
        sims: np.ndarray,
        sentences: list[tuple[int, str]],
        asked: set[str],
        words: list[set[str]],
    ) -> set[int]:
        """What the selection keeps besides its budget's choice (`asked`: the question's content words, empty
        for a query-agnostic selector; `words`: each sentence's). Here nothing: the choice stands.
        """
        return chosen

    def split(self, passages: Sequence[str]) -> list[list[Unit]]:
        """The selection units of each passage: its sentences (this compressor has no index to read an
        outline from).
        """
        return [unit_spans(p) for p in passages]

    def units(self, spans: list[tuple[int, str, bool, str]]) -> dict[int, list[int]]:
        """Units a kept unit brings along (none: every unit stands alone)."""
        return {}

    def vectors_and_cost(self, passages: Sequence[str], sentences: list[tuple[int, str]]) -> tuple[np.ndarray, float]:
        """Unit vectors of `sentences` (passage index, text) and what they cost to compute from nothing.

        Each passage's sentences are embedded as one batch, the first time the passage is seen, and that
        batch's seconds are its bill from then on (kept by content key in `bills`). The batch depends only on
        the passage, so the bill does not depend on the order of settings or questions, nor on the run.
        """
        import numpy as np

        rows: list[np.ndarray] = []
        bill = 0.0
        fresh: dict[str, Cached] = {}
        for pi, passage in enumerate(passages):
            mine = [text for p, text in sentences if p == pi]
            if not mine:
                continue
            key = cache_key(self.identity, 0.0, passage)
            vectors = self._passages.get(passage)
            billed = self.bills.get(key) or fresh.get(key)
            if vectors is None or billed is None:
                start = time.perf_counter()
                vectors = self.embedder.embed_documents(mine)
                spent = time.perf_counter() - start
                self._keep(passage, vectors)
                if billed is None:
                    billed = fresh[key] = Cached("", spent)
            rows.append(vectors)
            bill += billed.seconds
        if fresh:
            self.bills.put_many(fresh)
        return np.concatenate(rows), bill

    def _keep(self, passage: str, vectors: np.ndarray) -> None:
        if self._held + len(vectors) > self.max_cached:
            self._passages.clear()
            self._held = 0
        self._passages[passage] = vectors
        self._held += len(vectors)

    def query_vector(self, question: str, vectors: np.ndarray) -> np.ndarray:
        """What sentences are scored against: the question's vector."""
        return self.embedder.embed_query(question)

    def flush(self) -> None:
        """Persist the passages' bills added since the last flush (the vectors live in memory)."""
        self.bills.flush()


class PrunedCompressor(ExtractiveCompressor):
    """The extractive selector with sentence vectors computed at index time: at query time a lookup and a
    dot product with the question's vector (which the retriever and reranker already computed: the embedder
    keeps recent query vectors), so pruning costs about what reranking does. A sentence the index lacks is
    embedded here (`missed` counts them; the cost is in the sample's compressor seconds).

    `query_aware=False` is its agnostic twin: the same selector scoring sentences against the centroid of
    the context's sentences (what the context is mostly about) instead of the question.
    """

    name = "pruned"

    def __init__(
        self,
        count_tokens: TokenCounter,
        embedder: Embedder,
        stored: SentenceVectors,
        query_aware: bool = True,
        config: ExtractiveConfig | None = None,
    ) -> None:
        super().__init__(count_tokens, embedder, config)
        self.stored = stored
        self.query_aware = query_aware
        self.name = "pruned" if query_aware else "pruned-agnostic"
        self.missed = 0

    def vectors_and_cost(self, passages: Sequence[str], sentences: list[tuple[int, str]]) -> tuple[np.ndarray, float]:
        """Stored vectors, embedding only what the index lacks; the cost is the stored vectors' share of the
        index-time embedding plus what the missing ones cost here.
        """
        import numpy as np

        texts = [text for _, text in sentences]
        found, costs = self.stored.lookup_with_cost(texts)
        missing = [t for t in texts if t not in found]
        bill = sum(costs.values())
        if missing:
            self.missed += len(missing)
            found |= dict(zip(missing, self._sentence_vectors(missing), strict=True))
            bill += self._sentence_vectors.cold_seconds(missing)
        return np.stack([found[t] for t in texts]), bill

    def flush(self) -> None:
        """Nothing to persist: the vectors and their bill are the index's."""

    def split(self, passages: Sequence[str]) -> list[list[Unit]]:
        """Each passage's units as the index stored them (code blocks whole, table rows, block kinds), or its
        sentences where it stored none (the same split its sentence vectors were made from).
        """
        return self.stored.units(passages)

    def query_vector(self, question: str, vectors: np.ndarray) -> np.ndarray:
        """The question's vector, or (agnostic twin) the normalised centroid of the context's sentences."""
        import numpy as np

        if self.query_aware:
            return self.embedder.embed_query(question)
        centroid = vectors.mean(axis=0)
        return np.asarray(centroid / (np.linalg.norm(centroid) or 1.0), dtype=np.float32)


class AutoPrunedConfig(ExtractiveConfig):
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
        self, count_tokens: TokenCounter, embedder: Embedder, stored: SentenceVectors, config: AutoPrunedConfig
    ) -> None:
        super().__init__(count_tokens, embedder, stored, True, config)
        self.name = "pruned-auto"
        self.share = config.relevance_share
        self.temperature = config.temperature
        self.keep_antecedents = config.keep_antecedents
        self.keep_structure = config.keep_structure
        self.keep_section_lead = config.keep_section_lead
        self.whole_passages = config.whole_passages
        self.keep_question_words = config.keep_question_words

    def units(self, spans: list[tuple[int, str, bool, str]]) -> dict[int, list[int]]:
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


HEADINGS = frozenset({"heading", "signature", "term"})
"""Unit kinds that title what follows them (from a document's outline)."""


def structure_units(spans: list[tuple[int, str, bool, str]], section_lead: bool = False) -> dict[int, list[int]]:
    """Which units each unit brings along when it is kept, from the blocks (paragraphs) of its passage.

    `spans` holds (passage, text, ends its block, kind) in passage order. A list item (kind `list`, or a
    paragraph opening like one) or a code block brings the lead-in before it (the last sentence of the nearest
    paragraph before it that ends in ":"); a table row brings its table's first row; a unit after a
    question-like heading (a one-sentence paragraph of at most 15 words ending in "?") brings the first
    sentence after that heading, which answers it; with `section_lead`, a heading of the outline (kind
    heading, signature or term) and every unit after it bring the section's first prose sentence
    (`section_lead_of`).
    """
    paragraphs: list[list[int]] = []
    for i, (pi, _, _, _) in enumerate(spans):
        if not paragraphs or spans[paragraphs[-1][-1]][2] or spans[paragraphs[-1][-1]][0] != pi:
            paragraphs.append([])
        paragraphs[-1].append(i)
    links: dict[int, list[int]] = {}
    lead_in: int | None = None
    answer: int | None = None
    for k, para in enumerate(paragraphs):
        (passage, first, _, kind) = spans[para[0]]
        if k and spans[paragraphs[k - 1][0]][0] != passage:
            lead_in = answer = None  # a new passage: nothing before it is its structure
        if kind in ("list", "code") or (kind == "text" and LIST_ITEM.match(first)):
            for i in para:
                if lead_in is not None:
                    links.setdefault(i, []).append(lead_in)
        elif kind == "row":
            for i in para[1:]:
                links.setdefault(i, []).append(para[0])
        else:
            last = spans[para[-1]][1].rstrip()
            lead_in = para[-1] if last.endswith(":") else None
        question = len(para) == 1 and first.rstrip().endswith("?") and len(first.split()) <= 15
        if question:
            following = para[-1] + 1
            answer = following if following < len(spans) and spans[following][0] == passage else None
            continue
        if section_lead and kind in HEADINGS:
            answer = section_lead_of(spans, para[-1])
            if answer is not None:
                for i in para:
                    links.setdefault(i, []).append(answer)
            continue
        if answer is not None:
            for i in para:
                if i != answer:
                    links.setdefault(i, []).append(answer)
    return links


def section_lead_of(spans: list[tuple[int, str, bool, str]], heading: int) -> int | None:
    """The first prose sentence (kind `text`) after unit `heading` in its passage and section: what the
    section says it is about, past an API entry's parameter list or a code block; None when the next heading
    or the passage's end comes first.
    """
    passage = spans[heading][0]
    for j in range(heading + 1, len(spans)):
        if spans[j][0] != passage or spans[j][3] in HEADINGS:
            return None
        if spans[j][3] == "text" and not LIST_ITEM.match(spans[j][1]):
            return j
    return None


def join_units(picked: list[tuple[str, str]]) -> str:
    """The kept units of one passage as text: (text, kind) pairs in passage order; a code block or table row
    stands on its own lines, sentences are joined by a space.
    """
    out = ""
    for n, (text, kind) in enumerate(picked):
        if n:
            out += "\n" if kind in ("code", "row") or picked[n - 1][1] in ("code", "row") else " "
        out += text
    return out


NEEDS_SENTENCE_VECTORS = frozenset({"pruned", "pruned-agnostic", "pruned-auto"})
"""Compressors that read the sentence vectors an index stores (`cribsheet index --sentence-vectors`)."""


def missing_sentence_vectors(name: str) -> CribsheetError:
    """The error for compressor `name` on an index without sentence vectors."""
    return CribsheetError(
        f"compressor '{name}' needs sentence vectors in the index: rebuild it with "
        "`cribsheet index --sentence-vectors` (options.sentence_vectors: true)"
    )


def _stored_vectors(deps: CompressorDeps, name: str) -> SentenceVectors:
    if deps.embedder is None or deps.index_path is None:
        raise CribsheetError(f"compressor '{name}' needs an embedder and an index")
    stored = SentenceVectors(deps.index_path, deps.index_version)
    if not stored.available:
        raise missing_sentence_vectors(name)
    return stored


@COMPRESSORS.register("pruned", ExtractiveConfig)
def _pruned(config: ExtractiveConfig, deps: CompressorDeps) -> Compressor:
    """Sentences most similar to the question, with vectors stored at index time (query-aware)."""
    stored = _stored_vectors(deps, "pruned")
    return PrunedCompressor(deps.count_tokens, deps.embedder, stored, config=config)  # type: ignore[arg-type]


@COMPRESSORS.register("pruned-agnostic", ExtractiveConfig)
def _pruned_agnostic(config: ExtractiveConfig, deps: CompressorDeps) -> Compressor:
    """The pruned selector's agnostic twin: sentences closest to the context's centroid (no question)."""
    stored = _stored_vectors(deps, "pruned-agnostic")
    return PrunedCompressor(deps.count_tokens, deps.embedder, stored, False, config)  # type: ignore[arg-type]


@COMPRESSORS.register("pruned-auto", AutoPrunedConfig)
def _pruned_auto(config: AutoPrunedConfig, deps: CompressorDeps) -> Compressor:
    """The pruned selector with a budget by relevance mass (the ratio is a ceiling) and pronoun antecedents."""
    stored = _stored_vectors(deps, "pruned-auto")
    return AutoPrunedCompressor(deps.count_tokens, deps.embedder, stored, config)  # type: ignore[arg-type]


@COMPRESSORS.register("extractive", ExtractiveConfig)
def _extractive(config: ExtractiveConfig, deps: CompressorDeps) -> Compressor:
    """Sentences most similar to the question, query-aware."""
    if deps.embedder is None:
        raise CribsheetError("compressor 'extractive' needs an embedder")
    embedder = deps.embedder
    # The bill's key: what computes the vectors (embedder, precision, dimension, libraries, this code).
    what = {"embedder": embedder.name, "dim": embedder.dim, "precision": getattr(embedder, "precision", None)}
    identity = compressor_identity("extractive-vectors", what, None, code_version(ExtractiveCompressor))
    return ExtractiveCompressor(deps.count_tokens, embedder, config, deps.cache, identity)
