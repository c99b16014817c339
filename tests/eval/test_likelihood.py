"""The likelihood verifier (`--verifier likelihood`): features from the generator's prompt log-probabilities,
a fitted card, the answer's verdict and each claim's, stored with the method and its validity. The engine here
is a fake language model (`tests.fakes.copy_logprobs`) that finds a word likely when it appeared earlier in the
prompt, so an answer copied from its passages is likelier with them than without."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from corpus.errors import CribsheetError
from eval.faithfulness.likelihood import (
    AnswerItem,
    LikelihoodCard,
    LikelihoodConfig,
    LikelihoodVerifier,
    claim_tokens,
    load_card,
    token_features,
)
from tests.fakes import ScoringGenerator


def card(tmp_path: Path, generator: str = "fake", **over: object) -> Path:
    """A card whose documentation model uses one feature: supported when the passages raise the answer's words
    (mean PMI above 1)."""
    model: dict[str, object] = {
        "variant": "likelihood",
        "features": ["pmi_mean"],
        "mean": [0.0],
        "scale": [1.0],
        "coef": [2.0],
        "intercept": -2.0,
        "threshold": 0.5,
        "tune_cases": 2,
        "tune_sha256": "0" * 64,
        "cv_balanced_accuracy": 0.7,
        "validity": {"balanced_accuracy": 0.74, "auroc": 0.8, "n": 50, "split": "test", "sets": []},
    }
    path = tmp_path / "card.json"
    path.write_text(json.dumps({"generator": generator, "models": {"documentation": model | over}}))
    return path


def verifier(tmp_path: Path, **over: object) -> tuple[LikelihoodVerifier, ScoringGenerator]:
    from eval.prompt import PromptLayout

    engine = ScoringGenerator()
    config = LikelihoodConfig(model=str(card(tmp_path, **over)))
    return LikelihoodVerifier(config, engine, PromptLayout(engine.tokenizer).render, None), engine


def test_features_are_the_mean_low_percentile_and_minimum_of_likelihood_and_pmi() -> None:
    got = token_features([-1.0, -2.0, -3.0], [-4.0, -2.0, -3.5])
    assert got["lp_mean"] == pytest.approx(-2.0) and got["lp_min"] == -3.0
    assert got["lp_p10"] == pytest.approx(-2.8)  # numpy's linear quantile of [-3, -2, -1] at 0.1
    assert got["pmi_mean"] == pytest.approx((3.0 + 0.0 + 0.5) / 3) and got["pmi_min"] == 0.0
    assert got["pmi_p10"] == pytest.approx(0.1) and got["log_tokens"] == pytest.approx(math.log(3))
    assert got["lq_mean"] == pytest.approx(-9.5 / 3) and got["pmi_neg"] == 0.0
    assert token_features([-1.0, -1.0], [-0.5, -2.0])["pmi_neg"] == 0.5  # one token the passages made less likely


def test_an_answer_the_passages_hold_is_supported_and_an_invented_one_is_not(tmp_path: Path) -> None:
    v, engine = verifier(tmp_path)
    context = "[1] Rivers: The Danube flows through Vienna. Then Budapest."
    items = [
        AnswerItem(
            "Which cities?", context, "The Danube flows through Vienna.", ["The Danube flows through Vienna."], [True]
        ),
        AnswerItem(
            "Which cities?", context, "She crosses Lyon near Marseille.", ["She crosses Lyon near Marseille."], [True]
        ),
        AnswerItem("Which cities?", context, "I don't know.", [], []),  # no claims: not scored at all
    ]
    held, invented, none = v.score_answers(items)
    assert held.supported is True and invented.supported is False
    assert held.probability is not None and invented.probability is not None
    assert held.probability > 0.9 > 0.2 > invented.probability
    # "The" is in the system prefix too, so the passages raise four of its five words.
    assert held.features is not None and held.features["pmi_mean"] == pytest.approx(4.5 * 4 / 5)
    assert invented.features is not None and invented.features["pmi_mean"] == pytest.approx(0.0)
    assert none.supported is None and none.claims == [] and none.features is None
    assert engine.scored == 4  # two prompts (with and without the passages) per answer with claims


def test_each_claim_is_scored_on_its_own_tokens(tmp_path: Path) -> None:
    v, _ = verifier(tmp_path)
    context = "[1] Rivers: The Danube flows through Vienna."
    answer = "The Danube flows through Vienna. It also crosses Lyon."
    (got,) = v.score_answers(
        [AnswerItem("Q?", context, answer, ["The Danube flows through Vienna.", "It also crosses Lyon."], [True, True])]
    )
    first, second = got.claims
    assert first.supported is True and second.supported is False  # the answer as a whole is in between
    assert first.features is not None and second.features is not None
    assert first.features["pmi_mean"] > second.features["pmi_mean"]


def test_claim_tokens_are_the_tokens_overlapping_the_claim_or_none_when_it_was_rewritten() -> None:
    spans = [(0, 3), (4, 10), (11, 16), (16, 17)]  # "The Danube flows." split as words and the full stop
    assert claim_tokens("The Danube flows.", "Danube flows.", spans) == [1, 2, 3]
    assert claim_tokens("The Danube flows.", "The river flows", spans) is None


def test_a_missing_malformed_or_foreign_card_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(CribsheetError, match="no such file"):
        load_card(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"generator": "x"}')
    with pytest.raises(CribsheetError, match="not a card"):
        load_card(str(bad))
    with pytest.raises(CribsheetError, match="unknown or lists of unequal length"):
        load_card(str(card(tmp_path, features=["pmi_mean", "entropy"], mean=[0, 0], scale=[1, 1], coef=[1, 1])))
    no_default = tmp_path / "kinds.json"
    no_default.write_text(json.dumps({"generator": "g", "models": {}}))
    with pytest.raises(CribsheetError, match="no model for its default kind documentation"):
        load_card(str(no_default))
    from eval.prompt import PromptLayout

    engine = ScoringGenerator()
    config = LikelihoodConfig(model=str(card(tmp_path, generator="smollm2-135m-instruct")))
    with pytest.raises(CribsheetError, match="fitted on smollm2-135m-instruct's likelihoods, not qwen's"):
        LikelihoodVerifier(config, engine, PromptLayout(engine.tokenizer).render, "/models/qwen")
    # The same model named by its hub id is the same generator.
    LikelihoodVerifier(config, engine, PromptLayout(engine.tokenizer).render, "HuggingFaceTB/SmolLM2-135M-Instruct")


def test_the_packaged_card_is_fitted_for_the_bundled_generator_and_states_its_validity() -> None:
    from eval.engine.bundled_models import SMOLLM2_NAME

    packaged = load_card(None)
    assert packaged.generator == SMOLLM2_NAME  # the folder smollm2_dir() converts the bundled GGUF into
    assert set(packaged.models) == set(packaged.validity) == {"documentation", "encyclopedia"}
    assert all(v.split == "test" and v.n >= 100 for v in packaged.validity.values())
    assert all(m.cv_balanced_accuracy > 0.5 and m.tune_cases >= 200 for m in packaged.models.values())
    assert (
        len(packaged.digest()) == 64
        and packaged.digest()
        == LikelihoodCard.model_validate_json(json.dumps(packaged.model_dump(mode="json"))).digest()
    )


def test_a_sweep_with_the_likelihood_verifier_stores_verdicts_features_method_cost_and_validity(
    tmp_path: Path, tiny_corpus: Path, tiny_questions: Path
) -> None:
    """`cribsheet sweep ... --verifier likelihood:CARD` end to end (the scoring fake, hash embedder)."""
    import duckdb

    from tests.test_cli import _fake_sweep_config, run

    store = tmp_path / "r.duckdb"
    config = _fake_sweep_config(tmp_path, tiny_corpus, tiny_questions, store)
    config.write_text(
        config.read_text().replace("{name: fake}", "{name: fake-scoring}") + "corpus_kind: documentation\n"
    )
    path = card(tmp_path)
    env = {"CRIBSHEET_PLUGINS": "tests.fakes"}
    args = ["--compression", "none", "--verifier", f"likelihood:{path}"]
    proc = run("sweep", "--config", str(config), *args, tmp=tmp_path, extra_env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    digest = load_card(str(path)).digest()
    assert (
        f"faithful (model): likelihood card {digest[:12]} (documentation model), balanced accuracy 0.74" in proc.stdout
    )
    # The rule checker's figures were measured with the bundled embedder, not this run's hash fake.
    unmeasured = "rule checker (with embedder hash; its figures are for minilm-l6-v2), no measured validity"
    assert f"faithful: {unmeasured} on documentation answers" in proc.stdout
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute(
        "SELECT faithfulness_model, faithfulness_method, faithfulness_model_s, n_claims FROM samples"
    ).fetchall()
    scored = [r for r in rows if r[3]]
    assert scored and all(m in (0.0, 1.0) and s is not None and s >= 0 for m, _, s, _ in scored)
    assert {meth for _, meth, _, _ in rows} == {
        f"likelihood card {digest[:12]} (documentation model), threshold 0.5000"
    }
    claims = con.execute("SELECT model_prob, model_supported, pmi_mean, lik_mean, pmi_p10 FROM claims").fetchall()
    assert claims and all(p is not None and (p >= 0.5) == s and pmi is not None for p, s, pmi, _, _ in claims)
    # The extracting fake copies its first passage: the passages make those words likelier.
    assert all(pmi > 0 for _, _, pmi, _, _ in claims)
    stored = json.loads(con.execute("SELECT faithfulness_validity FROM runs").fetchall()[0][0])
    assert stored["faithfulness_model"]["balanced_accuracy"] == 0.74
    assert stored["faithfulness_model"]["corpus_kind"] == "documentation"
    fingerprints = json.loads(con.execute("SELECT model_fingerprints FROM runs").fetchall()[0][0])
    assert fingerprints[f"verifier:likelihood:{path}#documentation"] == digest
    run_id = con.execute("SELECT run_id FROM runs").fetchall()[0][0]
    con.close()
    # What the sweep stored is what the gate reads: the bar refuses, naming the card and its figure.
    from eval.gate.policy import GatePolicy, MetricRule
    from eval.gate.run import faithfulness_validity
    from eval.store import DuckDBStore

    policy = GatePolicy(metrics=[MetricRule(name="faithfulness_model", margin=0.05, min_validity=0.9)])
    _, refusal, notes = faithfulness_validity(DuckDBStore(store, read_only=True), [run_id], policy)
    assert refusal is not None and refusal.startswith(
        f"faithfulness_model cannot decide: likelihood card {digest[:12]} (documentation model) reads 0.74 on "
        "documentation answers"
    )
    proc = run("report", "--store", str(store), "--out", str(tmp_path / "report"), tmp=tmp_path, extra_env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = "".join(p.read_text() for p in (tmp_path / "report").glob("*.md"))
    assert f"faithfulness_model: likelihood card {digest[:12]} (documentation model), balanced accuracy 0.74" in written
    assert f"faithfulness: {unmeasured}" in written
    page = (tmp_path / "report" / "report.html").read_text()
    assert f"faithfulness_model: likelihood card {digest[:12]} (documentation model), balanced accuracy 0.74" in page


def test_a_generator_that_scores_no_tokens_cannot_run_the_likelihood_verifier() -> None:
    from eval.faithfulness.verifier import VERIFIERS, VerifierConfig, VerifierDeps

    spec = VerifierConfig(name="likelihood").spec()
    with pytest.raises(CribsheetError, match="does not score prompt tokens"):
        VERIFIERS.build(spec, VerifierDeps(scorer=None))


def test_an_answer_too_long_for_the_engine_gets_no_verdict_and_the_others_are_scored(tmp_path: Path) -> None:
    v, engine = verifier(tmp_path)
    context = "[1] Rivers: The Danube flows through Vienna."
    short = AnswerItem("Q?", context, "The Danube flows.", ["The Danube flows."], [True])
    long_answer = " ".join(["Danube"] * 400) + "."
    long = AnswerItem("Q?", context, long_answer, [long_answer], [True])
    prompt_words = len(engine.tokenizer.encode(v.logprobs.render(context, "Q?")))
    engine.max_model_len = prompt_words + 50  # the short answer fits, the long one does not
    got_short, got_long = v.score_answers([short, long])
    assert got_short.supported is True and got_long.supported is None and got_long.features is None
    assert engine.scored == 2  # neither of the long answer's prompts was sent


def test_a_threshold_other_than_the_cards_has_no_validity_figure(tmp_path: Path) -> None:
    from eval.faithfulness.validity import validity_of

    path = str(card(tmp_path))
    method, figure = validity_of("faithfulness_model", {"name": "likelihood", "model": path}, "documentation", "hash")
    assert figure is not None and figure.balanced_accuracy == 0.74 and method.startswith("likelihood card ")
    assert validity_of("faithfulness_model", {"name": "likelihood", "model": path}, "encyclopedia", "hash")[1] is None
    moved = {"name": "likelihood", "model": path, "threshold": 0.3}
    method, figure = validity_of("faithfulness_model", moved, "documentation", "hash")
    assert figure is None and method.endswith("(documentation model) at threshold 0.3 (not the card's)")


def test_a_figure_measured_with_another_embedder_is_not_this_runs(tmp_path: Path) -> None:
    """The rule checker's verdicts (and a card's `rules` feature, which is them) move with the embedder: a run
    with another embedder gets no validity figure from the packaged ones, and so cannot decide on them."""
    from eval.faithfulness.validity import rules_embedder, validity_of

    assert rules_embedder() == load_card(None).embedder == "minilm-l6-v2"  # the sweep's default embedder
    method, figure = validity_of("faithfulness", None, "documentation", "minilm-l6-v2")
    assert method == "rule checker" and figure is not None and figure.balanced_accuracy > 0.5
    figure_of_rules = figure
    method, figure = validity_of("faithfulness", None, "documentation", "sentence-transformers:/models/bge")
    assert figure is None
    assert method == "rule checker (with embedder sentence-transformers:/models/bge; its figures are for minilm-l6-v2)"
    # The same model under another name is the same embedder.
    from corpus.embed import bundled_minilm_path

    for same in ("sentence-transformers", f"sentence-transformers:{bundled_minilm_path()}"):
        assert validity_of("faithfulness", None, "documentation", same) == ("rule checker", figure_of_rules)
    packaged = {"name": "likelihood"}  # both kind models use the `rules` feature
    assert all("rules" in m.features for m in load_card(None).models.values())
    assert validity_of("faithfulness_model", packaged, "documentation", "minilm-l6-v2")[1] is not None
    method, figure = validity_of("faithfulness_model", packaged, "documentation", "hash")
    assert figure is None
    assert method.endswith("(documentation model) (with embedder hash; its figures are for minilm-l6-v2)")
    # A card whose `rules` model records no embedder has no figure: nobody knows what its checker read.
    unrecorded = load_card(None).model_copy(update={"embedder": None})
    assert unrecorded.digest() == load_card(None).digest()  # the digest is the fitted models'
    path = tmp_path / "unrecorded.json"
    path.write_text(unrecorded.model_dump_json())
    method, figure = validity_of("faithfulness_model", {"name": "likelihood", "model": str(path)}, "documentation",
                                 "minilm-l6-v2")  # fmt: skip
    assert figure is None and method.endswith("(with embedder minilm-l6-v2; its figures record no embedder)")


def test_a_card_without_the_rules_feature_keeps_its_figure_under_any_embedder(tmp_path: Path) -> None:
    from eval.faithfulness.validity import validity_of

    path = tmp_path / "card.json"
    path.write_text(json.dumps(json.loads(card(tmp_path).read_text()) | {"embedder": "minilm-l6-v2"}))
    figure = validity_of("faithfulness_model", {"name": "likelihood", "model": str(path)}, "documentation", "hash")[1]
    assert figure is not None and figure.balanced_accuracy == 0.74  # pmi_mean alone: no embedder in its features


def test_the_kind_model_a_card_scores_with_is_part_of_the_run_identity(tmp_path: Path) -> None:
    """corpus_kind is out of the config hash (it shapes no row of the rule checker), but with a likelihood card
    it picks the model whose verdicts fill faithfulness_model: another kind's run reuses nothing."""
    from eval.run.identity import model_fingerprints, shared_models
    from eval.settings import SweepConfig

    two = json.loads(card(tmp_path).read_text())
    two["models"]["encyclopedia"] = two["models"]["documentation"] | {"threshold": 0.9}
    path = tmp_path / "two.json"
    path.write_text(json.dumps(two))
    base = SweepConfig(index_path=Path("i"), questions_path=Path("q"), store_path=Path("s"))
    with_card = SweepConfig.model_validate(base.model_dump() | {"verifier": {"name": "likelihood", "model": str(path)}})

    def shared(kind: str | None) -> dict[str, str]:
        config = with_card.model_copy(update={"corpus_kind": kind})
        return shared_models(model_fingerprints(config, config.grid.expand()))

    assert shared("documentation") != shared("encyclopedia")
    assert shared(None) == shared("documentation")  # no kind: the card's default model
    plain = [base.model_copy(update={"corpus_kind": k}) for k in ("documentation", "encyclopedia")]
    assert len({json.dumps(shared_models(model_fingerprints(c, c.grid.expand()))) for c in plain}) == 1
