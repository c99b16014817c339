"""Streaming corpus loaders: a folder of text/markup files, JSONL, or Parquet.

Policy for bad input (also in the README):
- folder trees: a file that cannot be used (binary, not UTF-8, empty after extraction, over the size
  limit, a symbolic link leading outside the root, an unsupported extension) is *skipped*, and the
  reason is recorded and listed in the index report;
- JSONL and Parquet: these are data exports, so a malformed record (bad JSON, missing id or text,
  duplicate id, not UTF-8) is an *error* naming the file and line/row; a record whose text is empty is
  skipped with its reason.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from corpus.errors import InputFileError
from corpus.extract import DEFAULT_EXTENSIONS, EXTRACTORS, ExtractionError, Extractor, kept_share, render, words
from corpus.load import iter_json_objects
from corpus.models import Document


class SourceConfig(BaseModel):
    """Where a corpus comes from and how to read it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    """A folder (walked recursively), a .jsonl file or a .parquet file."""
    id_field: str = "id"
    text_field: str = "text"
    title_field: str = "title"
    """Optional in the data; missing or null means no title."""
    metadata_fields: list[str] = Field(default_factory=list)
    """Extra columns kept with each document (JSONL/Parquet)."""
    max_file_bytes: int = Field(default=10_000_000, ge=1)
    """Files (folder mode) larger than this are skipped."""
    extensions: dict[str, str] = Field(default_factory=dict)
    """Folder mode: file extension -> registered extractor, over the defaults (e.g. `.txt: rst` for Sphinx
    sources written as .txt)."""
    exclude: list[str] = Field(default_factory=list)
    """Folder mode: files whose path below the folder matches one of these patterns (fnmatch, `*` crossing
    folders, e.g. `html/_sources/*`) are not read: a second copy of the same pages, generated files."""
    parquet_batch_rows: int = Field(default=2048, ge=1)


class Skipped(BaseModel):
    """An input that was not indexed, and why."""

    source: str
    """File path, with `:line` or `#row` for records."""
    reason: str
    kind: Literal["filtered", "empty", "failed"] = "filtered"
    """filtered: by policy (type, size, link); empty: no text by design; failed: could not be extracted."""


class SkipLog:
    """Collects skipped inputs while a stream is consumed."""

    def __init__(self) -> None:
        self.items: list[Skipped] = []

    def add(self, source: str, reason: str, kind: Literal["filtered", "empty", "failed"] = "filtered") -> None:
        """Record one skipped input and why."""
        self.items.append(Skipped(source=source, reason=reason, kind=kind))


def iter_documents(config: SourceConfig, skips: SkipLog) -> Iterator[Document]:
    """Stream documents from `config.path`; memory does not grow with corpus size (except the id set)."""
    path = Path(config.path)
    if path.is_dir():
        yield from _iter_tree(path, config, skips)
    elif not path.exists():
        raise InputFileError(path, "corpus not found")
    elif path.suffix == ".jsonl":
        yield from _unique(_iter_jsonl(path, config, skips), path, "line")
    elif path.suffix == ".parquet":
        yield from _unique(_iter_parquet(path, config, skips), path, "row")
    else:
        raise InputFileError(path, "unsupported corpus file; expected a folder, .jsonl or .parquet")


def check_source(config: SourceConfig) -> None:
    """Raise the error indexing would raise on a missing corpus, or on a JSONL/Parquet file with a bad line
    or a duplicate id, before any model loads or any flow starts (a folder's files are read while indexing).
    """
    path = Path(config.path)
    if path.is_dir():
        return
    for _ in iter_documents(config, SkipLog()):
        pass


def _unique(stream: Iterator[tuple[int, Document]], path: Path, unit: str) -> Iterator[Document]:
    seen: dict[str, int] = {}
    for where, doc in stream:
        if doc.id in seen:
            loc = where if unit == "line" else None
            raise InputFileError(
                path,
                f"duplicate document id '{doc.id}' (first at {unit} {seen[doc.id]})"
                + ("" if loc else f", {unit} {where}"),
                loc,
            )
        seen[doc.id] = where
        yield doc


def _record(
    raw: dict[str, Any], config: SourceConfig, path: Path, where: int, unit: str, skips: SkipLog
) -> Document | None:
    def fail(problem: str) -> InputFileError:
        return (
            InputFileError(path, problem, where) if unit == "line" else InputFileError(path, f"row {where}: {problem}")
        )

    doc_id, text = raw.get(config.id_field), raw.get(config.text_field)
    if doc_id is None or (isinstance(doc_id, str) and not doc_id.strip()):
        raise fail(f"field '{config.id_field}': missing or empty")
    if text is None:
        raise fail(f"field '{config.text_field}': missing")
    if not isinstance(text, str):
        raise fail(f"field '{config.text_field}': expected a string, got {type(text).__name__}")
    if not text.strip():
        skips.add(f"{path}{':' if unit == 'line' else '#'}{where}", "empty text")
        return None
    title = raw.get(config.title_field) or ""
    meta = {k: raw.get(k) for k in config.metadata_fields if raw.get(k) is not None}
    return Document(id=str(doc_id), text=text, title=str(title), metadata=meta)


