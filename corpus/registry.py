"""Registries of named components: each entry has a name, a frozen config model and a factory.

A setting names its components by string (`llmlingua`, `cross-encoder:BAAI/bge-reranker-base`); a registry
turns that string into a `ComponentSpec` (name + validated config) without loading anything, and builds
the component from a spec later. Factories import heavy libraries inside themselves, so registering costs
nothing and a misspelled name is reported before any model loads. Tests register fakes the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from corpus.errors import CribsheetError

T = TypeVar("T")
D = TypeVar("D")
F = TypeVar("F", bound=Callable[..., Any])


class NoConfig(BaseModel):
    """A component without options."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ComponentSpec(BaseModel):
    """A registered component by name with its validated config: enough to rebuild it from a stored row."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Registered name."""
    config: dict[str, Any] = {}
    """The component's config model, dumped to JSON-compatible values."""


@dataclass(frozen=True)
class Entry(Generic[T, D]):
    """One registered component."""

    name: str
    config: type[BaseModel]
    factory: Callable[[Any, D], T]
    arg: str | None
    """Config field filled from `name:ARG` (e.g. the model of `cross-encoder:PATH`)."""
    summary: str


class Registry(Generic[T, D]):
    """Name -> (config model, factory) for one boundary (embedder, reranker, compressor, generator, judge)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T, D]] = {}

    def register(
        self, name: str, config: type[BaseModel] = NoConfig, arg: str | None = None
    ) -> Callable[[Callable[[Any, D], T]], Callable[[Any, D], T]]:
        """Decorator registering `factory(config, deps) -> component` under `name`."""
        if arg is not None and arg not in config.model_fields:
            raise TypeError(f"{self.kind} '{name}': argument field '{arg}' is not a field of {config.__name__}")

        def decorate(factory: Callable[[Any, D], T]) -> Callable[[Any, D], T]:
            doc = (factory.__doc__ or "").strip().splitlines()
            self._entries[name] = Entry(name, config, factory, arg, doc[0] if doc else "")
            return factory

        return decorate

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, ref: object) -> bool:
        return isinstance(ref, str) and ref.partition(":")[0] in self._entries

    def entry(self, name: str) -> Entry[T, D]:
        """The entry of a registered name; an unknown name is an error listing the known ones."""
        try:
            return self._entries[name]
        except KeyError:
            raise CribsheetError(f"unknown {self.kind} '{name}'; known: {', '.join(self.names())}") from None

    def spec(self, ref: str, defaults: Mapping[str, Any] | None = None) -> ComponentSpec:
        """Validate `NAME` or `NAME:ARG` with `defaults` (only the fields the config declares are taken)."""
        base, sep, arg = ref.partition(":")
        entry = self.entry(base)
        if sep and entry.arg is None:
            raise CribsheetError(f"{self.kind} '{base}' takes no argument (got '{ref}')")
        fields = entry.config.model_fields
        values = {k: v for k, v in (defaults or {}).items() if k in fields}
        if entry.arg is not None and sep:
            values[entry.arg] = arg
        try:
            config = entry.config.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            hint = f" (write {base}:{entry.arg.upper()})" if entry.arg and field == entry.arg else ""
            raise CribsheetError(f"{self.kind} '{ref}': {field}: {first['msg']}{hint}") from None
        return ComponentSpec(name=base, config=config.model_dump(mode="json"))

    def build(self, spec: ComponentSpec, deps: D) -> T:
        """Build the component of `spec`, handing it `deps` (the live objects it may need)."""
        entry = self.entry(spec.name)
        return entry.factory(entry.config.model_validate(spec.config), deps)
