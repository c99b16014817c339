"""Loading documents and JSONL records with errors that name the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from corpus.errors import InputFileError

M = TypeVar("M", bound=BaseModel)


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "record"
    return f"field '{field}': {first['msg']}"


def iter_json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) per non-blank line; raise InputFileError naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "file not found")
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputFileError(path, f"cannot open: {exc.strerror}") from exc
    with handle:
        for lineno, raw_line in enumerate(handle, start=1):
            try:
                line = raw_line.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError:
                raise InputFileError(path, "not valid UTF-8", lineno) from None
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputFileError(path, f"invalid JSON: {exc.msg}", lineno) from None
            if not isinstance(raw, dict):
                raise InputFileError(path, "expected a JSON object", lineno)
            yield lineno, raw


def read_jsonl(path: Path, model: type[M]) -> Iterator[tuple[int, M]]:
    """Yield (line number, validated `model`) per non-blank line; raise InputFileError naming file and line."""
    for lineno, raw in iter_json_objects(path):
        try:
            yield lineno, model.model_validate(raw)
        except ValidationError as exc:
            raise InputFileError(path, _first_error(exc), lineno) from None


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    """Write one JSON object per line, atomically (a temporary file renamed over `path`, so a failure leaves
    no partial file); returns the sha256 of the bytes written.
    """
    import hashlib

    data = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows).encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return hashlib.sha256(data).hexdigest()
