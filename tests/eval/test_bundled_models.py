"""The bundled model is converted once, even when several processes (Ray workers on one node) ask at once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from eval.engine import bundled_models


def test_workers_starting_together_convert_once_and_never_replace_a_finished_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"gguf")
    monkeypatch.setattr(bundled_models, "bundled_gguf", lambda: gguf)
    conversions: list[int] = []

    def slow_convert(source: Path, target: Path, stamp: dict[str, object]) -> None:
        conversions.append(threading.get_ident())
        time.sleep(0.3)  # long enough for every other worker to arrive meanwhile
        target.mkdir()
        (target / bundled_models.DONE_MARKER).write_text(json.dumps(stamp))

    monkeypatch.setattr(bundled_models, "_convert", slow_convert)
    found: list[Path] = []
    workers = [threading.Thread(target=lambda: found.append(bundled_models.smollm2_dir(tmp_path))) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(conversions) == 1  # one converted, the others waited for the lock and found it done
    assert found == [tmp_path / "smollm2-135m-instruct"] * 4
    assert bundled_models.smollm2_dir(tmp_path) == found[0] and len(conversions) == 1  # and later: no work at all
