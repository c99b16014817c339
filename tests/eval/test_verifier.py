"""The model verifier (`--verifier nli:MODEL`), tested on tiny randomly initialised classifiers built here
from the bundled MiniLM vocabulary: nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.errors import CribsheetError
from eval.faithfulness.verifier import NliConfig, NliVerifier, VerifierConfig, check_verifier, support_label, windows

NLI_LABELS = {0: "contradiction", 1: "entailment", 2: "neutral"}


def tiny_classifier(folder: Path, id2label: dict[int, str], max_positions: int = 128) -> Path:
    """A 1-layer BERT sequence classifier with random weights and the bundled MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from corpus.embed import bundled_minilm_path

    tokenizer = AutoTokenizer.from_pretrained(bundled_minilm_path())
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=max_positions,
        num_labels=len(id2label),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.model_max_length = max_positions
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def nli_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("nli"), NLI_LABELS)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (NLI_LABELS, 1),
        ({0: "not_entailment", 1: "entailment"}, 1),
        ({0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}, 0),
        ({0: "unsupported", 1: "supported"}, 1),
        ({0: "inconsistent", 1: "consistent"}, 1),
        ({0: "hallucinated"}, None),  # one logit: a consistency score
    ],
)
def test_the_support_label_is_found_by_name(labels: dict[int, str], expected: int | None) -> None:
    assert support_label(labels, "m") == expected


def test_a_label_named_in_the_config_wins_and_must_exist() -> None:
    assert support_label({0: "LABEL_0", 1: "LABEL_1"}, "minicheck", given=1) == 1
    with pytest.raises(CribsheetError, match="label 2 is not one of its labels"):
        support_label({0: "LABEL_0", 1: "LABEL_1"}, "minicheck", given=2)


@pytest.mark.parametrize(
    "labels", [{0: "LABEL_0", 1: "LABEL_1"}, {0: "positive", 1: "negative"}, {0: "entailment", 1: "supported"}]
)
def test_a_model_without_one_support_label_is_a_one_line_error(labels: dict[int, str]) -> None:
    with pytest.raises(CribsheetError) as info:
        support_label(labels, "m")
    assert "means 'supported'" in str(info.value) and "\n" not in str(info.value)


def test_windows_start_with_the_checkers_span_then_the_sentences_that_share_the_claim(nli_model: Path) -> None:
    context = (
        "Oslo is the capital of Norway. It has a fjord. Bergen is rainy. "
        "The Munch museum holds The Scream. Trondheim was once the capital."
    )
    out = windows("The Scream hangs in the Munch museum.", context, "Bergen is rainy.", n=2, width=1)
    assert out == ["Bergen is rainy.", "The Munch museum holds The Scream."]
    wide = windows("The Scream hangs in the Munch museum.", context, None, n=1, width=3)
    assert wide == ["Bergen is rainy. The Munch museum holds The Scream. Trondheim was once the capital."]


def test_loading_batching_and_truncation_give_one_probability_per_claim(nli_model: Path) -> None:
    long_context = " ".join(f"Sentence number {i} talks about rivers and hills." for i in range(300))
    items = [
        ("Rivers are mentioned.", long_context, None),  # far beyond the model's 128 positions: truncated
        ("Paris is in France.", "Paris is the capital of France.", "Paris is the capital of France."),
        ("Nothing here.", "", None),
    ]
    one = NliVerifier(NliConfig(model=str(nli_model), batch_size=1, threshold=0.3))
    many = NliVerifier(NliConfig(model=str(nli_model), batch_size=16, threshold=0.3))
    assert one.max_length == 128 and one.label == 1 and one.device == "cpu"
    a, b = one.score_claims(items), many.score_claims(items)
    assert len(a) == 3 and all(0.0 <= s.probability <= 1.0 for s in a)
    assert [s.probability for s in a] == pytest.approx([s.probability for s in b], abs=1e-5)  # batching changes nothing
    assert all(s.supported == (s.probability >= 0.3) for s in a)
    assert a[1].window == "Paris is the capital of France."
    # The truncated pair holds the whole claim: truncation cuts the evidence only.
    encoded = one.tokenizer(a[0].window, "Rivers are mentioned.", truncation="only_first", max_length=one.max_length)
    assert len(encoded["input_ids"]) <= 128


