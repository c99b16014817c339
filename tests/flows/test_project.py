"""Your own corpus in two commands: `cribsheet init` writes a project file from what it finds, `cribsheet
run` does everything it says. The commands are the README's (a test keeps the two in step)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import duckdb
import pytest
import yaml
from typer.testing import CliRunner

import tests.fakes  # noqa: F401  (registers the fake engine, hash embedder and halving compressor)
from flows.cli import app

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "tests" / "data" / "docs_tree"


def test_readme_names_the_two_commands_this_test_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"cribsheet init \S+", readme) and re.search(r"cribsheet run \S*cribsheet\.yaml", readme)


def test_init_detects_the_tree_writes_a_commented_project_file_and_keeps_an_edited_one(tmp_path: Path) -> None:
    runner = CliRunner()
    tree = shutil.copytree(TREE, tmp_path / "docs")
    project = tmp_path / "cribsheet.yaml"
    result = runner.invoke(app, ["init", str(tree), "--out", str(project)])
    assert result.exit_code == 0, result.output
    assert "found in" in result.output and "3 .md" in result.output
    text = project.read_text()
    raw = yaml.safe_load(text)
    assert raw["corpus"]["path"] == "docs" and raw["questions"]["path"] is None
    assert {c["compressor"] for c in raw["grid"]["compressions"]} == {"none", "pruned", "pruned-auto", "llmlingua"}
    assert text.count("#") > 15  # every field commented
    again = runner.invoke(app, ["init", str(tree), "--out", str(project)])  # unedited: written again
    assert again.exit_code == 0
    project.write_text(text.replace("generate: 300", "generate: 20"))  # the user's edit
    refused = runner.invoke(app, ["init", str(tree), "--out", str(project)])
    assert refused.exit_code == 2 and "was edited" in refused.output
    assert "generate: 20" in project.read_text()  # untouched
    forced = runner.invoke(app, ["init", str(tree), "--out", str(project), "--force"])
    assert forced.exit_code == 0 and "generate: 300" in project.read_text()


def test_init_reads_a_sphinx_trees_txt_sources_as_restructuredtext(tmp_path: Path) -> None:
    tree = tmp_path / "sphinx"
    tree.mkdir()
    (tree / "conf.py").write_text("project = 'x'\n")
    (tree / "intro.txt").write_text("Intro\n=====\n\nSome text.\n")
    result = CliRunner().invoke(app, ["init", str(tree), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 0 and ".txt files read as rst" in result.output
    assert yaml.safe_load((tmp_path / "p.yaml").read_text())["corpus"]["extensions"] == {".txt": "rst"}


def test_init_refuses_what_is_no_corpus(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["init", str(tmp_path / "nothing-here")])
    assert result.exit_code == 2 and "no such folder or file" in result.output


@pytest.mark.parametrize("policy_exit", [("pass", 0), ("fail", 1)])
def test_run_does_everything_the_project_file_says(tmp_path: Path, policy_exit: tuple[str, int]) -> None:
    """Fast tier: the fake engine and hash embedder stand in for the models (the project file names them);
    the index, questions, sweep, latency phase, gates and report are the real path."""
    verdict, code = policy_exit
    runner = CliRunner()
    tree = shutil.copytree(TREE, tmp_path / "docs")
    project = tmp_path / "cribsheet.yaml"
    assert runner.invoke(app, ["init", str(tree), "--out", str(project)]).exit_code == 0
    raw = yaml.safe_load(project.read_text())
    margin = 1.0 if verdict == "pass" else 0.0
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({
        "min_questions": 2, "confidence": 0.6,
        "metrics": [{"name": "context_token_recall", "margin": margin}],
        "latency": {"metric": "e2e_cold_s", "min_speedup": 0.01 if verdict == "pass" else 0.01, "min_probes": 2},
    }))  # fmt: skip
    raw |= {
        "embedder": "hash", "generator": {"name": "fake"}, "policy": "policy.yaml", "probe_questions": 3,
        "grid": {"top_ks": [2], "compressions": [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]},
        "questions": {"path": None, "generate": 12},
    }  # fmt: skip
    project.write_text(yaml.safe_dump(raw))
    result = runner.invoke(app, ["run", str(project)])
    assert result.exit_code == code, result.output
    assert "halving-2x-k2-hybrid-dense vs none-k2-hybrid-dense:" in result.output
    assert "latency noise floor (A/A)" in result.output and "report:" in result.output
    workdir = tmp_path / raw["workdir"]
    assert (workdir / "report" / "report.html").is_file() and (workdir / "questions.jsonl").is_file()
    with duckdb.connect(str(workdir / "results.duckdb"), read_only=True) as con:
        (settings,) = con.execute("SELECT count(DISTINCT setting_hash) FROM samples").fetchone() or (0,)
        (slots,) = con.execute("SELECT count(*) FROM latency_slots").fetchone() or (0,)
    assert settings == 2 and slots == 3 * 3 * 3  # 3 probe questions x 3 blocks x (2 settings + the twin)


def test_the_grid_init_writes_expands_into_valid_settings(tmp_path: Path) -> None:
    """Every setting of the default grid as `init` writes it is one a sweep accepts (the fast tests below run a
    grid of fakes; a default setting the sweep refuses stops a user's first `run`)."""
    from eval.settings import GridConfig
    from flows.project import default_grid

    result = CliRunner().invoke(app, ["init", str(TREE), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 0, result.output
    written = GridConfig.model_validate(yaml.safe_load((tmp_path / "p.yaml").read_text())["grid"])
    for grid in (written, default_grid()):
        settings = grid.expand()
        assert len(settings) == 7 and {s.compressor for s in settings} == {"none", "pruned", "pruned-auto", "llmlingua"}


def test_init_reads_one_copy_of_a_built_sphinx_tree(tmp_path: Path) -> None:
    """A built Sphinx HTML tree keeps its sources in `_sources/` beside the pages: init excludes that copy
    (the pages hold what autodoc filled in), and indexing the tree reads each page once."""
    from corpus.sources import SkipLog, iter_documents
    from flows.project import Project

    html = tmp_path / "doc" / "html"
    (html / "_sources").mkdir(parents=True)
    (html / "intro.html").write_text("<html><body><h1>Intro</h1><p>Click makes command lines.</p></body></html>")
    (html / "_sources" / "intro.rst.txt").write_text("Intro\n=====\n\nClick makes command lines.\n")
    project = tmp_path / "p.yaml"
    result = CliRunner().invoke(app, ["init", str(tmp_path / "doc"), "--out", str(project)])
    assert result.exit_code == 0 and "html/_sources/* not read" in result.output, result.output
    source = Project.load(project).corpus
    assert source.exclude == ["html/_sources/*"] and source.extensions == {}
    skips = SkipLog()
    docs = list(iter_documents(source, skips))
    assert [d.id for d in docs] == ["html/intro.html"]
    assert any("excluded by the pattern 'html/_sources/*'" in s.reason for s in skips.items)
