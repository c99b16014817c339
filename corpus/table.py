"""The LanceDB chunk table: its build spec (kept in the table's metadata), options, report and opening."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from corpus.chunk import ChunkerConfig
from corpus.embed import EMBEDDERS
from corpus.errors import CribsheetError
from corpus.models import Chunk
from corpus.rules import rules_version as rules_version
from corpus.sources import Skipped, SourceConfig

TABLE = "chunks"
SPEC_KEY = b"cribsheet.index_spec"
BUILD_KEY = b"cribsheet.build_id"
"""Metadata key of the build id: new on every full build, kept by incremental syncs."""
INDEX_FORMAT = 4
"""4: side tables per build and committed snapshots (`corpus.snapshot`); an older index is rebuilt."""
REPORT_FILE = "cribsheet-index-report.json"


class IndexSpec(BaseModel):
    """How an index is built; a change means a full rebuild, a query with another embedder is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    embedder: str
    dim: int
    chunker: dict[str, Any]
    embedder_weights: str | None = None
    """sha256 of the embedder's weights files (None: an embedder without files, e.g. a test's hash
    embedder): new weights under the same name rebuild the index, and a query with other weights is refused."""
    format: int = INDEX_FORMAT
    precision: str = "float32"
    """The embedder's compute precision (bfloat16 vectors differ slightly from float32 ones)."""
    extractors: dict[str, str] = Field(default_factory=dict)
    """Extractor name -> parser and version (folder sources): a new parser version rebuilds the index."""
    sentence_vectors: bool = False
    """Sentence vectors are stored too (the `sentences` table, for the `pruned` compressor)."""
    sentence_pooling: Literal["contextual", "isolated"] | None = None
    """How the sentence vectors are made: pooled from their chunk's forward pass (contextual, late chunking)
    or each sentence embedded by itself (isolated, for embedders that cannot pool spans); None without them."""
    sentence_units: Literal["structure"] | None = None
    """What the sentence vectors are of: `structure`, the units of each chunk (a code block whole, a table
    row, the sentences of every other block, from its document's outline; the `units` table); None without
    sentence vectors. An index from before units were stored is rebuilt."""
    rules: str | None = None
    """sha256 of the code that cuts documents into chunks, sentences and units and embeds them
    (`corpus.rules.rules_version`: the chunker, the sentence splitter, `indexed_text`, `Chunk.heading`, the
    span pooling, `embed_batch` and what they call, without docstrings or comments): an edit to it rebuilds
    the index, so an incremental sync never mixes vectors made by two versions of it; an edit elsewhere (a
    stop word, a docstring) rebuilds nothing."""


def rebuild_reasons(old: IndexSpec | None, new: IndexSpec) -> list[str]:
    """Why a sync is a full build: each field of the build spec that differs from the index's (empty: none)."""
    if old is None:
        return []
    before, after = old.model_dump(), new.model_dump()
    names = {"rules": "the code that cuts or embeds chunks, sentences or units changed (`corpus.rules`)"}
    return [names.get(k, f"{k}: {before[k]!r} -> {after[k]!r}") for k in after if before.get(k) != after[k]]


class IndexOptions(BaseModel):
    """Knobs of the index writer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_chunks: int = Field(default=2048, ge=1)
    """Chunks embedded and committed together (one LanceDB version per batch)."""
    ann_threshold: int = Field(default=100_000, ge=1)
    """Build an approximate vector index once the table holds this many chunks (below, exact search)."""
    ann_index_type: Literal["IVF_PQ", "IVF_FLAT", "IVF_SQ", "HNSW_PQ", "HNSW_SQ"] = "IVF_PQ"
    """LanceDB vector index kind (cosine distance)."""
    rebuild: bool = False
    """Rebuild from scratch even when the spec is unchanged."""
    sentence_vectors: bool = False
    """Also store a vector for every sentence of every chunk, so the `pruned` compressor selects sentences
    with vectors computed once, here, instead of at query time. With an embedder that pools spans they come
    from the chunk's own forward pass (almost free); otherwise each sentence is embedded (about twice the
    embedding work)."""
    min_coverage: float = Field(default=0.95, ge=0.0, le=1.0)
    """Documents whose indexed words fall below this share of their parser's words are listed in the report."""
    fold_fraction: float = Field(default=0.05, ge=0.0, le=1.0)
    """A sync folds its rows into the full-text and vector indices (and compacts) once the rows no index
    covers pass this share of the table; below it, searches scan those rows (same results, a nightly sync of
    a few documents does not rewrite the indices). 0: fold at every sync."""


class DocCoverage(BaseModel):
    """How much of one document's text reached the index."""

    doc_id: str
    parser_words: int
    """Words the parser found (for a record without a parser: words of its text)."""
    indexed_words: int
    """Of those, words inside indexed chunks."""

    @property
    def coverage(self) -> float:
        """Indexed / parser words (1.0 for a document without words)."""
        return self.indexed_words / self.parser_words if self.parser_words else 1.0


