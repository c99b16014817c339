"""A model's weights fingerprint covers what its outputs depend on, the modelling code a `trust_remote_code`
model runs included, and not what a trainer writes beside the weights (REVIEW #21)."""

from __future__ import annotations

from pathlib import Path

from corpus.weights import weights_fingerprint


def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "config.json").write_text('{"auto_map": {"AutoModel": "modeling_custom.CustomModel"}}')
    (folder / "modeling_custom.py").write_text("def forward(x):\n    return x\n")
    (folder / "training_args.bin").write_bytes(b"output_dir=/tmp/run-1 seed=1")
    return folder


def test_the_remote_modelling_code_is_part_of_the_fingerprint(tmp_path: Path) -> None:
    folder = model(tmp_path)
    before = weights_fingerprint(folder)
    (folder / "modeling_custom.py").write_text("def forward(x):\n    return 2 * x\n")  # same weights, other outputs
    assert weights_fingerprint(folder) != before


def test_what_a_trainer_writes_beside_the_weights_is_not(tmp_path: Path) -> None:
    folder = model(tmp_path)
    before = weights_fingerprint(folder)
    (folder / "training_args.bin").write_bytes(b"output_dir=/tmp/run-2 seed=2")  # every training run rewrites it
    (folder / "optimizer.pt").write_bytes(b"adam moments")
    (folder / "rng_state.pth").write_bytes(b"rng")
    assert weights_fingerprint(folder) == before
    (folder / "model.safetensors").write_bytes(b"weights, trained again")
    assert weights_fingerprint(folder) != before
