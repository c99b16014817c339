"""Model verifiers of faithfulness: a trained claim-vs-evidence classifier beside the rule checker.

The rule checker is a lexical-alignment screen: it is careful where a claim shares the context's words and
near chance where the support is a paraphrase or an inference (software documentation). A verifier is the
published remedy: a sequence-classification model trained for NLI or fact checking (MiniCheck, HHEM, an
MNLI cross-encoder; docs/faithfulness.md lists some) that reads (evidence, claim) and gives the
probability that the evidence supports the claim.

`nli:MODEL` loads MODEL with transformers (a local folder, or a hub id resolved through the Hugging Face
cache), finds the supporting label in its `id2label` ("entailment", "supported", "consistent", ...) or takes
a single logit as a consistency score, and scores each claim against the few context windows that share
most of its words (the checker's best span first), each cut to the model's length. A claim is supported
when its best probability clears `threshold` (part of the config: choose it on a tuning split, never on the
split you report).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from corpus.errors import CribsheetError
from corpus.registry import Registry
from corpus.text import content_words, sentence_spans
from eval.faithfulness.likelihood import AnswerItem, AnswerLikelihood, LikelihoodConfig, LikelihoodVerifier


@dataclass(frozen=True)
class ClaimScore:
    """A verifier's verdict on one claim: the best probability of support and the window it came from."""

    probability: float
    supported: bool
    window: str


class Verifier(Protocol):
    """Scores claims against their context."""

    name: str

    def score_claims(self, items: Sequence[tuple[str, str, str | None]]) -> list[ClaimScore]:
        """One verdict per (claim, context, best span of the rule checker or None), in order."""
        ...


@runtime_checkable
class AnswerVerifier(Protocol):
    """Scores whole answers (and their claims) against the prompt they were generated from."""

    name: str

    def score_answers(self, items: Sequence[AnswerItem]) -> list[AnswerLikelihood]:
        """One verdict per answer, with its claims', in order."""
        ...


@dataclass(frozen=True)
class VerifierDeps:
    """What a verifier may use of the sweep: the generator's engine (it scores tokens) and how it renders a
    prompt, for a verifier that reads the generator's own likelihoods.
    """

    scorer: Any = None
    """The generator, when it scores prompt tokens (`TokenScorer`); None otherwise."""
    render: Any = None
    """`(context, question) -> prompt`, the sweep's prompt layout."""
    generator_model: str | None = None
    """The generator's model (folder or id)."""
    corpus_kind: str | None = None
    """The sweep's corpus kind: which of a likelihood card's models applies."""


VERIFIERS: Registry[Verifier | AnswerVerifier, VerifierDeps | None] = Registry("verifier")
"""Registered model verifiers; `VerifierConfig.name` names one."""


class NliConfig(BaseModel):
    """A sequence-classification model that reads (evidence, claim)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    """Local folder, or a hub id resolved through the Hugging Face cache."""
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    """Probability of support from which a claim counts as supported (choose it on a tuning split)."""
    windows: int = Field(default=3, ge=1)
    """Context windows a claim is scored against (the best probability counts)."""
    window_sentences: int = Field(default=3, ge=1)
    """Sentences per window: the anchor sentence and its neighbours (support often spans two sentences)."""
    batch_size: int = Field(default=16, ge=1)
    max_length: int | None = Field(default=None, ge=16)
    """Tokens per (window, claim) pair; None = the model's own limit (at most 512)."""
    device: str = "auto"
    """auto (a GPU when torch sees one), cpu, cuda, cuda:1, ..."""
    label: int | None = Field(default=None, ge=0)
    """Index of the label that means "supported", for a model whose config does not name it (MiniCheck's
    LABEL_1); None = found by name in `id2label`."""


