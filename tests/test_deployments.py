"""prefect.yaml declares deployments whose entrypoints and parameters match the flows."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

GRIDS = {
    "demo-pruned-sweep.yaml": ["none-k8-hybrid-dense", "pruned-2x-k8-hybrid-dense", "pruned-4x-k8-hybrid-dense"],
    "django-faithfulness-sweep.yaml": ["none-k8-hybrid-dense", "pruned-4x-k8-hybrid-dense"],
    "django-scorer-heldout-sweep.yaml": [
        "none-k8-hybrid-dense",
        "pruned-4x-k8-hybrid-dense",
        "pruned-auto-8x-k8-hybrid-dense",
    ],
    "django-people-scorer-heldout-sweep.yaml": [
        "none-k8-hybrid-dense",
        "pruned-4x-k8-hybrid-dense",
        "pruned-auto-8x-k8-hybrid-dense",
    ],
    "docs-heldout-pruned-sweep.yaml": [
        "none-k8-hybrid-dense",
        "pruned-4x-k8-hybrid-dense",
        "pruned-auto-8x-k8-hybrid-dense",
    ],
    "generated-pruned-sweep.yaml": ["none-k8-hybrid-dense", "pruned-2x-k8-hybrid-dense"],
    "generated-pruned4-sweep.yaml": ["none-k8-hybrid-dense", "pruned-2x-k8-hybrid-dense", "pruned-4x-k8-hybrid-dense"],
    "generated-sweep.yaml": [
        "none-k8-hybrid-dense",
        "llmlingua-4x-k8-hybrid-dense",
        "longllmlingua-4x-k8-hybrid-dense",
    ],
    "handwritten-pruned4-sweep.yaml": ["none-k8-hybrid-dense", "pruned-4x-k8-hybrid-dense"],
    "handwritten-pruned8-sweep.yaml": [
        "none-k8-hybrid-dense",
        "pruned-4x-k8-hybrid-dense",
        "pruned-8x-k8-hybrid-dense",
        "pruned-auto-8x-k8-hybrid-dense",
    ],
    "handwritten-tuned-pruned-sweep.yaml": ["none-k8-hybrid-dense", "pruned-auto-8x-k8-hybrid-dense"],
    "nightly-sweep.yaml": [
        "none-k3-hybrid-dense",
        "none-k8-hybrid-dense",
        "llmlingua-4x-k3-hybrid-dense",
        "llmlingua-4x-k8-hybrid-dense",
        "longllmlingua-4x-k3-hybrid-dense",
        "longllmlingua-4x-k8-hybrid-dense",
    ],
    "nodejs-tuned-pruned-sweep.yaml": ["none-k8-hybrid-dense", "pruned-auto-8x-k8-hybrid-dense"],
    "seed-scale-sweep.yaml": [
        "none-k40-hybrid-dense",
        "pruned-4x-k40-hybrid-dense",
        "extractive-4x-k40-hybrid-dense",
        "longllmlingua-4x-k40-hybrid-dense",
    ],
}
"""The settings each bundled sweep config expands to, in grid order: what its header comment promises."""


def test_every_deployment_resolves_and_validates_its_parameters() -> None:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    names = {d["name"] for d in spec["deployments"]}
    assert {"index-nightly", "sweep-nightly", "gate"} <= names
    for dep in spec["deployments"]:
        module_path, func = dep["entrypoint"].split(":")
        module = importlib.import_module(module_path.removesuffix(".py").replace("/", "."))
        flow = getattr(module, func)
        validated = flow.validate_parameters(dep["parameters"])
        assert set(dep["parameters"]) <= set(validated)
        if dep["name"] != "gate":  # the gate runs on demand
            assert dep["schedules"][0]["cron"].count(" ") == 4


def test_every_deployment_config_file_loads_into_its_flow_model() -> None:
    """The files the deployments name are the ones `cribsheet <command> --config` reads: both must validate."""
    from corpus.index import IndexConfig
    from eval.gate import GateRequest
    from eval.settings import SweepConfig
    from flows.config import load_config

    models = {
        "index-nightly": IndexConfig,
        "sweep-nightly": SweepConfig,
        "sweep-generated-nightly": SweepConfig,
        "gate": GateRequest,
    }
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    for dep in spec["deployments"]:
        if "project_file" in dep["parameters"]:  # `cribsheet run`'s file: a project, not a command's config
            from flows.project import Project

            project = Project.load(ROOT / dep["parameters"]["project_file"])
            assert project.corpus.path.name == "wiki_vital_en.jsonl" and project.policy.is_file()
            continue
        path = ROOT / dep["parameters"]["config_file"]
        config = load_config(models[dep["name"]], path)
        assert type(config) is models[dep["name"]]
        if isinstance(config, SweepConfig):  # a scheduled sweep runs the settings its description names
            assert [s.name for s in config.grid.expand()] == GRIDS[path.name], dep["name"]
            assert config.generator.name == "vllm"


def test_the_seed_scale_config_is_four_4x_settings_at_about_4000_context_tokens() -> None:
    from eval.settings import SweepConfig
    from flows.config import load_config

    sweep = load_config(SweepConfig, ROOT / "configs/seed-scale-sweep.yaml")
    settings = sweep.grid.expand()
    assert {s.compressor for s in settings} == {"none", "pruned", "extractive", "longllmlingua"}
    assert {s.top_k for s in settings} == {40} and sweep.retrieve_n >= 40
    assert all(s.target_ratio == 4.0 for s in settings if s.compressor != "none")
    assert sweep.generator.max_model_len >= 8192  # a ~4,000-token prompt fits with room to spare


@pytest.mark.parametrize("path", sorted(Path("configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_bundled_config_loads_into_its_model(path: Path) -> None:
    from corpus.index import IndexConfig
    from eval.gate import GateRequest
    from eval.settings import SweepConfig
    from flows.config import load_config
    from flows.project import Project

    first = path.read_text().splitlines()[0]
    if first.startswith("# Project"):  # a `cribsheet run` project file
        assert Project.load(path).grid.expand()
        return
    model = next(m for m in (SweepConfig, IndexConfig, GateRequest) if first.startswith(f"# {m.__name__}"))
    config = load_config(model, path)  # a typo, an unknown compressor or a stray top-k fails here
    if isinstance(config, SweepConfig):
        assert path.name in GRIDS, f"add {path.name}'s settings to GRIDS"
        assert [s.name for s in config.grid.expand()] == GRIDS[path.name]