def _iter_jsonl(path: Path, config: SourceConfig, skips: SkipLog) -> Iterator[tuple[int, Document]]:
    for lineno, raw in iter_json_objects(path):
        doc = _record(raw, config, path, lineno, "line", skips)
        if doc is not None:
            yield lineno, doc


def _iter_parquet(path: Path, config: SourceConfig, skips: SkipLog) -> Iterator[tuple[int, Document]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise InputFileError(path, f"not a readable Parquet file ({exc})") from None
    names = set(pf.schema_arrow.names)
    wanted = [config.id_field, config.text_field, config.title_field, *config.metadata_fields]
    for required in (config.id_field, config.text_field):
        if required not in names:
            raise InputFileError(path, f"no column '{required}' (columns: {', '.join(sorted(names))})")
    columns = [c for c in dict.fromkeys(wanted) if c in names]
    row = 0
    for batch in pf.iter_batches(batch_size=config.parquet_batch_rows, columns=columns):
        for raw in batch.to_pylist():
            row += 1
            doc = _record(raw, config, path, row, "row", skips)
            if doc is not None:
                yield row, doc


def _iter_tree(root: Path, config: SourceConfig, skips: SkipLog) -> Iterator[Document]:
    real_root = root.resolve()
    extensions = DEFAULT_EXTENSIONS | {k.lower(): v for k, v in config.extensions.items()}
    for name in set(extensions.values()):
        EXTRACTORS.entry(name)  # an unknown extractor in the config is an error before any file is read
    extractors: dict[str, Extractor] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        here = Path(dirpath)
        for name in list(dirnames):
            sub = here / name
            if sub.is_symlink():
                dirnames.remove(name)
                skips.add(str(sub), "symbolic link to a folder (not followed)")
        for name in sorted(filenames):
            file = here / name
            rel = file.relative_to(root).as_posix()
            pattern = next((p for p in config.exclude if fnmatch.fnmatchcase(rel, p)), None)
            if pattern is not None:
                skips.add(str(file), f"excluded by the pattern '{pattern}'")
                continue
            kind = extensions.get(file.suffix.lower())
            if kind is None:
                skips.add(str(file), f"unsupported file type '{file.suffix or '(none)'}'")
                continue
            if kind not in extractors:
                extractors[kind] = EXTRACTORS.build(EXTRACTORS.spec(kind), None)
            doc = _read_file(file, real_root, root, config, extractors[kind], skips)
            if doc is not None:
                yield doc


def extractor_versions(config: SourceConfig) -> dict[str, str]:
    """Extractor name -> parser version for every format a folder source reads (the index build spec)."""
    if not Path(config.path).is_dir():
        return {}
    names = set((DEFAULT_EXTENSIONS | config.extensions).values())
    return {name: EXTRACTORS.build(EXTRACTORS.spec(name), None).version for name in sorted(names)}


def _read_file(
    file: Path, real_root: Path, root: Path, config: SourceConfig, extractor: Extractor, skips: SkipLog
) -> Document | None:
    try:
        target = file.resolve(strict=True)
    except (OSError, RuntimeError):
        skips.add(str(file), "broken symbolic link")
        return None
    if not target.is_relative_to(real_root):
        skips.add(str(file), "symbolic link leads outside the corpus root")
        return None
    size = target.stat().st_size
    if size > config.max_file_bytes:
        skips.add(str(file), f"larger than {config.max_file_bytes} bytes ({size})")
        return None
    try:
        found = extractor.extract(target.read_bytes(), str(file))
    except ExtractionError as exc:
        skips.add(str(file), str(exc), "failed")
        return None
    except Exception as exc:  # a parser crash on one file is a skip with its reason, never a lost run
        skips.add(str(file), f"{extractor.name} extractor crashed: {type(exc).__name__}: {exc}", "failed")
        return None
    rendered = render(found.blocks)
    kept, total = kept_share(words(found.parser_text), words(rendered.text))
    if not rendered.text.strip():
        if total:
            skips.add(str(file), f"extraction failure: the parser found {total} words, none were kept", "failed")
        else:
            skips.add(str(file), "no text in the document (empty by design)", "empty")
        return None
    rel = file.relative_to(root).as_posix()
    return Document(
        id=rel,
        text=rendered.text,
        title=found.title or file.stem.replace("_", " ").replace("-", " "),
        metadata={"path": rel, "format": extractor.name},
        sections=[s for s in rendered.sections if s[1]] if any(p for _, p in rendered.sections) else [],
        atomic=rendered.atomic,
        outline=rendered.outline,
        parser_words=total,
        kept_words=kept,
    )
