"""A fake engine whose Ray worker dies in the middle of the latency phase (`fake-dies:MARKER`).

A Ray worker registers it by importing this module (the sweep's plugin); the test that uses it calls
`register` on a copy of the registry for its own duration, so the generators other tests list are unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from eval.engine.generator import GENERATORS, Generator, GeneratorDeps, Probe
from tests.fakes import ExtractingGenerator


class DyingGenerator(ExtractingGenerator):
    """The extracting fake whose process dies (a killed Ray worker) at the probe after the number its marker
    file holds; with no marker file it never dies."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = Path(marker)

    def probe(self, prompt: str, json_schema: dict[str, Any] | None = None) -> Probe:
        if self.marker.exists() and len(self.probes) >= int(self.marker.read_text()):
            os._exit(3)
        return super().probe(prompt, json_schema)


class DyingConfig(BaseModel):
    """Options of the dying fake."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    marker: str
    """The file holding how many probes the engine answers before its process dies."""


def _dying_generator(config: DyingConfig, deps: GeneratorDeps) -> Generator:
    """The fake whose worker dies mid-phase (tests only)."""
    return DyingGenerator(config.marker)


def register() -> None:
    """Register `fake-dies` (again: a registry copied for one test may not hold it)."""
    GENERATORS.register("fake-dies", DyingConfig, arg="marker")(_dying_generator)


register()
