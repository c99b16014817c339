"""Frozen settings, the grid that expands into them, and the sweep's configuration.

Component names are checked against the registries when a config is built, so a misspelled compressor or
reranker is reported before any model loads.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corpus.embed import EMBEDDERS
from corpus.errors import CribsheetError
from corpus.registry import ComponentSpec, Registry
from corpus.retrieve import RetrievalMode
from eval.compress import COMPRESSORS
from eval.compress.lingua import LLMLinguaConfig, LongLLMLinguaConfig
from eval.compress.pruned_auto import AutoPrunedConfig
from eval.engine.generator import GENERATORS, GeneratorConfig
from eval.faithfulness.judge import JUDGES, JudgeConfig
from eval.faithfulness.verifier import VERIFIERS, VerifierConfig
from eval.rerank import RERANKERS


def _known(registry: Registry[Any, Any], ref: str, defaults: dict[str, Any] | None = None) -> ComponentSpec:
    """The spec of `ref`, as a ValueError (so pydantic reports it with the field's location)."""
    try:
        return registry.spec(ref, defaults)
    except CribsheetError as exc:
        raise ValueError(str(exc)) from None


def stable_hash(model: BaseModel, length: int = 16) -> str:
    """sha256 of a model's canonical JSON: the same config gives the same hash in every process. Fields a model
    lists in `HASH_EXCLUDE` (they shape no row) are left out, so adding one keeps every earlier hash.
    """
    exclude = set(getattr(type(model), "HASH_EXCLUDE", ()))
    payload = json.dumps(model.model_dump(mode="json", exclude=exclude), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:length]


OutputMode = Literal["text", "cited-json"]
_LATER_LEVERS = ("output", "answer_cache")


class Setting(BaseModel):
    """One point of the grid: how the crib sheet for a question is built."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    top_k: int = Field(ge=1)
    """Chunks kept after reranking."""
    retrieval: RetrievalMode = "hybrid"
    """Candidate retrieval: vector + full-text fused by reciprocal rank, or one of them alone."""
    layout: Literal["ranked", "edges"] = "ranked"
    """Passage order in the prompt: best first, or best at both edges (small models lose the middle)."""
    reranker: str = "dense"
    """Registered reranker: dense, none, query-likelihood, cross-encoder:PATH, bi-encoder:PATH."""
    compressor: str = "none"
    """Registered compressor: none, llmlingua, engine-lingua, pruned-agnostic (query-agnostic), longllmlingua,
    extractive, pruned, pruned-auto (query-aware)."""
    target_ratio: float = Field(default=1.0, ge=1.0)
    """Requested compression ratio tokens_in / tokens_out (1.0 = no compression)."""
    output: OutputMode = "text"
    """Answer format: free text, or JSON `{answer, citations}` by the engine's structured output."""
    answer_cache: float | None = Field(default=None, ge=0.0, le=1.0)
    """Semantic answer cache: a question whose embedding is at least this cosine-similar to an earlier
    answered question of the setting reuses that answer (no retrieval, compression or generation); None = off."""

    @field_validator("reranker")
    @classmethod
    def _registered_reranker(cls, value: str) -> str:
        _known(RERANKERS, value)
        return value

    @field_validator("compressor")
    @classmethod
    def _registered_compressor(cls, value: str) -> str:
        _known(COMPRESSORS, value)
        return value

    @model_validator(mode="after")
    def _ratio_matches_compressor(self) -> Setting:
        if self.compressor == "none" and self.target_ratio != 1.0:
            raise ValueError("compressor 'none' needs target_ratio 1.0")
        if self.compressor != "none" and self.target_ratio <= 1.0:
            raise ValueError(f"compressor '{self.compressor}' needs target_ratio > 1")
        return self

    @property
    def name(self) -> str:
        """Readable unique name, e.g. `llmlingua-4x-k8`."""
        comp = "none" if self.compressor == "none" else f"{self.compressor}-{self.target_ratio:g}x"
        name = f"{comp}-k{self.top_k}-{self.retrieval}-{self.reranker}"
        name = name if self.layout == "ranked" else f"{name}-{self.layout}"
        name = name if self.output == "text" else f"{name}-cited"
        return name if self.answer_cache is None else f"{name}-cache{self.answer_cache:g}"

    def config_hash(self) -> str:
        """Stable hash of this setting; the levers added later count only when not at their default, so the
        hash of every earlier setting is unchanged.
        """
        payload = self.model_dump(mode="json")
        for key in _LATER_LEVERS:
            if payload[key] is None or payload[key] == "text":
                payload.pop(key)
        raw = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


class CompressionSpec(BaseModel):
    """A compressor at a requested ratio."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compressor: str = "none"
    """Registered compressor name."""
    target_ratio: float = 1.0
    """Requested tokens_in / tokens_out."""
    top_ks: list[int] | None = None
    """Only at these of the grid's top-k values (None: at every one): a compressor too slow for long contexts
    on this hardware is measured where it can be."""

    @field_validator("compressor")
    @classmethod
    def _registered(cls, value: str) -> str:
        _known(COMPRESSORS, value)
        return value


class GridConfig(BaseModel):
    """Cross product of compressions × top-k × retrieval modes × rerankers × layouts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compressions: list[CompressionSpec] = Field(
        default_factory=lambda: [
            CompressionSpec(),
            CompressionSpec(compressor="llmlingua", target_ratio=4.0),
            CompressionSpec(compressor="longllmlingua", target_ratio=4.0),
        ]
    )
    """Compressors at their ratios."""
    top_ks: list[int] = Field(default_factory=lambda: [3, 8])
    """Chunks kept after reranking."""
    rerankers: list[str] = Field(default_factory=lambda: ["dense"])
    """Registered reranker names (`cross-encoder:PATH` and `bi-encoder:PATH` carry their model)."""
    retrievals: list[RetrievalMode] = Field(default_factory=lambda: list[RetrievalMode](["hybrid"]))
    """Candidate retrieval modes."""
    layouts: list[Literal["ranked", "edges"]] = Field(
        default_factory=lambda: list[Literal["ranked", "edges"]](["ranked"])
    )
    """Passage orders in the prompt."""
    outputs: list[OutputMode] = Field(default_factory=lambda: list[OutputMode](["text"]))
    """Answer formats: text, cited-json."""
    answer_caches: list[Annotated[float, Field(ge=0.0, le=1.0)] | None] = Field(
        default_factory=lambda: list[float | None]([None])
    )
    """Semantic answer cache thresholds (cosine similarity in [0, 1]); None = off."""

    @model_validator(mode="after")
    def _top_ks_in_grid(self) -> GridConfig:
        for i, c in enumerate(self.compressions):
            stray = sorted(set(c.top_ks or []) - set(self.top_ks))
            if stray:
                raise ValueError(f"compressions[{i}].top_ks: {stray} not among the grid's top_ks {self.top_ks}")
        return self

    @field_validator("rerankers")
    @classmethod
    def _registered_rerankers(cls, value: list[str]) -> list[str]:
        for ref in value:
            _known(RERANKERS, ref)
        return value

    def expand(self) -> list[Setting]:
        """Every setting of the grid, in a stable order."""
        return [
            Setting(
                top_k=k,
                reranker=r,
                retrieval=m,
                layout=lay,
                compressor=c.compressor,
                target_ratio=c.target_ratio,
                output=out,
                answer_cache=cache,
            )
            for c, k, m, r, lay, out, cache in itertools.product(
                self.compressions,
                self.top_ks,
                self.retrievals,
                self.rerankers,
                self.layouts,
                self.outputs,
                self.answer_caches,
            )
            if c.top_ks is None or k in c.top_ks
        ]


class CompressorConfig(LLMLinguaConfig, LongLLMLinguaConfig, AutoPrunedConfig):
    """Every compressor's knobs in one place (the compressor LM of the llmlingua family, the extractive and
    pruned selectors' weights, pruned-auto's relevance share); each compressor takes the fields its own config
    declares.
    """


class SweepConfig(BaseModel):
    """Everything a sweep needs; its hash identifies a run's configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    HASH_EXCLUDE: ClassVar[tuple[str, ...]] = ("corpus_kind",)
    """Not in the config hash: it labels the run (which validity figures apply) and shapes no row."""

    index_path: Path
    """LanceDB folder built by `cribsheet index`."""
    questions_path: Path
    """JSONL question file."""
    store_path: Path
    """DuckDB results file (created or appended)."""
    embedder: str = "minilm-l6-v2"
    """Registered embedder: must be the one the index was built with (the retriever checks)."""
    index_version: int | None = None
    """LanceDB table version to read (None = the latest when the sweep starts; recorded either way)."""
    retrieve_n: int = Field(default=20, ge=1)
    """Candidates retrieved per question before reranking."""
    grid: GridConfig = Field(default_factory=GridConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    compressor: CompressorConfig = Field(default_factory=CompressorConfig)
    limit: int | None = None
    """Use only the first N questions (None = all)."""
    judge: JudgeConfig | None = None
    """An OpenAI-compatible judge model for ragas Faithfulness, in addition to the offline checker."""
    probe_questions: int = Field(default=30, ge=0)
    """Questions (lowest sha256 of id) whose latency the latency phase measures, for every setting of the run."""
    probe_repeats: int = Field(default=3, ge=1)
    """Blocks per probe question in the latency phase: each block times every setting's whole request once
    (the baselines twice, for the A/A twins) in a seeded random order; a question's figure is the median
    over its blocks."""
    latency_seed: int = 0
    """Seeds the order of the requests inside each block."""
    max_failed_fraction: float = Field(default=0.05, ge=0.0, le=1.0)
    """A setting with more failed samples than this (a dead engine fails them all) ends the run `failed`
    with the reason; its rows stay for diagnosis, and a resumed run computes it again."""
    verifier: VerifierConfig | None = None
    """A model verifier beside the rule checker (NLI / fact checking, or the generator's own likelihoods):
    `samples.faithfulness_model`."""
    corpus_kind: Literal["documentation", "encyclopedia"] | None = None
    """What the corpus is, for the faithfulness methods' validity figures (docs/faithfulness.md): the
    leaderboard, report and gate print the figure of this kind beside faithfulness; None: not known."""

    @field_validator("embedder")
    @classmethod
    def _registered_embedder(cls, value: str) -> str:
        _known(EMBEDDERS, value)
        return value

    @model_validator(mode="after")
    def _registered_backends(self) -> SweepConfig:
        _known(GENERATORS, self.generator.name, self.generator.model_dump())
        if self.judge is not None:
            _known(JUDGES, self.judge.name, self.judge.model_dump())
        if self.verifier is not None:
            _known(VERIFIERS, self.verifier.name, self.verifier.options())
        for spec in self.grid.compressions:
            _known(COMPRESSORS, spec.compressor, self.compressor.model_dump())
        return self

    def component_specs(self, setting: Setting) -> dict[str, ComponentSpec]:
        """Every component of `setting` by role (name + config): what `setting_json` stores to rebuild it."""
        specs = {
            "embedder": EMBEDDERS.spec(self.embedder),
            "reranker": RERANKERS.spec(setting.reranker),
            "compressor": COMPRESSORS.spec(setting.compressor, self.compressor.model_dump()),
            "generator": GENERATORS.spec(self.generator.name, self.generator.model_dump()),
        }
        if self.judge is not None:
            specs["judge"] = JUDGES.spec(self.judge.name, self.judge.model_dump())
        if self.verifier is not None:
            specs["verifier"] = self.verifier.spec()
        return specs

    def setting_hash(self, setting: Setting) -> str:
        """The setting's hash, with its compressor's knobs when they are not the defaults (a pruned selector
        with another `rank_prior` is another setting; every setting at the defaults keeps its earlier hash).
        """
        ours = COMPRESSORS.spec(setting.compressor, self.compressor.model_dump())
        if ours == COMPRESSORS.spec(setting.compressor, CompressorConfig().model_dump()):
            return setting.config_hash()
        payload = f"{setting.config_hash()}:{ours.model_dump_json()}"
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def config_hash(self) -> str:
        """Hash of everything except where files live."""
        return stable_hash(SweepConfig.model_validate(self.model_dump() | self._no_paths()))

    def samples_hash(self) -> str:
        """Hash of what one setting's rows depend on besides the setting itself: everything but the grid and
        the file locations, plus the candidate count the grid implies (the largest top-k may raise it).
        """
        n_candidates = max(self.retrieve_n, *(s.top_k for s in self.grid.expand()))
        # Latency is measured afresh in every run (never reused), so how it is measured is not part of the rows.
        latency = {"probe_questions": 30, "probe_repeats": 3, "latency_seed": 0}
        rest = SweepConfig.model_validate(
            self.model_dump() | self._no_paths() | {"grid": GridConfig().model_dump()} | latency
        )
        payload = f"{stable_hash(rest)}:{n_candidates}"
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def _no_paths(self) -> dict[str, Path]:
        return {"index_path": Path("."), "questions_path": Path(self.questions_path.name), "store_path": Path(".")}


def setting_json(setting: Setting, components: dict[str, ComponentSpec]) -> str:
    """What `setting_json` stores: the setting's fields, plus `components` (role -> name and config)."""
    payload = setting.model_dump(mode="json") | {"components": {k: v.model_dump() for k, v in components.items()}}
    return json.dumps(payload, sort_keys=True)


def parse_setting_json(text: str) -> tuple[Setting, dict[str, ComponentSpec]]:
    """A stored `setting_json` back into its setting and component specs (older rows have no components)."""
    raw = json.loads(text)
    components = {k: ComponentSpec.model_validate(v) for k, v in raw.pop("components", {}).items()}
    return Setting.model_validate(raw), components