class VerifierConfig(BaseModel):
    """The sweep's model verifier: a registered name and its options (each verifier takes the ones its config
    declares; unset ones are its defaults).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "nli"
    """nli (a sequence-classification model) or likelihood (the generator's own likelihoods and a card)."""
    model: str | None = None
    """nli: the model's folder or hub id (required); likelihood: a card file (None: the packaged card)."""
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """Probability of support from which a claim (nli) or an answer (likelihood) counts as supported; None:
    0.5 for nli, the card's for likelihood."""
    windows: int | None = Field(default=None, ge=1)
    window_sentences: int | None = Field(default=None, ge=1)
    batch_size: int | None = Field(default=None, ge=1)
    max_length: int | None = Field(default=None, ge=16)
    device: str | None = None
    label: int | None = Field(default=None, ge=0)

    @model_serializer(mode="wrap")
    def _as_before(self, handler: Any) -> dict[str, Any]:
        """An nli verifier dumps its defaults filled in, as when this config was the nli config itself: the
        config (and so a run's hash) of an nli sweep written before other verifiers existed is unchanged.
        """
        dumped: dict[str, Any] = handler(self)
        if dumped.get("name") == "nli" and dumped.get("model") is not None:
            given = {k: v for k, v in dumped.items() if v is not None and k != "name"}
            return NliConfig.model_validate(given).model_dump() | {"name": "nli"}
        return dumped

    def options(self) -> dict[str, Any]:
        """The options set, for the registry (unset ones are left to the verifier's own defaults)."""
        return self.model_dump(exclude_none=True, exclude={"name"})

    def spec(self) -> Any:
        """The registered verifier's validated spec."""
        return VERIFIERS.spec(self.name, self.options())


SUPPORT_LABELS = ("entail", "support", "consistent", "faithful", "factual")
"""Label names (lowercased, matched as substrings) that mean "the evidence supports the claim"."""
AGAINST = ("not", "non", "un", "in")
"""Prefixes that turn a support label into its opposite ("not_entailment", "unsupported", "inconsistent")."""


def support_label(id2label: dict[int, str], model: str, given: int | None = None) -> int | None:
    """Index of the label that means "supported" (`given` when the config names it); None for a single-logit
    consistency score.

    A model with several labels none of which names support is an error: scoring it would guess.
    """
    if given is not None:
        if given not in id2label:
            raise CribsheetError(f"verifier model {model}: label {given} is not one of its labels {dict(id2label)}")
        return given
    if len(id2label) == 1:
        return None
    found = []
    for i, label in id2label.items():
        name = str(label).lower().replace("-", "_").replace(" ", "_")
        for word in SUPPORT_LABELS:
            at = name.find(word)
            if at >= 0 and not any(name[:at].rstrip("_").endswith(p) for p in AGAINST):
                found.append(int(i))
                break
    if len(found) != 1:
        labels = ", ".join(f"{i}={label}" for i, label in sorted(id2label.items()))
        what = "no label" if not found else "more than one label"
        raise CribsheetError(
            f"verifier model {model}: {what} means 'supported' (labels: {labels}); "
            "use an NLI or fact-checking model that names an entailment/supported label, or set the verifier's label"
        )
    return found[0]


def _resolve(model: str) -> str:
    """A local folder as is; a hub id through the Hugging Face cache (downloaded where a hub is reachable)."""
    if Path(model).expanduser().is_dir():
        return str(Path(model).expanduser())
    if Path(model).expanduser().exists() or model.startswith((".", "/", "~")):
        raise CribsheetError(f"verifier model {model}: not a model folder")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(model, allow_patterns=["*.json", "*.safetensors", "*.bin", "*.txt", "*.model"])
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CribsheetError(
            f"verifier model {model}: not a local folder and not in the Hugging Face cache ({first[:200]})"
        ) from None


def check_verifier(config: VerifierConfig) -> None:
    """The model exists and names a support label (or gives one logit), or the likelihood card reads: its
    config only, so a sweep fails on a wrong verifier before any work.
    """
    from transformers import AutoConfig

    if config.name == "likelihood":
        from eval.faithfulness.likelihood import load_card

        load_card(config.model)
        return
    if config.model is None:
        raise CribsheetError(f"verifier {config.name}: no model (write --verifier {config.name}:MODEL)")
    path = _resolve(config.model)
    try:
        model_config = AutoConfig.from_pretrained(path)
    except Exception as exc:
        raise CribsheetError(f"verifier model {config.model}: cannot read its config ({exc})".splitlines()[0]) from None
    support_label(dict(model_config.id2label), config.model, config.label)


def windows(claim: str, context: str, best_span: str | None, n: int, width: int) -> list[str]:
    """The `n` windows of `context` a claim is scored against: the rule checker's best span, then the
    sentences sharing most of the claim's content words, each with its neighbours (`width` sentences).
    """
    spans = sentence_spans(context)
    if not spans:
        return [best_span or context]
    sentences = [context[s:e] for s, e, _ in spans]
    asked = set(content_words(claim))
    shares = [len(asked & set(content_words(s))) / (len(asked) or 1) for s in sentences]
    order = sorted(range(len(sentences)), key=lambda i: (-shares[i], i))
    before = (width - 1) // 2
    out: list[str] = [best_span] if best_span else []
    for i in order:
        if len(out) >= n:
            break
        lo = max(0, min(i - before, len(sentences) - width))
        text = " ".join(sentences[lo : lo + width])
        if text not in out:
            out.append(text)
    return out[:n]


class NliVerifier:
    """A transformers sequence-classification model as a claim verifier."""

    name = "nli"

    def __init__(self, config: NliConfig) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = _resolve(config.model)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForSequenceClassification.from_pretrained(path)
        except Exception as exc:
            raise CribsheetError(f"verifier model {config.model}: cannot load ({exc})".splitlines()[0]) from None
        self.label = support_label(dict(self.model.config.id2label), config.model, config.label)
        device = config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        self.model.to(device).eval()
        limit = getattr(self.model.config, "max_position_embeddings", 512) or 512
        tokenizer_limit = getattr(self.tokenizer, "model_max_length", limit) or limit
        self.max_length = config.max_length or min(512, limit, tokenizer_limit)
        self.config = config
        self.method = f"nli:{config.model}, threshold {config.threshold}"

    def probabilities(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """P(supported) of each (evidence, claim) pair, in batches; the evidence is cut to fit, never the claim."""
        import torch

        out: list[float] = []
        size = self.config.batch_size
        for start in range(0, len(pairs), size):
            batch = pairs[start : start + size]
            encoded = self.tokenizer(
                [p for p, _ in batch],
                [c for _, c in batch],
                truncation="only_first",
                max_length=self.max_length,
                padding=True,
                return_tensors="pt",
            ).to(self.device)
            with torch.inference_mode():
                logits = self.model(**encoded).logits.float()
            if self.label is None:
                probs = torch.sigmoid(logits[:, 0])
            else:
                probs = torch.softmax(logits, dim=-1)[:, self.label]
            out.extend(float(p) for p in probs.cpu())
        return out

    def score_claims(self, items: Sequence[tuple[str, str, str | None]]) -> list[ClaimScore]:
        """Each claim's best probability over its windows (all claims' windows in shared batches)."""
        per_claim = [
            windows(claim, context, span, self.config.windows, self.config.window_sentences)
            for claim, context, span in items
        ]
        pairs = [(w, claim) for (claim, _, _), ws in zip(items, per_claim, strict=True) for w in ws]
        probs: Any = iter(self.probabilities(pairs))
        scores = []
        for ws in per_claim:
            found = [(next(probs), w) for w in ws]
            best, window = max(found, key=lambda pw: pw[0]) if found else (0.0, "")
            scores.append(ClaimScore(best, best >= self.config.threshold, window))
        return scores


@VERIFIERS.register("nli", NliConfig, arg="model")
def _nli(config: NliConfig, deps: VerifierDeps | None) -> Verifier:
    """A sequence-classification model (NLI / fact checking) from a local folder or the Hugging Face cache."""
    return NliVerifier(config)


@VERIFIERS.register("likelihood", LikelihoodConfig, arg="model")
def _likelihood(config: LikelihoodConfig, deps: VerifierDeps | None) -> LikelihoodVerifier:
    """The generator's own likelihoods of each answer with and without its passages, through a fitted card."""
    if deps is None or deps.scorer is None or deps.render is None:
        raise CribsheetError(
            "verifier likelihood: the generator does not score prompt tokens (a vLLM generator does); "
            "use --verifier nli:MODEL"
        )
    return LikelihoodVerifier(config, deps.scorer, deps.render, deps.generator_model, deps.corpus_kind)
