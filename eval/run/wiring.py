"""Wiring: the live components of a sweep, built from the registries by the names in its config.

Used by the sweep, `cribsheet warm` and the benchmarks, so every entry point builds components the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corpus.embed import EMBEDDERS, Embedder
from corpus.retrieve import IndexIdentity, LanceRetriever, Retriever
from eval.compress import COMPRESSORS, Compressor, CompressorDeps
from eval.engine.generator import GENERATORS, Generator, GeneratorConfig, GeneratorDeps, TokenScorer
from eval.faithfulness.judge import JUDGES, Judge, JudgeDeps
from eval.faithfulness.verifier import VERIFIERS, AnswerVerifier, Verifier, VerifierDeps
from eval.rerank import RERANKERS, Reranker, RerankerDeps
from eval.settings import Setting, SweepConfig


@dataclass
class Components:
    """The live backends of a sweep; tests build it from registered fakes or pass objects directly."""

    embedder: Embedder
    retriever: Retriever
    rerankers: dict[str, Reranker]
    compressors: dict[str, Compressor]
    generator: Generator
    index_version: int | None = None
    corpus_sha256: str | None = None
    judge: Judge | None = None
    """Optional LLM judge (ragas Faithfulness and claim entailment)."""
    verifier: Verifier | AnswerVerifier | None = None
    """Optional model verifier (`--verifier nli:MODEL`, `--verifier likelihood`)."""

    def close(self) -> None:
        """Stop the engines (and the judge's server) this object started."""
        try:
            self.generator.close()
        finally:
            if self.judge is not None:
                self.judge.close()


def bundled_model() -> str:
    """Folder of the bundled SmolLM2-135M-Instruct (converted from its GGUF on first use)."""
    from eval.engine.bundled_models import smollm2_dir

    return str(smollm2_dir())


def _verifier_deps(config: SweepConfig, generator: Generator) -> VerifierDeps:
    """The generator's engine and prompt layout, for a verifier that reads its likelihoods."""
    from eval.prompt import PromptLayout

    scorer = generator if isinstance(generator, TokenScorer) else None
    model = config.generator.model or (str(bundled_model()) if config.generator.name == "vllm" else None)
    render = PromptLayout(scorer.tokenizer).render if scorer is not None else None
    return VerifierDeps(scorer=scorer, render=render, generator_model=model, corpus_kind=config.corpus_kind)


def build_generator(config: GeneratorConfig) -> Generator:
    """The configured generator; the bundled SmolLM2 when no model is named."""
    needs_default = config.name == "vllm" and not config.model
    deps = GeneratorDeps(default_model=bundled_model() if needs_default else None)
    return GENERATORS.build(GENERATORS.spec(config.name, config.model_dump()), deps)


def _scorer(config: SweepConfig, generator: Generator, names: set[str]) -> tuple[TokenScorer | None, str | None]:
    """The engine that scores tokens for engine-lingua, and its model: the generator's own, unless
    `compressor.model` names another LM (a small scorer in front of a big generator), which then gets an
    engine of its own.
    """
    if "engine-lingua" not in names:
        return (generator if isinstance(generator, TokenScorer) else None), None
    model = config.generator.model or (bundled_model() if config.generator.name == "vllm" else None)
    if config.compressor.model not in (None, config.generator.model):
        model = config.compressor.model
        generator = build_generator(config.generator.model_copy(update={"model": model}))
    return (generator if isinstance(generator, TokenScorer) else None), model


def build_judge(config: SweepConfig) -> Judge:
    """The configured LLM judge; a served one logs next to the store and defaults to the bundled model."""
    assert config.judge is not None
    needs_default = config.judge.name == "vllm" and not config.judge.model
    deps = JudgeDeps(
        log_dir=config.store_path.parent / "logs", default_model=bundled_model() if needs_default else None
    )
    return JUDGES.build(JUDGES.spec(config.judge.name, config.judge.model_dump()), deps)


def index_identity(config: SweepConfig, version: int | None = None) -> IndexIdentity:
    """The index version a sweep reads (`version`, else the config's, else the latest) and its digests,
    without loading any model.
    """
    from corpus.retrieve import index_identity as identity

    return identity(config.index_path, version if version is not None else config.index_version)


def build_components(
    config: SweepConfig,
    settings: Sequence[Setting],
    corpus_sha256: str | None = None,
    embedder: Embedder | None = None,
    generator: Generator | None = None,
) -> Components:
    """Real backends by the names in `config`: the default models come from packages. `corpus_sha256`: the
    index's document digest when the caller has computed it already (else it is computed here); `embedder`
    and `generator`: live ones to use instead of building them (a test session shares one engine).
    """
    # The judge first: its server comes up (or fails, with its log) before our own engine holds memory.
    judge = build_judge(config) if config.judge else None
    try:
        return _components(config, settings, judge, corpus_sha256, embedder, generator)
    except BaseException:
        if judge is not None:
            judge.close()
        raise


def _components(
    config: SweepConfig,
    settings: Sequence[Setting],
    judge: Judge | None,
    corpus_sha256: str | None,
    embedder: Embedder | None,
    generator: Generator | None,
) -> Components:
    """The sweep's own backends around an already started judge."""
    from eval.compress.cache import LanceCompressionCache

    embedder = embedder or EMBEDDERS.build(EMBEDDERS.spec(config.embedder), None)
    retriever = LanceRetriever(config.index_path, embedder, version=config.index_version)
    generator = generator or build_generator(config.generator)
    compressor_names = {s.compressor for s in settings}
    scorer, scorer_model = _scorer(config, generator, compressor_names)
    needs_lm = not config.compressor.model and compressor_names & {"llmlingua", "longllmlingua"}
    cdeps = CompressorDeps(
        count_tokens=generator.count_tokens,
        default_model=bundled_model() if needs_lm else None,
        embedder=embedder,
        scorer=scorer,
        scorer_model=scorer_model,
        cache=LanceCompressionCache(config.index_path),
        index_path=config.index_path,
        index_version=retriever.version,
    )
    compressors = {
        name: COMPRESSORS.build(COMPRESSORS.spec(name, config.compressor.model_dump()), cdeps)
        for name in sorted(compressor_names)
    }
    own = generator if isinstance(generator, TokenScorer) else None
    rdeps = RerankerDeps(embedder=embedder, scorer=own)
    rerankers = {name: RERANKERS.build(RERANKERS.spec(name), rdeps) for name in sorted({s.reranker for s in settings})}
    return Components(
        embedder=embedder,
        retriever=retriever,
        rerankers=rerankers,
        compressors=compressors,
        generator=generator,
        index_version=retriever.version,
        corpus_sha256=corpus_sha256 if corpus_sha256 is not None else retriever.corpus_digest(),
        judge=judge,
        verifier=VERIFIERS.build(config.verifier.spec(), _verifier_deps(config, generator))
        if config.verifier
        else None,
    )
