"""Faithfulness from the generator's own likelihoods: does the context make the answer more likely?

For each answer the serving engine scores the answer's tokens twice with prompt log-probabilities (vLLM's
`prompt_logprobs`, one batched prefill each, on CPU or GPU by configuration alone): given the prompt the
answer was generated from (system prefix, passages, question) and given the same prompt without the passages.
Over the answer's content tokens (those holding a letter or digit) it reads the mean, the 10th percentile
and the minimum of log p(token | passages, question) and of the pointwise mutual information
log p(token | passages, question) - log p(token | question): an answer the passages support is likely given
them, and more likely with them than without (PMI-Faith, Nandwani et al., EMNLP 2023; context-aware decoding,
Shi et al., 2023). A small logistic model, fitted on a tune split of labelled answers only and stored as a
card (features, scaling, coefficients, threshold, the tune data's digest, its validity figures per corpus
kind), turns them into the probability that the answer is supported. The rule checker's share of
supported claims may be one of its features ("combined").

The answer's verdict decides `samples.faithfulness_model` (1 supported, 0 not, NULL without claims); each
claim gets the same features over its own tokens and the model's probability, stored in `claims` so a reader
can see which claim the passages do not carry. The card is the one the figures were measured with: a card of
another generator (its `generator` field) is refused, as its likelihoods mean something else.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError

FEATURES = (
    "lp_mean", "lp_p10", "lp_min", "lq_mean", "pmi_mean", "pmi_p10", "pmi_min", "pmi_neg", "log_tokens", "rules",
)  # fmt: skip
"""Every feature a card may use; `rules` is the rule checker's share of supported claims (1 for a claim it
supports, 0 for one it does not)."""
NO_PASSAGES = "(none)"
"""The passages of the question-only prompt."""
BUNDLED_CARD = "likelihood-smollm2-135m.json"
"""The packaged card fitted for the bundled generator (eval/faithfulness/cards/)."""
_CONTENT = re.compile(r"[^\W_]")


class LikelihoodConfig(BaseModel):
    """The likelihood verifier: a card and how to batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    """A card file (JSON written by benchmarks/faithfulness_likelihood.py); None = the packaged card of the
    bundled generator."""
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """Probability of support from which an answer counts as supported; None = the card's (chosen on its tune
    split)."""
    batch_size: int = Field(default=32, ge=1)
    """Answers per engine batch."""


class Validity(BaseModel):
    """How well a method's verdicts matched two readers' labels on one corpus kind's held-out answers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    balanced_accuracy: float
    auroc: float | None = None
    n: int
    """Claim-bearing labelled answers scored."""
    split: str
    """The split the figure is read on (test: held out from the fit)."""
    sets: list[str]
    """The labelled sets behind it (benchmarks/data/...)."""


class KindModel(BaseModel):
    """The logistic model for one corpus kind: its features, scaling, coefficients and threshold, what it was
    fitted on and how it did on that kind's held-out answers.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    variant: str
    """likelihood (the likelihood features) or combined (with the rule checker's share)."""
    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    threshold: float
    """Chosen on the tune split's out-of-fold probabilities (best balanced accuracy)."""
    tune_cases: int
    tune_sha256: str
    """sha256 of the tune cases' set, id and label, in order."""
    cv_balanced_accuracy: float
    """Grouped 5-fold cross-validation on the tune split: what chose the variant (the test split chose nothing)."""
    validity: Validity | None = None
    """Held-out figures on this kind's test split (None: not measured)."""

    def probability(self, features: dict[str, float]) -> float:
        """P(supported) of one answer or claim from its features."""
        z = self.intercept
        for name, mu, sd, w in zip(self.features, self.mean, self.scale, self.coef, strict=True):
            z += w * (features[name] - mu) / (sd or 1.0)
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


class LikelihoodCard(BaseModel):
    """A fitted likelihood verifier: one model per corpus kind, for one generator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str = "likelihood"
    generator: str
    """The generator whose likelihoods the models were fitted on (its folder name, e.g. smollm2-135m-instruct)."""
    models: dict[str, KindModel]
    """Corpus kind (documentation, encyclopedia) -> its model."""
    default_kind: str = "documentation"
    """The model used where the run's corpus kind is not known or has none."""
    embedder: str | None = None
    """The embedder (registry name) the rule checker used when the models were fitted: the `rules` feature is
    its verdicts, so a model with that feature has its validity only for runs with this embedder (None: not
    recorded)."""

    def model(self, kind: str | None) -> tuple[str, KindModel]:
        """The kind whose model applies to a corpus of `kind`, and that model."""
        chosen = kind if kind in self.models else self.default_kind
        return chosen, self.models[chosen]

    @property
    def validity(self) -> dict[str, Validity]:
        """Kind -> held-out figures, for the kinds measured."""
        return {k: m.validity for k, m in self.models.items() if m.validity is not None}

    def digest(self) -> str:
        """sha256 of the card's canonical JSON, its `embedder` left out: what the run identity stores (the
        fitted models; the embedder is checked against the run's, whose config hash holds it).
        """
        fitted = self.model_dump(mode="json", exclude={"embedder"})
        return hashlib.sha256(json.dumps(fitted, sort_keys=True).encode()).hexdigest()


