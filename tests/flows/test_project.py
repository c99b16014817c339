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
    assert raw["corpus"]["path"] == "docs" and raw["questions"]["path"] is None and raw["policy"] == "default"
    assert {c["compressor"] for c in raw["grid"]["compressions"]} == {"none", "pruned", "pruned-auto", "llmlingua"}
    assert text.count("#") > 15  # every field commented
    assert raw["shipped"] == "none-k8-hybrid-dense"  # the uncompressed setting at the largest top-k: run recommends
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
    assert raw.pop("shipped") == "none-k8-hybrid-dense"  # init names one; this user deletes the line
    raw |= {
        "embedder": "hash", "generator": {"name": "fake-scoring"}, "policy": "policy.yaml", "probe_questions": 3,
        "grid": {"top_ks": [2], "compressions": [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]},
        "questions": {"path": None, "generate": 12},
    }  # fmt: skip
    project.write_text(yaml.safe_dump(raw))
    result = runner.invoke(app, ["run", str(project)])
    assert result.exit_code == code, result.output
    assert "halving-2x-k2-hybrid-dense vs none-k2-hybrid-dense:" in result.output
    assert "A/A twins:" in result.output and "report:" in result.output
    workdir = tmp_path / raw["workdir"]
    assert (workdir / "report" / "report.html").is_file() and (workdir / "questions.jsonl").is_file()
    with duckdb.connect(str(workdir / "results.duckdb"), read_only=True) as con:
        (settings,) = con.execute("SELECT count(DISTINCT setting_hash) FROM samples").fetchone() or (0,)
        (slots,) = con.execute("SELECT count(*) FROM latency_slots").fetchone() or (0,)
    assert settings == 2 and slots == 3 * 3 * 3  # 3 probe questions x 3 blocks x (2 settings + the twin)
    # init turns the likelihood verifier on for a documentation tree: its verdicts and method are stored, named.
    assert raw["verifier"] == "likelihood" and raw["corpus_kind"] == "documentation"
    with duckdb.connect(str(workdir / "results.duckdb"), read_only=True) as con:
        methods = con.execute("SELECT DISTINCT faithfulness_method FROM samples WHERE n_claims > 0").fetchall()
        assert len(methods) == 1 and methods[0][0].startswith("likelihood card ")
    assert "faithful (model): likelihood card" in result.output
    # No `shipped:`: no gate against it, no recommendation, the exit code by each candidate's own verdict.
    assert "recommendation" not in result.output and "against the shipped one" not in result.output
    with duckdb.connect(str(workdir / "results.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM recommendations").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM family_verdicts").fetchone() == (0,)


def test_the_grid_init_writes_expands_into_valid_settings(tmp_path: Path) -> None:
    """Every setting of the default grid as `init` writes it is one a sweep accepts (the fast tests below run a
    grid of fakes; a default setting the sweep refuses stops a user's first `run`)."""
    from eval.settings import GridConfig
    from flows.project import default_grid

    result = CliRunner().invoke(app, ["init", str(TREE), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 0, result.output
    written = GridConfig.model_validate(yaml.safe_load((tmp_path / "p.yaml").read_text())["grid"])
    assert written == default_grid()  # the file is written from the one default grid, not a copy of it
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


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        (
            "demo-project.yaml",
            {("none", 3), ("none", 8), ("pruned", 3), ("pruned", 8), ("llmlingua", 3), ("longllmlingua", 3)},
        ),
        (
            "demo-full-project.yaml",
            {(c, k) for c in ("none", "pruned", "llmlingua", "longllmlingua") for k in (3, 8)},
        ),
    ],
)
def test_the_demos_project_files_agree_with_their_policy_so_a_demo_decision_can_pass(
    name: str, settings: set[tuple[str, int]]
) -> None:
    """`make demo` runs configs/demo-project.yaml (`--full`: demo-full-project.yaml) through `cribsheet run`'s
    flow: each file's grid, questions and latency phase must be ones its gate policy can decide on."""
    from eval.gate import GatePolicy
    from flows.project import Project
    from flows.project_checks import check_settings

    project = Project.load(ROOT / "configs" / name)
    policy = GatePolicy.load(project.policy)
    assert check_settings(project, ROOT / "configs" / name) == policy  # what `run` checks before it works
    assert {(s.compressor, s.top_k) for s in project.grid.expand()} == settings
    assert policy.latency is not None and project.probe_questions >= policy.latency.min_probes
    assert (project.questions.limit or 85) >= policy.min_questions
    assert policy.sequential is not None and policy.sequential.budget >= policy.min_questions
    names = {s.name for s in project.grid.expand()}
    # The demo ends with a sequential recommendation against none-k8: every other setting is a candidate
    # (the `sequential:` list is not read with `shipped:`).
    assert project.shipped == "none-k8-hybrid-dense" and project.shipped in names and project.sequential is None
    assert project.dataset == ROOT / "datasets" and project.corpus.path.parent == project.dataset
    assert project.workdir == ROOT / "runs" / "demo"


def test_init_then_run_from_a_folder_that_is_not_the_checkout_and_the_questions_are_generated_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`init` names the policy that ships with cribsheet (`policy: default`), so `run` finds it from any
    folder; a second `run` reuses the generated questions without reading the corpus for them."""
    import flows.project_questions
    from corpus.sources import iter_documents

    reads: list[str] = []

    def counting(*args: object) -> object:
        for doc in iter_documents(*args):  # type: ignore[arg-type]
            reads.append(doc.id)
            yield doc

    monkeypatch.setattr(flows.project_questions, "iter_documents", counting)
    home = tmp_path / "proj"
    home.mkdir()
    monkeypatch.chdir(home)  # not the checkout: no policies/ folder here
    tree = shutil.copytree(TREE, tmp_path / "docs")
    runner = CliRunner()
    assert runner.invoke(app, ["init", str(tree)]).exit_code == 0
    raw = yaml.safe_load(Path("cribsheet.yaml").read_text())
    assert raw["policy"] == "default"
    raw |= {
        "embedder": "hash", "generator": {"name": "fake-scoring"}, "probe_questions": 2, "probe_repeats": 1,
        "grid": {"top_ks": [2], "compressions": [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]},
        "shipped": "none-k2-hybrid-dense",  # the grid edited, what ships named in it
    }  # fmt: skip
    Path("cribsheet.yaml").write_text(yaml.safe_dump(raw))
    for expected_reads in (3, 0):
        reads.clear()
        result = runner.invoke(app, ["run", "cribsheet.yaml"])
        assert result.exit_code in (0, 1, 2) and "error:" not in result.output, result.output
        assert f"({ROOT / 'policies' / 'gate.yaml'})" in result.output  # the packaged policy gated them
        assert "halving-2x-k2-hybrid-dense vs none-k2-hybrid-dense:" in result.output and "report:" in result.output
        assert len(reads) == expected_reads, result.output
    assert len((home / "runs" / "docs" / "questions.jsonl").read_text().splitlines()) == 5


def test_the_default_policy_ships_with_the_package_and_every_package_is_in_the_wheel() -> None:
    """pyproject lists every package (a wheel holds only those) and installs `policies/` as
    `cribsheet_policies`: `policy: default` is the repository's policies/gate.yaml, one file, found from any
    folder; configs and docs that name policies/gate.yaml name the same file."""
    import tomllib

    from eval.gate import GatePolicy
    from flows.project import packaged_policy

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("corpus", "eval", "flows")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == found | {"cribsheet_policies"}
    assert setuptools["package-dir"] == {"cribsheet_policies": "policies"}
    assert setuptools["package-data"] == {"cribsheet_policies": ["*.yaml"], "eval.faithfulness": ["cards/*.json"]}
    cards = {p.name for p in (ROOT / "eval" / "faithfulness" / "cards").glob("*.json")}
    assert cards == {"likelihood-smollm2-135m.json", "validity.json"}  # what the likelihood verifier reads
    assert packaged_policy().read_bytes() == (ROOT / "policies" / "gate.yaml").read_bytes()
    assert GatePolicy.load(packaged_policy()) == GatePolicy.load(ROOT / "policies" / "gate.yaml")


@pytest.mark.parametrize(("flags", "name"), [([], "demo-project.yaml"), (["--full"], "demo-full-project.yaml")])
def test_the_demo_is_cribsheet_run_over_the_bundled_project_file(
    flags: list[str], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flows.pipeline
    from corpus.errors import CribsheetError

    seen: list[Path] = []

    def stop(project_file: Path) -> None:
        seen.append(Path(project_file))
        raise CribsheetError("stopped by the test")

    monkeypatch.setattr(flows.pipeline, "project_flow", stop)
    result = CliRunner().invoke(app, ["demo", *flags])
    assert result.exit_code == 2 and "stopped by the test" in result.output
    assert seen == [ROOT / "configs" / name]
    assert "$(BIN)/cribsheet demo" in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize("field", ["sequential", "candidates", "shipped"])
def test_a_project_naming_no_setting_of_its_grid_for_the_sequential_gate_is_refused_before_any_work(
    tmp_path: Path, field: str
) -> None:
    tree = shutil.copytree(TREE, tmp_path / "docs")
    project = tmp_path / "cribsheet.yaml"
    raw = {
        "corpus": {"path": "docs"}, "embedder": "hash", "generator": {"name": "fake"},
        "grid": {"top_ks": [2], "compressions": [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]},
        field: "halving-2x-k3-hybrid-dense" if field == "shipped" else ["halving-2x-k3-hybrid-dense"],
    }  # fmt: skip
    project.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["run", str(project)])
    assert result.exit_code == 2
    assert f"{field}: halving-2x-k3-hybrid-dense is no setting of the grid" in result.output
    assert not (tmp_path / "runs" / "project" / "index.lancedb").exists() and tree.is_dir()  # nothing indexed


def test_run_sweeps_the_first_limit_questions_and_gates_sequentially_over_the_rest(tmp_path: Path) -> None:
    """`questions.limit` bounds the fixed-n sweep; the candidate `sequential:` names is then gated batch by
    batch over the whole question file (up to the policy's budget), and only that one."""
    tree = shutil.copytree(TREE, tmp_path / "docs")
    project = tmp_path / "cribsheet.yaml"
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({
        "min_questions": 2, "confidence": 0.95,
        "metrics": [{"name": "context_token_recall", "margin": 0.001}],
        "sequential": {"batch": 4, "budget": 12, "probes": 1},
    }))  # fmt: skip
    raw = {
        "corpus": {"path": str(tree.name)}, "embedder": "hash", "generator": {"name": "fake"},
        "policy": "policy.yaml", "probe_questions": 2, "probe_repeats": 1,
        "questions": {"generate": 12, "limit": 3},  # the tree gives 5
        "grid": {"top_ks": [2], "compressions": [
            {"compressor": "none"}, {"compressor": "halving", "target_ratio": 2},
            {"compressor": "halving", "target_ratio": 3}]},
        "sequential": ["halving-2x-k2-hybrid-dense"],
    }  # fmt: skip
    project.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["run", str(project)])
    assert result.exit_code in (1, 2), result.output
    lines = [line for line in result.output.splitlines() if "sequential, batch by batch" in line]
    assert len(lines) == 1 and "halving-2x-k2-hybrid-dense vs none-k2-hybrid-dense" in lines[0]
    assert "halving-3x-k2-hybrid-dense vs none-k2-hybrid-dense:" in result.output  # fixed-n only
    store = tmp_path / "runs" / "project" / "results.duckdb"
    with duckdb.connect(str(store), read_only=True) as con:
        per_setting = con.execute(
            "SELECT count(*) FROM samples WHERE run_id IN (SELECT run_id FROM samples GROUP BY run_id"
            " HAVING count(DISTINCT setting_hash) = 3) GROUP BY setting_hash"
        ).fetchall()
        asked = con.execute("SELECT count(DISTINCT question_id) FROM samples").fetchone()
    assert per_setting == [(3,)] * 3  # the sweep's run: the first 3 questions
    assert asked is not None and asked[0] == 5  # the sequential gate's batches: all 5


