"""Commands over an index: `index` (build or sync it) and `reclaim` (remove the builds no stored run needs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from corpus.errors import CribsheetError
from flows.app import (
    ConfigOption,
    GpusOption,
    RayAddressOption,
    WorkersOption,
    app,
    error_message,
    prepare_environment,
    ray_options,
    reachable_prefect,
)
from flows.options import suffix_pair
from flows.terminal import engine_log, err, fail, log_path, out, progress, show_path

if TYPE_CHECKING:
    from corpus.table import IndexConfig, IndexReport


@app.command()
def index(
    config_file: ConfigOption = None,
    corpus: Annotated[
        Path | None, typer.Option(help="A folder (.md .rst .txt .html), a .jsonl or a .parquet file.")
    ] = None,
    index_path: Annotated[Path | None, typer.Option("--index", help="LanceDB folder to create or sync.")] = None,
    embedder: Annotated[str | None, typer.Option(help="Registered embedder name [minilm-l6-v2].")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Embedder tokens per chunk at most [200].")] = None,
    overlap_tokens: Annotated[int | None, typer.Option(help="Tokens repeated in the next chunk [0].")] = None,
    id_field: Annotated[str | None, typer.Option(help="JSONL/Parquet column holding the document id [id].")] = None,
    text_field: Annotated[str | None, typer.Option(help="JSONL/Parquet column holding the text [text].")] = None,
    title_field: Annotated[str | None, typer.Option(help="JSONL/Parquet column holding the title [title].")] = None,
    metadata_field: Annotated[list[str], typer.Option(help="Extra column kept with each document; repeat.")] = [],  # noqa: B006
    max_file_bytes: Annotated[int | None, typer.Option(help="Folder mode: larger files are skipped [10 MB].")] = None,
    extension: Annotated[
        list[str], typer.Option(help="Folder mode: SUFFIX=EXTRACTOR, e.g. .txt=rst for Sphinx sources; repeat.")
    ] = [],  # noqa: B006
    ann_threshold: Annotated[
        int | None, typer.Option(help="Build an ANN index from this many chunks [100000].")
    ] = None,
    rebuild: Annotated[bool | None, typer.Option(help="Rebuild from scratch even when nothing changed.")] = None,
    sentence_vectors: Annotated[
        bool | None, typer.Option(help="Also store sentence vectors (for the `pruned` compressors).")
    ] = None,
    workers: WorkersOption = None,
    ray_address: RayAddressOption = None,
    gpus_per_worker: GpusOption = None,
) -> None:
    """Chunk, embed and index a corpus into LanceDB; re-running embeds only new or changed documents."""
    prepare_environment()
    from corpus.index import IndexConfig
    from corpus.sources import check_source
    from flows.config import given, load_config
    from flows.pipeline import index_flow

    overrides: dict[str, Any] = given(index_path=index_path, embedder=embedder)
    source = given(
        path=corpus,
        id_field=id_field,
        text_field=text_field,
        title_field=title_field,
        metadata_fields=metadata_field,
        max_file_bytes=max_file_bytes,
        extensions=dict(suffix_pair(e) for e in extension),
    )
    for key, value in (
        ("source", source),
        ("chunker", given(max_tokens=max_tokens, overlap_tokens=overlap_tokens)),
        ("options", given(ann_threshold=ann_threshold, rebuild=rebuild, sentence_vectors=sentence_vectors)),
    ):
        if value:
            overrides[key] = value
    try:
        config = load_config(IndexConfig, config_file, overrides)
        check_source(config.source)  # a bad corpus fails here, before a model loads or a flow starts
        log = log_path(config.index_path.parent, "index")
        with engine_log(log), progress(), reachable_prefect():
            rep = index_flow(config, ray=ray_options(workers, ray_address, gpus_per_worker))
    except (CribsheetError, ValueError) as exc:
        fail(error_message(exc))
    _print_index_report(rep, config)


def _print_index_report(rep: IndexReport, config: IndexConfig) -> None:
    """What `index` did: skipped files and low-coverage documents (stderr), then one summary line (stdout)."""
    from corpus.index import REPORT_FILE

    for item in rep.skipped:
        err.print(f"  skipped ({item.kind}) {item.source}: {item.reason}", highlight=False, soft_wrap=True)
    for low in rep.low_coverage[:20]:
        err.print(
            f"  low coverage {low.coverage:.0%} {low.doc_id}: {low.indexed_words} of {low.parser_words} words indexed",
            highlight=False,
            soft_wrap=True,
        )
    what = "rebuilt" if rep.rebuilt else "synced"
    if rep.restarted_build:
        err.print(f"  an interrupted build ({rep.restarted_build}) was found and restarted", highlight=False)
    for reason in rep.rebuild_reasons:
        err.print(f"  rebuilt because {reason}", highlight=False, soft_wrap=True)
    coverage = (
        f"coverage {rep.coverage:.1%} ({rep.indexed_words} of {rep.parser_words} words the parsers found), "
        f"{len(rep.low_coverage)} documents below {config.options.min_coverage:.0%}"
        if rep.coverage is not None
        else "coverage n/a (no document re-indexed)"
    )
    out.print(
        f"{what} in {rep.seconds:.1f} s: {rep.added} added, {rep.changed} changed, {rep.deleted} deleted, "
        f"{rep.unchanged} unchanged, {len(rep.skipped)} skipped; {rep.n_documents} documents, "
        f"{rep.n_chunks} chunks, table version {rep.version}; {coverage}; report in {Path(rep.path) / REPORT_FILE}",
        highlight=False,
    )
    show_path(rep.path)


@app.command()
def reclaim(
    index_path: Annotated[Path, typer.Option("--index", help="LanceDB index folder.")],
    store: Annotated[
        list[Path], typer.Option(help="Results store whose runs' snapshots are kept; repeat for every store.")
    ] = [],  # noqa: B006
    keep_last: Annotated[int, typer.Option(help="The latest snapshots kept whatever the stores name.")] = 1,
    keep_only_latest: Annotated[
        bool, typer.Option(help="Name no store: keep only the latest --keep-last snapshots (and readers' leases).")
    ] = False,
) -> None:
    """Remove the index builds older than what any stored run needs (chunk versions and side tables together)."""
    from corpus.reclaim import reclaim_index
    from eval.store import DuckDBStore

    if not store and not keep_only_latest:
        fail(
            "no --store named: name every results store whose runs read this index (repeat --store), "
            "or pass --keep-only-latest to keep only the latest --keep-last snapshots"
        )
    if store and keep_only_latest:
        fail("--keep-only-latest keeps no stored run's snapshot; give it or --store, not both")
    try:
        stores = [DuckDBStore(path, read_only=True) for path in store]  # a missing one is named before any lock
        rep = reclaim_index(index_path, lambda: [pin for s in stores for pin in s.index_pins()], keep_last)
    except CribsheetError as exc:
        fail(str(exc))
    for line in rep.unknown_claims:
        out.print(f"names no whole committed snapshot here (nothing kept for it): {line}", highlight=False)
    for lease in rep.stale_leases:
        out.print(f"removed the lease of a reader that is gone: {lease}", highlight=False)
    trimmed = sum(rep.trimmed_tables.values())
    out.print(
        f"kept snapshots {rep.kept_snapshots} (claimed {rep.claimed_snapshots}); removed "
        f"{len(rep.removed_versions)} chunk versions, {len(rep.dropped_tables)} side tables and {trimmed} "
        "side-table versions",
        highlight=False,
    )
    show_path(index_path)
