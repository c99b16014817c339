"""The base of the results store's row models: frozen, and an unknown column is an error."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Row(BaseModel):
    """Base of the row models: frozen, and an unknown column is an error (never silently dropped)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
