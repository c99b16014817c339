"""`cribsheet tune-pruning`: `pruned-auto`'s knobs chosen on a user's own tune questions, on their index, with
the sweep's retrieval, reranking and token counting (no generation, no engine).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from corpus.embed import EMBEDDERS, Embedder
from corpus.errors import CribsheetError, InputFileError
from corpus.lease import reader_lease
from corpus.load import read_jsonl
from corpus.models import Question
from corpus.questions import shared_questions
from corpus.retrieve import LanceRetriever, RetrievalMode
from corpus.sentences import SentenceVectors
from corpus.snapshot import read_spec
from eval.compress.pruned import missing_sentence_vectors
from eval.compress.pruned_auto import AutoPrunedCompressor, AutoPrunedConfig
from eval.compress.tuning import MIN_QUESTIONS, PromptCounter, PruningTuning, TuneContext, tune_pruned_auto
from eval.prompt import PromptLayout
from eval.rerank import RERANKERS, RerankerDeps
from eval.run.runner import Progress


@dataclass(frozen=True)
class TuneInputs:
    """Where the tune questions' contexts come from: the sweep's own retrieval at one top-k."""

    index_path: Path
    questions_path: Path
    embedder: str = "minilm-l6-v2"
    generator_model: str | None = None
    """The generator whose tokenizer counts tokens (None: the bundled SmolLM2)."""
    top_k: int = 8
    retrieve_n: int = 20
    retrieval: RetrievalMode = "hybrid"
    reranker: str = "dense"
    limit: int | None = None
    min_questions: int = MIN_QUESTIONS
    """Fewer answerable tune questions than this is an error: the loss bound needs them."""
    index_version: int | None = None
    """The index snapshot to read (None: the latest when tuning starts); chunks and unit vectors come from it."""
    not_on: tuple[Path, ...] = ()
    """Question files a sweep or gate judges: a tune question that is also one of theirs is refused."""


def refuse_judged(tune: list[Question], tune_path: Path, judged_path: Path) -> None:
    """Refuse tune questions that are also questions of `judged_path` by content (normalised text), whatever
    the files are called: knobs chosen on the judged set would be judged on themselves.

    Not by gold document, unlike `train-scorer` (`eval.train.pairs.refuse_overlap`): a trained scorer holds
    what it read of a document's units in its weights, and would score a judged question on that document
    with them; tuning learns no text, only which of a few `pruned-auto` settings to use (a choice its bound
    corrects for, Bonferroni over the grid), so a tune question about a judged document carries nothing of
    the document into the judged run. Tune and judged questions from one corpus share documents; refusing
    them would leave no tune set on a small corpus.
    """
    shared = shared_questions(tune, (q for _, q in read_jsonl(judged_path, Question)))
    if shared:
        raise InputFileError(
            tune_path,
            f"{len(shared)} of its {len(tune)} questions are also questions of {judged_path} (by normalised text, "
            f"e.g. {shared[0].question!r}): tune on a split the sweep does not judge",
        )


def tune_questions(path: Path, limit: int | None, minimum: int = MIN_QUESTIONS) -> list[Question]:
    """Answerable questions with reference answers from `path` (the first `limit`), at least `minimum`."""
    questions = [q for _, q in read_jsonl(path, Question) if q.answerable and q.answers]
    questions = questions[:limit] if limit else questions
    if len(questions) < max(minimum, 1):
        raise InputFileError(
            path,
            f"{len(questions)} answerable questions with reference answers; tuning needs at least {max(minimum, 1)} "
            "for its loss bound to mean anything",
        )
    return questions


@lru_cache(maxsize=4)
def _tokenizer(generator_model: str | None) -> Any:
    from transformers import AutoTokenizer

    from eval.engine.bundled_models import smollm2_dir

    return AutoTokenizer.from_pretrained(generator_model or str(smollm2_dir()))


def token_counter(generator_model: str | None) -> Callable[[str], int]:
    """Tokens under the generator's tokenizer, without starting the engine."""
    tokenizer = _tokenizer(generator_model)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return count


def prompt_counter(generator_model: str | None) -> PromptCounter:
    """Prompt tokens the prefill pays, rendered as the sweep renders them (the generator's chat template), less
    the stable prefix the engine keeps cached.
    """
    tokenizer = _tokenizer(generator_model)
    layout = PromptLayout(tokenizer)
    cached = len(tokenizer.encode(layout.stable_prefix(), add_special_tokens=False))

    def count(context: str, question: str) -> int:
        return len(tokenizer.encode(layout.render(context, question), add_special_tokens=False)) - cached

    return count


def tune_pruning(
    inputs: TuneInputs,
    base: AutoPrunedConfig | None = None,
    max_loss: float = 0.05,
    ratio: float = 8.0,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
    count: Callable[[str], int] | None = None,
    prompt: PromptCounter | None = None,
) -> PruningTuning:
    """Each tune question's top-k as the sweep builds it, then every `pruned-auto` setting of the grid on them
    (`eval.compress.tuning`); `embedder`, `count` and `prompt`: live ones to use instead of building them from
    the generator's tokenizer.
    """
    tick = progress or (lambda stage, done, total: None)
    if inputs.not_on:  # before counting: a judged file is refused whatever its size
        every = [q for _, q in read_jsonl(inputs.questions_path, Question)]
        for judged in inputs.not_on:
            refuse_judged(every, inputs.questions_path, judged)
    questions = tune_questions(inputs.questions_path, inputs.limit, inputs.min_questions)
    if not read_spec(inputs.index_path).sentence_vectors:  # and a missing index is named as such
        raise missing_sentence_vectors("pruned-auto")
    embedder = embedder or EMBEDDERS.build(EMBEDDERS.spec(inputs.embedder), None)
    count = count or token_counter(inputs.generator_model)
    prompt = prompt or prompt_counter(inputs.generator_model)
    with reader_lease(inputs.index_path, inputs.index_version) as snapshot:  # no run row: reclaim keeps it by this
        retriever = LanceRetriever(inputs.index_path, embedder, snapshot.chunk_version)
        stored = SentenceVectors(inputs.index_path, retriever.version)  # the snapshot the chunks come from
        reranker = RERANKERS.build(RERANKERS.spec(inputs.reranker), RerankerDeps(embedder=embedder, scorer=None))
        contexts: list[TuneContext] = []
        for n, q in enumerate(questions, start=1):
            hits = reranker.rerank(q.question, retriever.retrieve(q.question, inputs.retrieve_n, inputs.retrieval))
            top = hits[: inputs.top_k]
            contexts.append(TuneContext(q.question, q.answers, [h.heading for h in top], [h.text for h in top]))
            tick("retrieve and rerank tune questions", n, len(questions))

        def advance(done: int, total: int) -> None:
            tick("pruned-auto settings", done, total)

        def make(config: AutoPrunedConfig) -> AutoPrunedCompressor:
            return AutoPrunedCompressor(count, embedder, stored, config)

        try:
            return tune_pruned_auto(make, contexts, base, ratio, max_loss, advance=advance, prompt=prompt)
        except ValueError as exc:
            raise CribsheetError(str(exc)) from exc