def test_a_single_logit_model_is_scored_by_its_sigmoid(tmp_path: Path) -> None:
    import torch

    folder = tiny_classifier(tmp_path / "one", {0: "consistent"})
    verifier = NliVerifier(NliConfig(model=str(folder)))
    assert verifier.label is None
    pair = [("Paris is the capital of France.", "Paris is in France.")]
    encoded = verifier.tokenizer(*zip(*pair, strict=True), return_tensors="pt")
    with torch.inference_mode():
        expected = torch.sigmoid(verifier.model(**encoded).logits[0, 0]).item()
    assert verifier.probabilities(pair) == pytest.approx([expected], abs=1e-6)


def test_a_missing_model_or_one_without_a_support_label_fails_the_check(tmp_path: Path) -> None:
    with pytest.raises(CribsheetError, match="not a model folder"):
        check_verifier(VerifierConfig(model=str(tmp_path / "nope")))
    sentiment = tiny_classifier(tmp_path / "sentiment", {0: "negative", 1: "positive"})
    with pytest.raises(CribsheetError, match="no label means 'supported'"):
        check_verifier(VerifierConfig(model=str(sentiment)))


def test_sweep_with_a_verifier_stores_probabilities_and_the_agreement(
    tmp_path: Path, tiny_corpus: Path, tiny_questions: Path, nli_model: Path
) -> None:
    """`cribsheet sweep ... --verifier nli:PATH` end to end (fake generator, hash embedder, real tiny model)."""
    import duckdb

    from eval.metrics import cohen_kappa
    from tests.test_cli import _fake_sweep_config, run

    store = tmp_path / "r.duckdb"
    config = _fake_sweep_config(tmp_path, tiny_corpus, tiny_questions, store)
    env = {"CRIBSHEET_PLUGINS": "tests.fakes"}
    args = ["--compression", "none"]  # the default grid adds LLMLingua, whose cost says nothing of the verifier
    proc = run("sweep", "--config", str(config), *args, "--verifier", f"nli:{nli_model}", tmp=tmp_path, extra_env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    con = duckdb.connect(str(store), read_only=True)
    claims = con.execute("SELECT supported, model_prob, model_supported, model_window FROM claims").fetchall()
    assert claims and all(p is not None and 0.0 <= p <= 1.0 and w for _, p, _, w in claims)
    assert all(s == (p >= 0.5) for _, p, s, _ in claims)
    per_answer = con.execute(
        "SELECT s.faithfulness_model, avg(c.model_supported::DOUBLE) FROM samples s JOIN claims c "
        "USING (run_id, setting_hash, question_id) GROUP BY ALL"
    ).fetchall()
    assert per_answer and all(a == pytest.approx(b) for a, b in per_answer)
    kappa, n = con.execute("SELECT verifier_kappa, verifier_claims FROM runs").fetchall()[0]
    assert n == len(claims)
    expected = cohen_kappa([(bool(s), bool(m)) for s, _, m, _ in claims])
    assert kappa == (pytest.approx(expected) if expected is not None else None)
    assert con.execute("SELECT sum(n_claims) FROM v_verifier_agreement").fetchall()[0][0] == len(claims)


@pytest.mark.parametrize("kind", ["missing", "no-label"])
def test_a_bad_verifier_is_a_one_line_error_before_any_sweep_work(
    tmp_path: Path, tiny_corpus: Path, tiny_questions: Path, kind: str
) -> None:
    from tests.test_cli import _fake_sweep_config, run

    store = tmp_path / "r.duckdb"
    config = _fake_sweep_config(tmp_path, tiny_corpus, tiny_questions, store)
    model = tmp_path / "nope" if kind == "missing" else tiny_classifier(tmp_path / "m", {0: "LABEL_0", 1: "LABEL_1"})
    env = {"CRIBSHEET_PLUGINS": "tests.fakes"}
    proc = run("sweep", "--config", str(config), "--verifier", f"nli:{model}", tmp=tmp_path, extra_env=env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "verifier model" in lines[0], proc.stderr
    assert not store.exists() and not list((tmp_path / "prefect").glob("*.db"))
