"""Configuration files: one YAML file per command, read into the same typed models the flows and the
`prefect.yaml` deployments use; command-line flags override the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from corpus.errors import CribsheetError

M = TypeVar("M", bound=BaseModel)


def merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` laid over it; nested mappings merge, anything else replaces."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping from `path`; errors name the file (and the line for syntax errors)."""
    import yaml

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise CribsheetError(f"{path}: config file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CribsheetError(f"{path}{where}: invalid YAML: {problem}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise CribsheetError(f"{path}: expected a mapping of settings, got {type(raw).__name__}")
    return raw


def validation_message(exc: ValidationError) -> str:
    """One line per error, joined: `grid.top_ks.0: Input should be a valid integer`."""
    parts = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = str(e["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def load_config(model: type[M], path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> M:
    """`model` from the YAML file at `path` (if any) with `overrides` on top; errors name the file."""
    data = merge(read_yaml(path) if path else {}, overrides or {})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        where = f"{path}: " if path else ""
        raise CribsheetError(f"{where}invalid {model.__name__}: {validation_message(exc)}") from None


def given(**flags: Any) -> dict[str, Any]:
    """The flags a user actually passed (None and empty lists or mappings mean "not given")."""
    return {k: v for k, v in flags.items() if v is not None and not (isinstance(v, (list, dict)) and not v)}