def test_run_exits_1_only_on_a_failed_candidate_it_was_told_to_ship_and_reads_a_sequential_verdict_first() -> None:
    from types import SimpleNamespace

    from flows.project import exit_code

    def d(candidate: str, decision: str) -> SimpleNamespace:
        return SimpleNamespace(candidate=candidate, decision=decision)

    fixed = [d("a", "fail"), d("b", "pass")]
    assert exit_code(fixed) == 1  # every candidate is named by default
    assert exit_code(fixed, named=["b"]) == 0  # a's FAIL is reported, not a release blocker
    assert exit_code(fixed, named=["a"]) == 1
    assert exit_code([d("a", "undecided"), d("b", "pass")], named=["b"]) == 2  # something could not decide
    assert exit_code([d("a", "undecided")], [d("a", "pass")]) == 0  # its sequential verdict stands for it
    assert exit_code([d("a", "pass")], [d("a", "fail")]) == 1
    assert exit_code([]) == 2  # nothing was gated
    # With `shipped:` the recommendation decides the exit code: 0 ship or keep, 2 undecided.
    ship, undecided = SimpleNamespace(exit_code=0), SimpleNamespace(exit_code=2)
    assert exit_code(fixed, named=["a"], recommendation=ship) == 0
    assert exit_code([d("a", "pass")], recommendation=undecided) == 2


