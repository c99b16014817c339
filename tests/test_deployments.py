"""prefect.yaml declares deployments whose entrypoints and parameters match the flows."""

from __future__ import annotations

import importlib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


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
