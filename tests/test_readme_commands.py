"""README's "Your own corpus" commands, run as written on the real stack (slow tier): `cribsheet init` on a
small documentation tree the tests ship, then `cribsheet run` on the project file it wrote, nothing edited by
hand. A README whose commands stop working fails here."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "tests" / "data" / "docs_tree"


def readme_commands() -> list[list[str]]:
    """The `cribsheet` commands of README's first code block under "Your own corpus", comments dropped."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Your own corpus", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "README's 'Your own corpus' has no bash block"
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    return [shlex.split(line) for line in lines if line]


def test_readme_names_init_then_run() -> None:
    commands = readme_commands()
    assert [c[1] for c in commands] == ["init", "run"] and all(c[0] == ".venv/bin/cribsheet" for c in commands)


@pytest.mark.slow
def test_readme_own_corpus_commands_give_a_verdict_per_candidate_on_the_real_stack(tmp_path: Path) -> None:
    work = tmp_path / "repo"  # a user's clone: the policies beside the project file init writes
    work.mkdir()
    (work / "policies").symlink_to(ROOT / "policies")
    docs = shutil.copytree(TREE, tmp_path / "docs")
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PREFECT_HOME": str(tmp_path / "prefect")}
    outputs = []
    for command in readme_commands():
        argv = [str(ROOT / command[0]), *(str(docs) if a == "~/docs" else a for a in command[1:])]
        proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=3000)
        assert proc.returncode in (0, 1, 2), proc.stderr[-3000:]
        outputs.append(proc)
    init, run = outputs
    assert init.returncode == 0 and "found in" in init.stdout and (work / "cribsheet.yaml").exists()
    verdicts = [line for line in run.stdout.splitlines() if re.search(r"\b(PASS|FAIL|UNDECIDED)\b", line)]
    store = next((work / "runs").glob("*/results.duckdb"))
    with duckdb.connect(str(store), read_only=True) as con:
        settings = {r[0] for r in con.execute("SELECT DISTINCT setting_name FROM samples").fetchall()}
        ok = con.execute("SELECT count(*) FROM samples WHERE status = 'ok'").fetchone()
    candidates = {s for s in settings if not s.startswith("none-")}
    assert len(settings) == 7 and ok is not None and ok[0] > 0
    assert len(verdicts) >= len(candidates), run.stdout  # a verdict line per candidate
    assert "report: " in run.stdout and not re.search(r"\b(NULL|nan)\b", run.stdout)
    # init names the shipped setting (none at top-8): run ends with one recommendation and exits on it.
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("recommendation: "), run.stdout[-3000:]
    verdict = last.split(": ")[1].split()[0]
    assert verdict in ("ship", "keep", "undecided") and run.returncode == (2 if verdict == "undecided" else 0)
    assert "against the shipped one, none-k8-hybrid-dense" in run.stdout
    # init turns the likelihood verifier on: the real engine's likelihoods, the packaged card, named with its figure.
    assert "faithful (model): likelihood card " in run.stdout and "documentation answers" in run.stdout
    with duckdb.connect(str(store), read_only=True) as con:
        scored = con.execute(
            "SELECT count(*) FROM samples WHERE faithfulness_model IS NOT NULL AND faithfulness_method LIKE "
            "'likelihood card % (documentation model)%'"
        ).fetchone()
        features = con.execute("SELECT count(*) FROM claims WHERE pmi_mean IS NOT NULL").fetchone()
    assert scored is not None and scored[0] > 0 and features is not None and features[0] > 0
