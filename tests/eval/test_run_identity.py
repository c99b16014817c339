"""A run is named by the data it read: a re-index never lets a sweep reuse stale rows, a rebuild never
removes what a pinned reader reads, and the code version covers files git does not track."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from corpus.chunk import ChunkerConfig, SentenceChunker
from corpus.index import IndexOptions, sync_index
from corpus.retrieve import LanceRetriever, index_identity
from eval.run.provenance import code_sha256
from eval.run.sweep import run_sweep
from tests.fakes import HashEmbedder
from tests.helpers import SweepSetup, load_documents


def test_same_inputs_reuse_every_setting_and_a_reindex_with_another_chunker_reuses_none(
    setup: SweepSetup, tiny_corpus: Path
) -> None:
    config, components = setup
    n = len(config.grid.expand())
    first = run_sweep(config, components())
    again = run_sweep(config, components(), resume=False)
    assert (first.settings_computed, again.settings_reused, again.settings_computed) == (n, n, 0)

    # The same documents, chunked finer: the documents' digest is the same, the index's is not.
    before = index_identity(config.index_path)
    chunker = SentenceChunker(ChunkerConfig(max_tokens=8))
    sync_index(load_documents(tiny_corpus), chunker, HashEmbedder(), config.index_path, IndexOptions(rebuild=True))
    after = index_identity(config.index_path)
    assert after.corpus_sha256 == before.corpus_sha256 and after.index_sha256 != before.index_sha256
    assert after.version > before.version and after.build_id != before.build_id  # versions never restart
    fresh = run_sweep(config, components(), resume=False)
    assert (fresh.settings_reused, fresh.settings_computed) == (0, n)
    with duckdb.connect(str(config.store_path), read_only=True) as con:
        digests = con.execute("SELECT run_id, index_sha256 FROM runs ORDER BY started_at").fetchall()
    assert [d for _, d in digests] == [before.index_sha256] * 2 + [after.index_sha256]


def test_weights_changed_in_place_under_the_same_name_reuse_nothing(setup: SweepSetup, tmp_path: Path) -> None:
    import os

    config, components = setup
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"weights v1")
    config = config.model_copy(update={"generator": config.generator.model_copy(update={"model": str(weights)})})
    n = len(config.grid.expand())
    first = run_sweep(config, components())
    same = run_sweep(config, components(), resume=False)
    assert (first.settings_computed, same.settings_reused) == (n, n)
    (weights / "model.safetensors").write_bytes(b"weights v2")  # fine-tuned and saved to the same folder
    os.utime(weights / "model.safetensors", ns=(1, 1))  # whatever its mtime, the content decides
    changed = run_sweep(config, components(), resume=False)
    assert (changed.settings_reused, changed.settings_computed) == (0, n)
    with duckdb.connect(str(config.store_path), read_only=True) as con:
        models = [m for (m,) in con.execute("SELECT model_fingerprints FROM runs ORDER BY started_at").fetchall()]
    assert models[0] == models[1] != models[2] and f"generator:{weights}" in models[2]


def test_a_rebuild_keeps_the_version_a_reader_pinned(tmp_path: Path, tiny_corpus: Path) -> None:
    index = tmp_path / "idx.lancedb"
    docs = load_documents(tiny_corpus)
    sync_index(docs, SentenceChunker(), HashEmbedder(), index)
    pinned = LanceRetriever(index, HashEmbedder())
    old = [h.chunk_id for h in pinned.retrieve("How high is K2?", 3, "vector")]
    old_identity = index_identity(index)
    sync_index(docs, SentenceChunker(ChunkerConfig(max_tokens=8)), HashEmbedder(), index, IndexOptions(rebuild=True))
    # The pinned reader still reads its version, and that version is still there for anyone who names it.
    assert [h.chunk_id for h in pinned.retrieve("How high is K2?", 3, "vector")] == old
    assert index_identity(index, old_identity.version) == old_identity
    assert [h.chunk_id for h in LanceRetriever(index, HashEmbedder()).retrieve("How high is K2?", 3, "vector")] != old


def test_code_version_covers_untracked_files(tmp_path: Path) -> None:
    for package in ("corpus", "eval", "flows"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    before = code_sha256(tmp_path)
    assert code_sha256(tmp_path) == before
    (tmp_path / "eval" / "new_module.py").write_text("X = 1\n")  # never added to git
    assert code_sha256(tmp_path) != before


def test_every_field_of_the_run_identity_enters_both_keys_but_the_one_each_leaves_out() -> None:
    """A new input added to RunIdentity is keyed at once: nothing to forget in a second place."""
    from eval.run.identity import FINGERPRINT_ONLY, REUSE_ONLY, RunIdentity

    base = RunIdentity(
        config_hash="c", samples_hash="s", questions_sha256="q", index_version=1, corpus_sha256="d",
        index_sha256="i", index_build_id="b", git_commit="g", git_dirty=False, diff_sha256=None, code_sha256="x",
        package_versions={"vllm": "1"}, hardware_sha256="h", ray_options=None, model_fingerprints={"m": "w"},
        shared_models={"generator:m": "w"},
    )  # fmt: skip
    changed = {
        "index_version": 2, "git_dirty": True, "diff_sha256": "y", "ray_options": "{}",
        "package_versions": {"vllm": "2"}, "model_fingerprints": {"m": "w2"}, "shared_models": {"generator:m": "w2"},
    }  # fmt: skip
    for field in RunIdentity.model_fields:
        other = base.model_copy(update={field: changed.get(field, "other")})
        assert (other.fingerprint != base.fingerprint) == (field != REUSE_ONLY), field
        assert (other.reuse_key != base.reuse_key) == (field not in FINGERPRINT_ONLY), field


def test_a_pruned_selectors_trained_scorer_is_named_by_its_weights(tmp_path: Path) -> None:
    from eval.run.identity import model_fingerprints
    from eval.settings import SweepConfig

    scorer = tmp_path / "scorer"
    scorer.mkdir()
    (scorer / "model.safetensors").write_bytes(b"scorer v1")
    raw = {
        "index_path": str(tmp_path / "idx"), "questions_path": str(tmp_path / "q.jsonl"),
        "store_path": str(tmp_path / "r.duckdb"), "compressor": {"scorer": f"cross-encoder:{scorer}"},
        "grid": {"compressions": [{"compressor": "pruned", "target_ratio": 4}]},
    }  # fmt: skip
    config = SweepConfig.model_validate(raw)
    before = model_fingerprints(config, config.grid.expand())
    (scorer / "model.safetensors").write_bytes(b"scorer v2")  # retrained into the same folder
    config = SweepConfig.model_validate(raw)
    after = model_fingerprints(config, config.grid.expand())
    key = f"compressor-scorer:{scorer}"
    assert key in before and before[key] != after[key] and before[key] != "unresolved"


def test_a_tokenizer_or_template_edited_in_place_reuses_nothing_and_a_card_edit_reuses_all(
    setup: SweepSetup, tmp_path: Path
) -> None:
    """The model's fingerprint covers every file that shapes its outputs, not its weights alone."""
    config, components = setup
    model = tmp_path / "model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    (model / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (model / "README.md").write_text("a card")
    config = config.model_copy(update={"generator": config.generator.model_copy(update={"model": str(model)})})
    n = len(config.grid.expand())
    run_sweep(config, components())
    (model / "README.md").write_text("a card, reworded")  # describes the model, shapes nothing
    assert run_sweep(config, components(), resume=False).settings_reused == n
    (model / "tokenizer_config.json").write_text('{"chat_template": "{{ messages | reverse }}"}')
    assert run_sweep(config, components(), resume=False).settings_reused == 0
    (model / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert run_sweep(config, components(), resume=False).settings_reused == 0


def test_adding_a_setting_that_names_a_model_computes_only_that_setting(setup: SweepSetup, tmp_path: Path) -> None:
    """The reuse key names the models every setting shares; a setting's own models (here a cross-encoder
    reranker) key that setting alone, so adding it leaves the others' rows reused."""
    from eval.rerank import DenseReranker

    config, components = setup
    ce = tmp_path / "ce"
    ce.mkdir()
    (ce / "model.safetensors").write_bytes(b"a cross-encoder")
    first = run_sweep(config, components())
    n = len(config.grid.expand())
    grid = config.grid.model_copy(update={"rerankers": ["dense", f"cross-encoder:{ce}"]})
    wider = config.model_copy(update={"grid": grid})
    comps = components()
    comps.rerankers[f"cross-encoder:{ce}"] = DenseReranker(HashEmbedder())  # stands in for the model
    second = run_sweep(wider, comps)
    assert first.settings_computed == n and (second.settings_reused, second.settings_computed) == (n, n)
    (ce / "model.safetensors").write_bytes(b"the cross-encoder retrained")
    comps = components()
    comps.rerankers[f"cross-encoder:{ce}"] = DenseReranker(HashEmbedder())
    third = run_sweep(wider, comps)
    assert (third.settings_reused, third.settings_computed) == (2 * n - n, n)  # only its own settings again


def test_a_plugin_modules_source_is_part_of_the_code_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_plugin.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    without = code_sha256()
    before = code_sha256(plugins=["my_plugin"])
    (tmp_path / "my_plugin.py").write_text("X = 2\n")  # the plugin's code changed, cribsheet's did not
    assert without != before != code_sha256(plugins=["my_plugin"]) and code_sha256() == without


@pytest.mark.parametrize("when", ["during the read", "before the identity"])
def test_a_question_file_rewritten_while_a_sweep_starts_is_refused_and_nothing_is_stored(
    setup: SweepSetup, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """The digest a run records is the one of the questions it read: a writer in between is refused."""
    import eval.run.sweep as sweep_module
    from corpus.errors import InputFileError

    config, components = setup
    path = config.questions_path
    if when == "during the read":
        real = sweep_module.read_jsonl

        def read_and_rewrite(p: Path, model: type) -> object:
            yield from real(p, model)
            path.write_text(path.read_text() + path.read_text().splitlines()[0].replace('"q1"', '"q9"') + "\n")

        monkeypatch.setattr(sweep_module, "read_jsonl", read_and_rewrite)
    else:
        real_row = sweep_module.run_row

        def rewrite_then_row(*args: object, **kwargs: object) -> object:
            path.write_text(path.read_text().replace("K2", "Kangchenjunga"))
            return real_row(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(sweep_module, "run_row", rewrite_then_row)
    with pytest.raises(InputFileError, match="changed while"):
        run_sweep(config, components())
    if config.store_path.exists():  # refused after the store was opened: no run, no row
        with duckdb.connect(str(config.store_path), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    else:
        assert when == "during the read"  # refused before the store was opened


def test_a_compressor_model_retrained_in_place_changes_the_sequential_gates_identity(tmp_path: Path) -> None:
    """REVIEW #5: the run's reuse key holds only the shared models; the gate's identity also holds the weights
    of each setting's own (here the LLMLingua compressor LM), so a retrain in place is another gate."""
    from corpus.models import Question
    from eval.gate.policy import GatePolicy, SequentialPlan
    from eval.run.identity import RunIdentity
    from eval.run.sequential_request import _sequence_id, pair_grid
    from eval.settings import SweepConfig

    lm = tmp_path / "lm"
    lm.mkdir()
    (lm / "model.safetensors").write_bytes(b"compressor LM v1")
    config = SweepConfig.model_validate(
        {
            "index_path": str(tmp_path / "idx"), "questions_path": str(tmp_path / "q.jsonl"),
            "store_path": str(tmp_path / "r.duckdb"), "compressor": {"model": str(lm)},
            "grid": {"compressions": [{}, {"compressor": "llmlingua", "target_ratio": 2}]},
        }
    )  # fmt: skip
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text("version: 2\nconfidence: 0.9\nmetrics:\n  - {name: answer_contains, margin: 0.02}\n")
    policy = GatePolicy.load(policy_path)
    run = RunIdentity(
        config_hash="c", samples_hash="s", questions_sha256="q", index_version=1, corpus_sha256="d",
        index_sha256="i", index_build_id="b", git_commit="g", git_dirty=False, diff_sha256=None, code_sha256="x",
        package_versions={}, hardware_sha256="h", ray_options=None, model_fingerprints={}, shared_models={},
    )  # fmt: skip  # the shared models are unchanged: the same reuse key before and after
    names = sorted(s.name for s in config.grid.expand())
    _, b, c = pair_grid(config, next(n for n in names if n.startswith("none")), next(n for n in names if "lingua" in n))
    drawn = [Question(id="q1", question="?", answers=["a"])]

    def sequence_id() -> str:
        return _sequence_id(config, run, b, c, policy, SequentialPlan(), 0, drawn)

    before = sequence_id()
    assert sequence_id() == before
    (lm / "model.safetensors").write_bytes(b"compressor LM v2")  # retrained into the same folder
    assert sequence_id() != before