def test_run_with_shipped_gates_every_setting_against_it_and_ends_with_one_recommendation(tmp_path: Path) -> None:
    """Fast tier, fakes for the models: every other setting of the grid (a smaller top-k too) is gated against
    the shipped one after the twin gates, Holm across the three, the recommendation printed last, stored,
    shown first in the report, and the exit code follows it."""
    from eval.gate.recommend import RECOMMENDATION_EXIT

    tree = shutil.copytree(TREE, tmp_path / "docs")
    project = tmp_path / "cribsheet.yaml"
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({
        "min_questions": 2, "confidence": 0.6,
        "metrics": [{"name": "answer_token_recall", "margin": 1.0}, {"name": "context_token_recall", "margin": 1.0}],
        "latency": {"metric": "e2e_cold_s", "min_speedup": 0.01, "min_probes": 2},
    }))  # fmt: skip
    raw = {
        "corpus": {"path": tree.name}, "embedder": "hash", "generator": {"name": "fake"},
        "policy": "policy.yaml", "probe_questions": 3, "questions": {"generate": 12},
        "grid": {"top_ks": [2, 3],
                 "compressions": [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]},
        "shipped": "none-k3-hybrid-dense",
    }  # fmt: skip
    project.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["run", str(project)])
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("recommendation: "), result.output
    assert "halving-2x-k3-hybrid-dense vs none-k3-hybrid-dense:" in result.output  # the twin gate, kept
    assert "none-k2-hybrid-dense vs none-k3-hybrid-dense:" in result.output  # a smaller top-k gated against it
    workdir = tmp_path / "runs" / "project"
    with duckdb.connect(str(workdir / "results.duckdb"), read_only=True) as con:
        rec = con.execute("SELECT verdict, recommended, shipped, k, procedure FROM v_recommendation").fetchall()
        family = con.execute("SELECT candidate, adjusted_verdict, speedup FROM family_verdicts").fetchall()
    assert len(rec) == 1
    verdict, recommended, shipped, k, procedure = rec[0]
    assert (shipped, k, procedure) == ("none-k3-hybrid-dense", 3, "holm")
    assert sorted(c for c, _, _ in family) == [
        "halving-2x-k2-hybrid-dense", "halving-2x-k3-hybrid-dense", "none-k2-hybrid-dense",
    ]  # fmt: skip
    assert result.exit_code == RECOMMENDATION_EXIT[verdict], result.output
    passed = [(s, c) for c, v, s in family if v == "pass"]
    assert recommended == (max(passed)[1] if passed else None)  # the fastest that passed
    assert verdict == ("ship" if passed else verdict)
    html = (workdir / "report" / "report.html").read_text()
    assert 0 < html.index('id="recommendation"') < html.index("Release decisions")  # shown first
    assert (workdir / "report" / "report.md").read_text().split("\n")[2].startswith("**recommendation: ")