def load_card(path: str | None) -> LikelihoodCard:
    """The card at `path`, or the packaged one; a missing or malformed card is a one-line error."""
    if path is None:
        packaged = resources.files("eval.faithfulness").joinpath("cards", BUNDLED_CARD)
        if not packaged.is_file():
            raise CribsheetError(f"likelihood card: the packaged {BUNDLED_CARD} is missing (reinstall cribsheet)")
        text = packaged.read_text()
        where = f"packaged card {BUNDLED_CARD}"
    else:
        file = Path(path).expanduser()
        if not file.is_file():
            raise CribsheetError(f"likelihood card {path}: no such file")
        text, where = file.read_text(), str(file)
    try:
        card = LikelihoodCard.model_validate_json(text)
    except Exception as exc:
        first = str(exc).strip().splitlines()
        raise CribsheetError(f"likelihood card {where}: not a card ({first[0] if first else exc})") from None
    if card.default_kind not in card.models:
        raise CribsheetError(f"likelihood card {where}: no model for its default kind {card.default_kind}")
    for kind, m in card.models.items():
        unknown = set(m.features) - set(FEATURES)
        if unknown or not (len(m.features) == len(m.mean) == len(m.scale) == len(m.coef)):
            raise CribsheetError(
                f"likelihood card {where}: {kind}: features {sorted(unknown)} unknown or lists of unequal length"
            )
    return card


def foreign_generator(card: LikelihoodCard, path: str | None, generator_name: str | None) -> str | None:
    """Why `card` cannot score `generator_name`'s answers (fitted on another model's likelihoods), or None. The
    same model under its hub id ("HuggingFaceTB/SmolLM2-135M-Instruct") is the same generator.
    """
    if generator_name is None or Path(generator_name).name.lower() == card.generator.lower():
        return None
    return (
        f"likelihood card {path or BUNDLED_CARD}: fitted on {card.generator}'s likelihoods, not "
        f"{Path(generator_name).name}'s; a card for this generator is fitted on answers of it that two readers "
        "labelled (benchmarks/faithfulness_likelihood.py fits the bundled generator's), or use --verifier nli:MODEL"
    )


def _quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default) of a non-empty list."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def token_features(with_context: Sequence[float], without: Sequence[float]) -> dict[str, float]:
    """The likelihood features over a span's tokens (log p given the passages, and given the question alone)."""
    pmi = [a - b for a, b in zip(with_context, without, strict=True)]
    return {
        "lp_mean": sum(with_context) / len(with_context),
        "lp_p10": _quantile(with_context, 0.1),
        "lp_min": min(with_context),
        "lq_mean": sum(without) / len(without),
        "pmi_mean": sum(pmi) / len(pmi),
        "pmi_neg": sum(p < 0 for p in pmi) / len(pmi),
        "pmi_p10": _quantile(pmi, 0.1),
        "pmi_min": min(pmi),
        "log_tokens": math.log(len(pmi)),
    }


def span_features(
    with_context: Sequence[float], without: Sequence[float], content: Sequence[bool], idx: Iterable[int]
) -> dict[str, float] | None:
    """The features over the content tokens `idx` of an answer that both prompts scored (None: no such
    token).
    """
    keep = [j for j in idx if content[j] and math.isfinite(with_context[j]) and math.isfinite(without[j])]
    return token_features([with_context[j] for j in keep], [without[j] for j in keep]) if keep else None


@dataclass(frozen=True)
class AnswerItem:
    """One answer to score: the prompt's parts, the answer, its claims and the rule checker's verdicts."""

    question: str
    context: str
    answer: str
    claims: Sequence[str]
    rules: Sequence[bool]
    """The rule checker's verdict per claim."""


@dataclass(frozen=True)
class ClaimLikelihood:
    """One claim's features (None where none of its tokens is a content token) and probability."""

    features: dict[str, float] | None
    probability: float | None
    supported: bool | None


@dataclass(frozen=True)
class AnswerLikelihood:
    """One answer's features, probability of support and verdict, and its claims'."""

    features: dict[str, float] | None
    probability: float | None
    supported: bool | None
    claims: list[ClaimLikelihood]


