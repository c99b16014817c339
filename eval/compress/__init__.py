"""Compressors behind one Protocol, registered by name: none, llmlingua (query-agnostic), longllmlingua
(query-aware), engine-lingua (word pruning scored by the vLLM engine, query-agnostic), extractive (embedder
sentence selection, query-aware), pruned and pruned-auto (the same on the index's units, scored by their
stored vectors or a trained unit scorer, by ratio or by relevance mass) and pruned-agnostic (their
query-agnostic twin). Importing the package registers all eight.
"""

from eval.compress import engine, extractive, lingua, pruned, pruned_auto
from eval.compress.base import (
    COMPRESSORS,
    CachedAgnosticCompressor,
    CompressionResult,
    Compressor,
    CompressorDeps,
    NoCompressor,
    TokenCounter,
)
from eval.compress.engine import EngineLinguaCompressor
from eval.compress.extractive import ExtractiveCompressor
from eval.compress.lingua import LLMLinguaCompressor, LongLLMLinguaCompressor, load_prompt_compressor

__all__ = [
    "COMPRESSORS",
    "CachedAgnosticCompressor",
    "CompressionResult",
    "Compressor",
    "CompressorDeps",
    "EngineLinguaCompressor",
    "ExtractiveCompressor",
    "LLMLinguaCompressor",
    "LongLLMLinguaCompressor",
    "NoCompressor",
    "TokenCounter",
    "engine",
    "extractive",
    "lingua",
    "load_prompt_compressor",
    "pruned",
    "pruned_auto",
]
