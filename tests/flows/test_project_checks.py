"""`cribsheet run` checks everything it will read before it works: a bad policy, question file, model path or
setting name fails in one line naming the project file and the field, exit 2, and nothing is indexed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import tests.fakes  # noqa: F401  (registers the fake engine and hash embedder)
from flows.cli import app

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "tests" / "data" / "docs_tree"


def _project(tmp_path: Path, **fields: Any) -> Path:
    """A project file over a copy of the docs tree, with fakes for the models, and `fields` over it."""
    shutil.copytree(TREE, tmp_path / "docs")
    raw = {
        "corpus": {"path": "docs"}, "embedder": "hash", "generator": {"name": "fake"},
        "grid": {"top_ks": [2], "compressions": [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]},
    } | fields  # fmt: skip
    project = tmp_path / "cribsheet.yaml"
    project.write_text(yaml.safe_dump(raw))
    return project


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return path.name


CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    # name: (project fields, files written beside it (name -> text), what the one error line says)
    "policy missing": ({"policy": "nowhere.yaml"}, "", "policy: {dir}/nowhere.yaml: policy file not found"),
    "policy invalid": ({"policy": "bad.yaml"}, "min_questions: 1\n", "policy: {dir}/bad.yaml: invalid gate policy"),
    "policy metric": (
        {"policy": "bad.yaml"},
        "metrics: [{name: answer_recal, margin: 0.1}]\n",
        "policy: {dir}/bad.yaml: unknown metric(s) ['answer_recal']",
    ),
    "questions missing": (
        {"questions": {"path": "q.jsonl"}},
        "",
        "questions.path: {dir}/q.jsonl: question file not found",
    ),
    "questions malformed": (
        {"questions": {"path": "bad.jsonl"}},
        '{"id": "a", "question": "Q?", "answers": ["x"]}\n{"id": "b", "answers": "x"\n',
        "questions.path: {dir}/bad.jsonl:2: invalid JSON",
    ),
    "questions duplicate id": (
        {"questions": {"path": "dup.jsonl"}},
        '{"id": "a", "question": "Q?", "answers": ["x"]}\n{"id": "a", "question": "R?", "answers": ["y"]}\n',
        "questions.path: {dir}/dup.jsonl:2: duplicate question id 'a'",
    ),
    "generator folder": (
        {"generator": {"name": "fake", "model": "./models/none-here"}},
        "",
        "generator.model: {dir}/models/none-here: no such folder",
    ),
    "generator hub id": (
        {"generator": {"name": "fake", "model": "nobody-xyz/no-such-model"}},
        "",
        "generator.model: nobody-xyz/no-such-model: no such folder here and no snapshot",
    ),
    "generator field": (
        {"generator": {"name": "fake", "max_tokens": 5000}},
        "",
        "generator: max_tokens (5000) leaves no room",
    ),
    "reranker model": (
        {"grid": {"top_ks": [2], "rerankers": ["cross-encoder:/nowhere/scorer"]}},
        "",
        "grid.rerankers (cross-encoder:/nowhere/scorer): /nowhere/scorer: no such folder",
    ),
    "corpus missing": ({"corpus": {"path": "no-docs"}}, "", "corpus.path: {dir}/no-docs: no such folder or file"),
    "verifier card missing": (
        {"verifier": "likelihood:./cards/none.json"},
        "",
        "verifier: likelihood card {dir}/cards/none.json: no such file",
    ),
    "verifier card of another generator": (  # the bundled generator named, a card fitted on another's
        {"verifier": "likelihood:card.yaml", "generator": {"name": "vllm"}},
        json.dumps(
            {
                "generator": "qwen2.5-0.5b-instruct",
                "models": {
                    "documentation": {
                        "variant": "likelihood",
                        "features": ["pmi_mean"],
                        "mean": [0],
                        "scale": [1],
                        "coef": [1],
                        "intercept": 0,
                        "threshold": 0.5,
                        "tune_cases": 1,
                        "tune_sha256": "0",
                        "cv_balanced_accuracy": 0.5,
                    }
                },
            }
        ),
        "verifier: likelihood card {dir}/card.yaml: fitted on qwen2.5-0.5b-instruct's likelihoods, not "
        "smollm2-135m-instruct's",
    ),
    "verifier malformed": ({"verifier": "nli"}, "", "verifier: 'nli': write likelihood, likelihood:CARD or nli:MODEL"),
    "faithfulness under its bar": (
        {"policy": "faith.yaml"},
        "metrics: [{name: answer_token_recall, margin: 0.1}, {name: faithfulness, margin: 0.05, min_validity: 0.9}]\n",
        "policy: faithfulness cannot decide: rule checker (with embedder hash; its figures are for minilm-l6-v2) has "
        "no measured validity on documentation answers",
    ),
    "faithfulness_model with no verifier": (
        {"policy": "model.yaml"},
        "metrics: [{name: faithfulness_model, margin: 0.05, min_validity: 0.5}]\n",
        "policy: faithfulness_model decides, but no verifier fills it",
    ),
    "policy watches another shipped": (
        {"policy": "watch.yaml", "shipped": {"setting": "none-k2-hybrid-dense", "run": "r0"}},
        "shipped: {setting: halving-2x-k2-hybrid-dense, run: r0}\n",
        "shipped: none-k2-hybrid-dense, but its policy {dir}/watch.yaml watches halving-2x-k2-hybrid-dense as shipped",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_refuses_a_bad_input_in_one_line_naming_file_and_field_before_anything_is_indexed(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flows.pipeline

    fields, text, said = CASES[case]
    if text:
        name = next(v for v in _flat(fields) if isinstance(v, str) and v.endswith((".yaml", ".jsonl")))
        name = name.rsplit(":", 1)[-1]  # a card named as likelihood:FILE
        _write(tmp_path / name, text)
    project = _project(tmp_path, **fields)
    indexed: list[object] = []
    monkeypatch.setattr(flows.pipeline, "index_task", lambda *a, **k: indexed.append(a))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the one path rule: relative to the project file, whatever the working folder
    result = CliRunner().invoke(app, ["run", str(project)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert errors[0].startswith(f"error: {project}: ") and said.format(dir=tmp_path) in errors[0], errors[0]
    assert indexed == [] and not (tmp_path / "runs" / "project" / "index.lancedb").exists()  # nothing indexed


def _flat(fields: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for value in fields.values():
        out += _flat(value) if isinstance(value, dict) else [value]
    return out


def test_a_model_folder_beside_the_project_file_passes_the_check(tmp_path: Path) -> None:
    """A generator `model` written as a path is a folder relative to the project file (the one path rule),
    and the check lets it through."""
    from flows.project import Project
    from flows.project_checks import check_inputs, check_settings

    (tmp_path / "models" / "tiny").mkdir(parents=True)
    project_file = _project(tmp_path, generator={"name": "fake", "model": "./models/tiny"})
    project = Project.load(project_file)
    assert project.generator["model"] == str(tmp_path / "models" / "tiny")
    assert check_settings(project, project_file).min_questions == 30  # the packaged release policy
    check_inputs(project, project_file)


def test_the_checks_use_the_gates_own_policy_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy the gate would refuse later is refused here by the same code, not a second validator."""
    from corpus.errors import CribsheetError
    from eval.gate import GatePolicy
    from flows.project import Project
    from flows.project_checks import check_settings

    project_file = _project(tmp_path)
    loaded: list[Path] = []

    def load(path: Path) -> GatePolicy:
        loaded.append(Path(path))
        raise CribsheetError(f"{path}: refused by the gate's loader")

    monkeypatch.setattr(GatePolicy, "load", staticmethod(load))
    with pytest.raises(CribsheetError, match="policy: .*refused by the gate's loader"):
        check_settings(Project.load(project_file), project_file)
    assert loaded == [Project.load(project_file).policy]