def test_shipped_written_with_its_run_parses_into_the_name_and_the_run_and_init_says_so(tmp_path: Path) -> None:
    from corpus.errors import CribsheetError
    from eval.gate.policy import ShippedSetting
    from flows.project import Project, _shipped_yaml

    project = tmp_path / "cribsheet.yaml"
    raw = {"corpus": {"path": "docs"}, "shipped": {"setting": "none-k8-hybrid-dense", "run": "20261206T010203-abc123"}}
    project.write_text(yaml.safe_dump(raw))
    loaded = Project.load(project)
    assert (loaded.shipped, loaded.shipped_run) == ("none-k8-hybrid-dense", "20261206T010203-abc123")
    assert loaded.shipped_setting == ShippedSetting(setting="none-k8-hybrid-dense", run="20261206T010203-abc123")
    project.write_text(yaml.safe_dump(raw | {"shipped": {"setting": "none-k8-hybrid-dense"}}))  # no run: not watched
    assert (Project.load(project).shipped, Project.load(project).shipped_setting) == ("none-k8-hybrid-dense", None)
    project.write_text(yaml.safe_dump(raw | {"shipped": "none-k8-hybrid-dense"}))  # the name alone, as before
    assert (Project.load(project).shipped, Project.load(project).shipped_run) == ("none-k8-hybrid-dense", None)
    project.write_text(yaml.safe_dump(raw | {"shipped": {"setting": "none-k8-hybrid-dense", "runs": "r"}}))
    with pytest.raises(CribsheetError, match=f"^{re.escape(str(project))}: .*shipped: .*unknown key\\(s\\) runs$"):
        Project.load(project)
    assert "{setting: NAME, run: <run id>}" in _shipped_yaml("none-k8-hybrid-dense")  # init's comment says so


