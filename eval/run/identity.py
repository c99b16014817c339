"""The identity of a run: one value, built once from the sweep config, the index snapshot, the models'
weights, the code, the packages and the machine. The run's fingerprint (resume), its reuse key (copying a
setting's rows from another run) and the identity columns of its `runs` row are all read from it, and both
keys hash *every* field of it but one, so an input added here cannot be stored and forgotten by a key, or
the reverse.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict

from corpus.cluster import RayOptions
from corpus.retrieve import IndexIdentity
from eval.settings import SweepConfig

FINGERPRINT_ONLY = "config_hash"
"""The whole config, grid included: a run is resumed only by a sweep of the same grid."""
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
    """`role:model` -> weights sha256 of every model named by path or hub id."""

    def _digest(self, leave_out: str) -> str:
        payload = self.model_dump(mode="json", exclude={leave_out})
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    @property
    def fingerprint(self) -> str:
        """Same fingerprint, same rows: an unfinished run with it is resumed."""
        return self._digest(REUSE_ONLY)

    @property
    def reuse_key(self) -> str:
        """The fingerprint with the grid left out: a setting another run with this key computed is copied."""
        return self._digest(FINGERPRINT_ONLY)


def run_identity(config: SweepConfig, index: IndexIdentity, ray: RayOptions | None = None) -> RunIdentity:
    """The identity of a sweep of `config` over the index snapshot `index`, on this machine and code."""
    from eval.run.provenance import (
        code_sha256,
        file_sha256,
        git_diff_sha256,
        git_state,
        hardware_digest,
        model_fingerprints,
        package_versions,
    )

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
        code_sha256=code_sha256(),
        package_versions=package_versions(),
        hardware_sha256=hardware_digest()[1],
        ray_options=ray.model_dump_json() if ray is not None else None,
        model_fingerprints=model_fingerprints(config, config.grid.expand()),
    )
