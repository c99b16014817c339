"""The component registry: names, typed configs, `name:ARG`, and errors that list what is known."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from corpus.errors import CribsheetError
from corpus.registry import ComponentSpec, NoConfig, Registry


class Sized(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    size: int = 3


@pytest.fixture
def registry() -> Registry[object, dict[str, int]]:
    reg: Registry[object, dict[str, int]] = Registry("widget")

    @reg.register("plain", NoConfig)
    def _plain(config: NoConfig, deps: dict[str, int]) -> object:
        """A plain widget."""
        return ("plain", deps["n"])

    @reg.register("sized", Sized, arg="model")
    def _sized(config: Sized, deps: dict[str, int]) -> object:
        """A widget with a model."""
        return ("sized", config.model, config.size * deps["n"])

    return reg


def test_unknown_name_lists_the_known_ones(registry: Registry[object, dict[str, int]]) -> None:
    with pytest.raises(CribsheetError, match=r"unknown widget 'plian'; known: plain, sized$"):
        registry.spec("plian")
    assert "plain" in registry and "sized:x" in registry and "nope" not in registry


def test_argument_fills_the_declared_field_and_defaults_are_filtered(
    registry: Registry[object, dict[str, int]],
) -> None:
    spec = registry.spec("sized:/models/x", {"size": 5, "unrelated": True})
    assert spec == ComponentSpec(name="sized", config={"model": "/models/x", "size": 5})
    assert registry.build(spec, {"n": 2}) == ("sized", "/models/x", 10)
    # A stored spec round-trips through JSON and rebuilds the same component.
    assert registry.build(ComponentSpec.model_validate_json(spec.model_dump_json()), {"n": 2}) == (
        "sized",
        "/models/x",
        10,
    )


def test_bad_arguments_and_configs_are_named(registry: Registry[object, dict[str, int]]) -> None:
    with pytest.raises(CribsheetError, match="widget 'plain' takes no argument"):
        registry.spec("plain:x")
    with pytest.raises(CribsheetError, match=r"widget 'sized': model: Field required \(write sized:MODEL\)"):
        registry.spec("sized")
    with pytest.raises(CribsheetError, match="widget 'sized:m': size: Input should be a valid integer"):
        registry.spec("sized:m", {"size": "big"})


def test_argument_field_must_exist() -> None:
    with pytest.raises(TypeError, match="not a field"):
        Registry[object, None]("widget").register("x", NoConfig, arg="model")


def test_every_boundary_has_its_real_components_registered() -> None:
    from corpus.embed import EMBEDDERS
    from eval.compress import COMPRESSORS
    from eval.engine.generator import GENERATORS
    from eval.faithfulness.judge import JUDGES
    from eval.rerank import RERANKERS

    assert {"none", "llmlingua", "longllmlingua", "engine-lingua", "extractive"} <= set(COMPRESSORS.names())
    assert {"dense", "none", "query-likelihood", "cross-encoder"} <= set(RERANKERS.names())
    assert {"minilm-l6-v2", "sentence-transformers"} <= set(EMBEDDERS.names())
    assert "vllm" in GENERATORS.names() and "ragas-faithfulness" in JUDGES.names()
    # Compressor specs take the sweep-level LM options that concern them, and only those.
    spec = COMPRESSORS.spec("llmlingua", {"model": "/m", "agnostic_window": 8, "aware_window": 99})
    assert spec.config == {"model": "/m", "device": "cpu", "dtype": "auto", "agnostic_window": 8}