def test_run_with_shipped_and_its_run_watches_it_and_a_regression_ends_the_run_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`shipped: {setting, run}`: after the sweep, tonight's rows of the shipped setting are gated against the
    run it shipped on (the nightly watch, its decision row stored) and the run goes on; a regression is one
    error line, exit 2, before any other gate."""
    import flows.pipeline

    tree = shutil.copytree(TREE, tmp_path / "docs")
    project = tmp_path / "cribsheet.yaml"
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({
        "min_questions": 2, "confidence": 0.6, "latency": None,
        "metrics": [{"name": "answer_token_recall", "margin": 1.0}, {"name": "context_token_recall", "margin": 1.0}],
    }))  # fmt: skip
    raw = {
        "corpus": {"path": tree.name}, "embedder": "hash", "generator": {"name": "fake"},
        "policy": "policy.yaml", "probe_questions": 2, "probe_repeats": 1, "questions": {"generate": 12},
        "grid": {"top_ks": [2], "compressions": [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]},
        "shipped": "none-k2-hybrid-dense",
    }  # fmt: skip
    project.write_text(yaml.safe_dump(raw))
    first = CliRunner().invoke(app, ["run", str(project)])
    assert "shipped setting" not in first.output, first.output  # no run given: nothing watched
    store = tmp_path / "runs" / "project" / "results.duckdb"
    with duckdb.connect(str(store), read_only=True) as con:
        (shipped_run,) = con.execute("SELECT run_id FROM runs").fetchone() or ("",)
    project.write_text(yaml.safe_dump(raw | {"shipped": {"setting": "none-k2-hybrid-dense", "run": shipped_run}}))
    clean = CliRunner().invoke(app, ["run", str(project)])
    assert clean.stdout.strip().splitlines()[-1].startswith("recommendation: "), clean.output  # the run went on
    with duckdb.connect(str(store), read_only=True) as con:
        watched = con.execute(
            "SELECT baseline, candidate, decision FROM gate_decisions WHERE baseline_run = ? AND candidate_run <> ?",
            [shipped_run] * 2,
        ).fetchall()
    assert len(watched) == 1, watched  # the watch's decision row: the shipped run's rows against tonight's
    assert watched[0][0] == f"none-k2-hybrid-dense@{shipped_run}" and watched[0][2] == "pass"

    def regressed(*args: object) -> object:
        return real(*args).model_copy(update={"decision": "fail"})  # type: ignore[attr-defined]

    real = flows.pipeline.watch_shipped
    monkeypatch.setattr(flows.pipeline, "watch_shipped", regressed)
    failed = CliRunner().invoke(app, ["run", str(project)])
    errors = [line for line in failed.output.splitlines() if line.startswith("error:")]
    assert failed.exit_code == 2 and len(errors) == 1, failed.output
    assert errors[0].startswith("error: shipped setting FAIL: none-k2-hybrid-dense@"), errors[0]
    assert "recommendation" not in failed.output  # it stopped at the watch, before any other gate


def test_run_with_shipped_and_a_sequential_policy_recommends_batch_by_batch(tmp_path: Path) -> None:
    """Fast tier, fakes: with a `sequential:` block the recommendation comes from the sequential grid (every
    candidate against the shipped setting batch by batch, Holm over anytime-valid p-values), stored as
    `holm-anytime` with the questions it drew, printed last; the twin gates stay as fixed-n diagnostics."""
    tree = shutil.copytree(TREE, tmp_path / "docs")
    project = tmp_path / "cribsheet.yaml"
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({
        "min_questions": 2, "confidence": 0.6,
        "metrics": [{"name": "answer_token_recall", "margin": 1.0}, {"name": "context_token_recall", "margin": 1.0}],
        "latency": {"metric": "e2e_cold_s", "min_speedup": 0.1, "min_probes": 2},
        "sequential": {"batch": 6, "budget": 12, "probes": 2},
    }))  # fmt: skip
    raw = {
        "corpus": {"path": tree.name}, "embedder": "hash", "generator": {"name": "fake"},
        "policy": "policy.yaml", "probe_questions": 3, "questions": {"generate": 12},
        "grid": {"top_ks": [2, 3],
                 "compressions": [{"compressor": "none"}, {"compressor": "halving", "target_ratio": 2}]},
        "shipped": "none-k3-hybrid-dense",
    }  # fmt: skip
    project.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["run", str(project)])
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("recommendation: ") and "anytime-valid Holm across 3 candidates" in last, result.output
    assert "halving-2x-k3-hybrid-dense vs none-k3-hybrid-dense:" in result.output  # the twin gate, kept
    assert "against the shipped one, none-k3-hybrid-dense, batch by batch until decided:" in result.output
    with duckdb.connect(str(tmp_path / "runs" / "project" / "results.duckdb"), read_only=True) as con:
        rec = con.execute("SELECT procedure, k, n_questions FROM v_recommendation").fetchall()
        looks = con.execute("SELECT count(DISTINCT sequence_id) FROM gate_looks").fetchall()
    assert len(rec) == 1 and rec[0][:2] == ("holm-anytime", 3) and 0 < rec[0][2] <= 12
    assert looks == [(3,)]  # one sequence of looks per candidate


def test_the_project_names_the_verifier_and_the_corpus_kind_the_sweep_records(tmp_path: Path) -> None:
    from corpus.errors import CribsheetError
    from flows.project import Project

    project = tmp_path / "sub" / "cribsheet.yaml"
    project.parent.mkdir()
    project.write_text(yaml.safe_dump({"corpus": {"path": "docs"}, "verifier": "likelihood:./cards/mine.json"}))
    config = Project.load(project).sweep_config(tmp_path / "q.jsonl")
    assert config.verifier is not None and config.verifier.name == "likelihood"
    assert config.verifier.model == str(tmp_path / "sub" / "cards" / "mine.json")  # relative to the project file
    assert config.corpus_kind == "documentation"  # a corpus of the user's: documentation unless it says so
    project.write_text(yaml.safe_dump({"corpus": {"path": "d"}, "dataset": "ds", "verifier": "likelihood"}))
    config = Project.load(project).sweep_config(tmp_path / "q.jsonl")
    assert config.corpus_kind == "encyclopedia" and config.verifier is not None and config.verifier.model is None
    project.write_text(yaml.safe_dump({"corpus": {"path": "d"}, "corpus_kind": "encyclopedia"}))
    assert Project.load(project).sweep_config(tmp_path / "q.jsonl").verifier is None
    project.write_text(yaml.safe_dump({"corpus": {"path": "d"}, "verifier": "nli"}))
    with pytest.raises(CribsheetError, match="verifier: 'nli': write likelihood, likelihood:CARD or nli:MODEL"):
        Project.load(project).sweep_config(tmp_path / "q.jsonl")
