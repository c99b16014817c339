"""A sample row is built once, from typed parts that each stage of the sweep fills.

Every part is frozen and forbids unknown fields, and a `SampleDraft` has slots: a misspelled column is an
error where it is written, never a value silently dropped at insert.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from eval.store.rows import SampleRow


class Part(BaseModel):
    """Base of the parts: frozen, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class SampleKey(Part):
    """Which question under which setting of which run."""

    run_id: str
    setting_hash: str
    setting_name: str
    setting_json: str
    question_id: str
    question: str
    answerable: bool
    gold_answers: str
    top_k: int
    reranker: str
    compressor: str
    target_ratio: float
    retrieval: str
    layout: str
    output: str = "text"
    answer_cache: float | None = None
    hardware_sha256: str | None = None
    engine_precision: str | None = None


class RetrievalPart(Part):
    """Retrieval and reranking of the question (shared by every setting with the same mode and reranker)."""

    gold_rank: int | None = None
    retrieval_recall: float | None = None
    candidate_recall: float | None = None
    retrieve_seconds: float | None = None
    rerank_seconds: float | None = None


class CompressionPart(Part):
    """The context as it went into the prompt."""

    context_chunk_ids: str | None = "[]"
    """JSON list of the prompt's chunk ids in prompt order (None: a compressor merged passages without saying
    which); a failed compression: the chunk ids it was given."""
    context_text: str | None = None
    context_tokens_in: int | None = None
    context_tokens_out: int | None = None
    realized_ratio: float | None = None
    ratio_gap: float | None = None
    compress_seconds: float | None = None
    compress_calls: int | None = None
    compress_cold_seconds: float | None = None


class GenerationPart(Part):
    """The engine's answer and its batch accounting."""

    answer: str
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float | None = None
    answer_cut: bool | None = None


class AnswerScores(Part):
    """The answer metrics of `eval.metrics.METRICS` (a test keeps the two in step)."""

    answer_contains: float
    answer_exact_match: float
    answer_token_f1: float
    answer_token_recall: float
    context_answer_recall: float
    context_token_recall: float


class JudgmentPart(Part):
    """Faithfulness (offline checker, optional LLM judge) and abstention."""

    faithfulness: float | None = None
    faithfulness_status: str | None = None
    n_claims: int | None = None
    abstained: bool | None = None
    ragas_faithfulness: float | None = None
    ragas_status: str | None = None
    faithfulness_model: float | None = None
    faithfulness_method: str | None = None
    faithfulness_model_s: float | None = None


class CitationPart(Part):
    """A cited-json answer: whether it followed the schema, its citations and how right they are."""

    schema_valid: bool | None = None
    citations: str | None = None
    citation_precision: float | None = None
    citation_recall: float | None = None


class CachePart(Part):
    """A semantic answer cache hit: whose answer was reused, at what similarity."""

    cache_hit_of: str | None = None
    cache_similarity: float | None = None


@dataclass(slots=True)
class SampleDraft:
    """One sample while the sweep works on it; `row()` assembles the stored row once at the end."""

    key: SampleKey
    retrieval: RetrievalPart
    compression: CompressionPart | None = None
    prompt: str | None = None
    """The rendered prompt (None when compression failed)."""
    generation: GenerationPart | None = None
    scores: AnswerScores | None = None
    judgment: JudgmentPart | None = None
    citation: CitationPart | None = None
    cache: CachePart | None = None
    passage_docs: list[str | None] | None = None
    """Document id of each passage in prompt order (for citations; not stored)."""
    n_passages: int | None = None
    """Passages numbered in the prompt: the citation numbers the schema allows (not stored)."""
    gold_docs: list[str] | None = None
    """The question's gold document ids (for citations; stored with the question)."""
    error: str | None = None
    """First failure of this sample, as `stage: message`; a failed sample is a row, never a gap."""

    def fail(self, stage: str, exc: BaseException | str) -> None:
        """Record the first failure of this sample."""
        if self.error is None:
            self.error = f"{stage}: {exc}"[:2000]

    @property
    def ok(self) -> bool:
        """Answered and nothing failed."""
        return self.error is None and self.generation is not None

    def row(self) -> SampleRow:
        """The stored row: every part's fields, status `ok` or `failed` (with the error)."""
        if self.error is None and self.generation is None:
            raise RuntimeError(f"sample {self.key.question_id} of {self.key.setting_name} was never generated")
        values = self.key.model_dump() | self.retrieval.model_dump()
        for part in (
            self.compression,
            self.generation,
            self.scores,
            self.judgment,
            self.citation,
            self.cache,
        ):
            if part is not None:
                values |= part.model_dump()
        values |= {"status": "failed" if self.error else "ok", "error": self.error}
        return SampleRow.model_validate(values)