class TokenLogprobs:
    """Per-token log-probabilities of answers under two prompts, from an engine's prompt log-probabilities."""

    def __init__(self, scorer: Any, render: Any, batch_size: int = 32) -> None:
        self.scorer = scorer
        self.tokenizer = scorer.tokenizer
        self.render = render
        self.batch_size = batch_size

    def answer_tokens(self, answer: str) -> tuple[list[int], list[tuple[int, int]], list[bool]]:
        """The answer's token ids, their character spans and which are content tokens."""
        enc = self.tokenizer(answer, add_special_tokens=False, return_offsets_mapping=True)
        ids = [int(i) for i in enc["input_ids"]]
        spans = [(int(a), int(b)) for a, b in enc["offset_mapping"]]
        content = [bool(_CONTENT.search(answer[a:b])) for a, b in spans]
        return ids, spans, content

    def score(self, items: Sequence[tuple[str, str, str]]) -> list[tuple[list[float], list[float]]]:
        """For each (question, context, answer): log p of every answer token given the passages and given
        none (equal lengths, one per answer token).
        """
        out: list[tuple[list[float], list[float]]] = []
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            seqs: list[list[int]] = []
            cuts: list[tuple[int, int]] = []
            for question, context, answer in batch:
                ids = self.answer_tokens(answer)[0]
                for passages in (context, NO_PASSAGES):
                    prompt = self.tokenizer.encode(self.render(passages, question), add_special_tokens=False)
                    seqs.append(prompt + ids)
                    cuts.append((len(prompt), len(ids)))
            # The engine refuses a whole batch for one sequence over its length: such an answer is not scored
            # (its features NaN, so no verdict) rather than failing every other answer of the setting.
            limit = getattr(self.scorer, "max_model_len", None)
            fits = [limit is None or len(seq) < limit for seq in seqs]
            scored = iter(
                self.scorer.token_logprobs([s for s, ok in zip(seqs, fits, strict=True) if ok]) if any(fits) else []
            )
            rows = [next(scored) if ok else [None] * len(seq) for seq, ok in zip(seqs, fits, strict=True)]
            lps = [
                [float("nan") if v is None else v for v in row[n : n + m]]
                for row, (n, m) in zip(rows, cuts, strict=True)
            ]
            out.extend((lps[i], lps[i + 1]) for i in range(0, len(lps), 2))
        return out


def claim_tokens(answer: str, claim: str, spans: Sequence[tuple[int, int]]) -> list[int] | None:
    """Indices of the answer tokens that overlap `claim`'s first occurrence in the answer (None: the claim
    is not a substring of the answer, as when the checker rewrote a lead-in).
    """
    at = answer.find(claim)
    if at < 0 or not claim:
        return None
    end = at + len(claim)
    return [i for i, (a, b) in enumerate(spans) if a < end and b > at]


class LikelihoodVerifier:
    """Scores whole answers and their claims from the generator's likelihoods with a fitted card."""

    name = "likelihood"

    def __init__(
        self, config: LikelihoodConfig, scorer: Any, render: Any, generator_name: str | None, kind: str | None = None
    ) -> None:
        self.card = load_card(config.model)
        self.kind, self.fitted = self.card.model(kind)
        mismatch = foreign_generator(self.card, config.model, generator_name)
        if mismatch:
            raise CribsheetError(mismatch)
        self.threshold = config.threshold if config.threshold is not None else self.fitted.threshold
        self.method = f"likelihood card {self.card.digest()[:12]} ({self.kind} model), threshold {self.threshold:.4f}"
        """What `samples.faithfulness_method` records."""
        self.logprobs = TokenLogprobs(scorer, render, config.batch_size)

    def _verdict(self, features: dict[str, float] | None, rules: float) -> ClaimLikelihood:
        if features is None:
            return ClaimLikelihood(None, None, None)
        p = self.fitted.probability(features | {"rules": rules})
        return ClaimLikelihood(features, p, p >= self.threshold)

    def score_answers(self, items: Sequence[AnswerItem]) -> list[AnswerLikelihood]:
        """Each answer's verdict and its claims' (an answer without claims gets NULL features and verdict)."""
        todo = [i for i, it in enumerate(items) if it.claims]
        scored = dict(
            zip(
                todo,
                self.logprobs.score([(items[i].question, items[i].context, items[i].answer) for i in todo]),
                strict=True,
            )
        )
        out: list[AnswerLikelihood] = []
        for i, item in enumerate(items):
            if i not in scored:
                out.append(AnswerLikelihood(None, None, None, []))
                continue
            with_ctx, without = scored[i]
            _, spans, content = self.logprobs.answer_tokens(item.answer)
            whole = span_features(with_ctx, without, content, range(len(spans)))
            share = sum(item.rules) / len(item.rules) if item.rules else 1.0
            answer = self._verdict(whole, share)
            claims = []
            for claim, ok in zip(item.claims, item.rules, strict=True):
                idx = claim_tokens(item.answer, claim, spans)
                feats = span_features(with_ctx, without, content, idx) if idx is not None else whole
                claims.append(self._verdict(feats, 1.0 if ok else 0.0))
            out.append(AnswerLikelihood(answer.features, answer.probability, answer.supported, claims))
        return out
