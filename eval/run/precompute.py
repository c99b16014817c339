"""`cribsheet precompress`: a query-agnostic compressor run over every chunk of an index snapshot, offline, once,
with its bill recorded beside the index.

Query-agnostic compression does not depend on the question, so the design compresses each chunk once per
ratio, ahead of any request. Without this step a request pays the compressor's model itself (the latency
phase times exactly that). With it, the compressions sit in the index's compression cache and a record in
the index's `precomputes` table says which compressor (its content identity: config, weights, code), at
which ratio, over which snapshot (chunk version, build id, index digest), at what cost (seconds, seconds per
chunk, CPU-hours), when and on what machine. A sweep over that very snapshot lets the requests of that
compressor and ratio read them, and shows the bill beside the figure; any other snapshot is timed live.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from corpus.retrieve import IndexIdentity
from corpus.table import open_table
from eval.run.load import own_cpu_seconds

TABLE = "precomputes"
"""The index's table of precompute records (one row per step run; LanceDB appends a version each)."""


class PrecomputeRecord(BaseModel):
    """One precompute step: what it compressed, over which snapshot, and what it cost."""

    model_config = ConfigDict(frozen=True)

    compressor: str
    """The compressor's registered name (a setting's `compressor`)."""
    identity: str
    """Its content identity (name, config, model weights, code): the cache keys' prefix."""
    ratio: float
    chunk_version: int
    build_id: str | None
    index_sha256: str | None
    chunks: int
    """Chunks of the snapshot compressed (or found already compressed under this identity)."""
    computed: int
    """Chunks this step compressed itself (the rest were in the cache)."""
    seconds: float
    """Wall seconds of the step."""
    cpu_seconds: float
    """CPU seconds of this process and its children over the step (measured)."""
    seconds_per_chunk: float
    """Compute seconds per chunk, from the cached entries' own costs (whoever computed them)."""
    corpus_cpu_hours: float
    """The whole snapshot's compression bill in CPU-hours: the step's measured CPU time scaled from the chunks
    it computed to all of them."""
    started_at: dt.datetime
    finished_at: dt.datetime
    host: str
    hardware_sha256: str


def _texts(index_path: Path, version: int, batch: int) -> Iterator[list[str]]:
    """The snapshot's chunk texts, `batch` at a time (streamed, never the whole table in memory)."""
    table = open_table(index_path, version)
    total, page = table.count_rows(), max(batch, 2048)
    for offset in range(0, total, page):
        rows = table.search().select(["text"]).offset(offset).limit(page).to_arrow().column("text").to_pylist()
        texts = [t for t in rows if t]
        for i in range(0, len(texts), batch):
            yield texts[i : i + batch]


def precompress(
    index_path: Path,
    index: IndexIdentity,
    name: str,
    compressor: Any,
    ratio: float,
    batch: int = 16,
    tick: Callable[[int], None] = lambda done: None,
) -> PrecomputeRecord:
    """Compress every chunk of the snapshot `index` with the query-agnostic `compressor` (a
    `CachedAgnosticCompressor` whose cache is the index's), flushing each batch, and append the record.
    """
    import os

    from eval.run.identity import hardware_digest

    if getattr(compressor, "query_aware", True) or not hasattr(compressor, "identity"):
        raise CribsheetError(
            f"{name}: only a query-agnostic compressor can be precomputed (its output ignores the question)"
        )
    from corpus.lease import reader_lease

    started, t0, cpu0 = dt.datetime.now(dt.UTC), time.perf_counter(), own_cpu_seconds()
    chunks = computed = 0
    billed = 0.0
    with reader_lease(index_path, index.version):  # `cribsheet reclaim` keeps the snapshot while it is read
        for texts in _texts(index_path, index.version, batch):
            before = compressor.calls
            result = compressor.compress(texts, "", ratio)
            compressor.flush()
            chunks += len(texts)
            computed += compressor.calls - before
            billed += result.cold_seconds or 0.0
            tick(chunks)
    if not chunks:
        raise CribsheetError(f"{index_path}: the snapshot at chunk version {index.version} holds no chunk text")
    seconds, cpu_seconds = time.perf_counter() - t0, own_cpu_seconds() - cpu0
    _, hw_sha = hardware_digest()
    record = PrecomputeRecord(
        compressor=name,
        identity=compressor.identity,
        ratio=ratio,
        chunk_version=index.version,
        build_id=index.build_id,
        index_sha256=index.index_sha256,
        chunks=chunks,
        computed=computed,
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        seconds_per_chunk=billed / chunks,
        # Measured CPU time scaled to the whole snapshot (chunks found in the cache cost this step nothing);
        # where everything was cached, the entries' own seconds times the cores that computed them.
        corpus_cpu_hours=(cpu_seconds * chunks / computed if computed else billed * (os.cpu_count() or 1)) / 3600,
        started_at=started,
        finished_at=dt.datetime.now(dt.UTC),
        host=socket.gethostname(),
        hardware_sha256=hw_sha,
    )
    _append(index_path, record)
    return record


def _append(index_path: Path, record: PrecomputeRecord) -> None:
    """Append the record to the index's table (one LanceDB commit: there or not at all)."""
    import lancedb
    import pyarrow as pa

    row = {"record_json": json.dumps(record.model_dump(mode="json"), sort_keys=True)}
    db = lancedb.connect(str(index_path))
    data = pa.table({k: [v] for k, v in row.items()})
    try:
        db.open_table(TABLE).add(data)
    except (ValueError, FileNotFoundError):
        db.create_table(TABLE, data=data)


def records(index_path: Path) -> list[PrecomputeRecord]:
    """Every precompute record of the index, oldest first (empty: none ran)."""
    import lancedb

    db = lancedb.connect(str(index_path))
    try:
        table = db.open_table(TABLE)
    except (ValueError, FileNotFoundError):
        return []
    rows = table.to_arrow().column("record_json").to_pylist()
    return [PrecomputeRecord.model_validate_json(r) for r in rows]


def precomputed_for(
    index_path: Path, index: IndexIdentity, compressors: dict[str, Any], ratios: set[tuple[str, float]]
) -> dict[tuple[str, float], PrecomputeRecord]:
    """The records that cover this exact snapshot, per (compressor, ratio) of the grid, matched on the
    compressor's content identity (new weights or code are another compressor) and the snapshot's build and
    digest (a sync since the step: timed live again until the step runs again).
    """
    found: dict[tuple[str, float], PrecomputeRecord] = {}
    for rec in records(index_path):
        key = (rec.compressor, rec.ratio)
        comp = compressors.get(rec.compressor)
        if (
            key in ratios
            and comp is not None
            and getattr(comp, "identity", None) == rec.identity
            and (rec.chunk_version, rec.build_id, rec.index_sha256)
            == (index.version, index.build_id, index.index_sha256)
        ):
            found[key] = rec
    return found