class IndexReport(BaseModel):
    """What a sync did, by document, plus everything that was skipped and why."""

    path: str
    spec: IndexSpec
    version: int
    seconds: float
    rebuilt: bool
    added: int = 0
    changed: int = 0
    deleted: int = 0
    unchanged: int = 0
    chunks_written: int = 0
    n_documents: int = 0
    n_chunks: int = 0
    ann_index: bool = False
    skipped: list[Skipped] = Field(default_factory=list)
    parser_words: int = 0
    """Words the parsers found in the documents (re)indexed by this sync."""
    indexed_words: int = 0
    """Of those, words that reached the index."""
    low_coverage: list[DocCoverage] = Field(default_factory=list)
    """Documents below `IndexOptions.min_coverage`, lowest first."""
    restarted_build: str | None = None
    """The build id of a full build that never committed (killed or failed) and that this sync restarted."""
    rebuild_reasons: list[str] = Field(default_factory=list)
    """Why this sync was a full build of an existing index: the build spec's fields that changed."""

    @property
    def coverage(self) -> float | None:
        """Corpus-wide coverage of this sync (None: no document was (re)indexed)."""
        return self.indexed_words / self.parser_words if self.parser_words else None

    @property
    def reused(self) -> bool:
        """True when nothing had to be written."""
        return not (self.rebuilt or self.added or self.changed or self.deleted)


def indexed_text(chunk: Chunk) -> str:
    """What is embedded and full-text indexed: the title (and section path) makes a chunk self-describing."""
    heading = chunk.heading
    return f"{heading}\n{chunk.text}" if heading else chunk.text


def table_schema(spec: IndexSpec, build_id: str = "") -> Any:
    """The Arrow schema of the chunk table, with the build spec and the build id in its metadata."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("chunk_id", pa.string()),
            pa.field("doc_id", pa.string()),
            pa.field("doc_hash", pa.string()),
            pa.field("title", pa.string()),
            pa.field("position", pa.int32()),
            pa.field("char_start", pa.int32()),
            pa.field("char_end", pa.int32()),
            pa.field("text", pa.string()),
            pa.field("section", pa.string()),
            pa.field("content", pa.string()),
            pa.field("metadata", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), spec.dim)),
        ],
        metadata={SPEC_KEY: spec.model_dump_json().encode(), BUILD_KEY: build_id.encode()},
    )


class IndexConfig(BaseModel):
    """Everything `cribsheet index` and the index flow need: one model for the CLI, a `--config` file and
    the deployment's parameters.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: SourceConfig
    """Where the corpus comes from and how to read it."""
    index_path: Path
    """LanceDB folder to create or sync."""
    embedder: str = "minilm-l6-v2"
    """Registered embedder name."""
    chunker: ChunkerConfig = Field(default_factory=ChunkerConfig)
    """How documents are cut into chunks."""
    options: IndexOptions = Field(default_factory=IndexOptions)
    """Knobs of the index writer."""

    @field_validator("embedder")
    @classmethod
    def _registered_embedder(cls, value: str) -> str:
        try:
            EMBEDDERS.spec(value)
        except CribsheetError as exc:
            raise ValueError(str(exc)) from None
        return value


def open_table(path: Path, version: int | None = None) -> Any:
    """Open the chunk table at `path` (optionally pinned at `version`) with a clear error when there is none."""
    import lancedb

    path = Path(path)
    if not path.exists():
        raise CribsheetError(f"{path}: no index here; build one with `cribsheet index`")
    db = lancedb.connect(str(path))
    try:
        table = db.open_table(TABLE)
    except (ValueError, FileNotFoundError) as exc:
        raise CribsheetError(f"{path}: no table '{TABLE}' ({exc}); rebuild with `cribsheet index`") from None
    if version is not None:
        table.checkout(version)
    return table


def write_fresh(db: Any, name: str, schema: Any, batches: Iterator[Any]) -> Any:
    """Table `name` written from a stream of Arrow tables in one LanceDB write (bounded memory: the
    writer pulls batch by batch), as a new version of the table when it exists: the versions before stay
    readable for whoever pinned one until LanceDB's cleanup removes them. An error raised while producing a
    batch is re-raised as itself, and the table is left as it was.
    """
    import pyarrow as pa

    failure: list[Exception] = []

    def record_batches() -> Iterator[Any]:
        try:
            for data in batches:
                yield from data.cast(schema).to_batches()
        except Exception as exc:
            failure.append(exc)
            raise

    try:
        reader = pa.RecordBatchReader.from_batches(schema, record_batches())
        return db.create_table(name, data=reader, schema=schema, mode="overwrite")
    except Exception:
        close = getattr(batches, "close", None)
        if close is not None:  # release what the source holds (e.g. Ray workers) now, not at collection
            close()
        if failure:
            raise failure[0] from None
        raise
