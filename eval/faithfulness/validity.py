"""How far a faithfulness figure can be trusted: each method's measured validity per corpus kind.

`faithfulness` is always the rule checker's; `faithfulness_model` is the sweep's model verifier's (the run's
`verifier`). A method's validity is its balanced accuracy (and AUROC) against two readers' labels on held-out
answers of one corpus kind (documentation, encyclopedia), measured by benchmarks/faithfulness_likelihood.py:
the rule checker's figures are packaged in cards/validity.json, a likelihood card carries its own, and an NLI
model named by path has none (nobody here measured it). The leaderboard, the report and the gate print this
line beside the figure; a policy may let a faithfulness metric decide only with a bar (`min_validity`) the
method's figure for the run's corpus kind meets.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from corpus.errors import CribsheetError
from eval.faithfulness.likelihood import Validity, load_card

KINDS = ("documentation", "encyclopedia")
"""Corpus kinds with validity figures: a documentation tree, encyclopedia articles."""
FAITHFULNESS_METRICS = ("faithfulness", "faithfulness_model")


def _packaged() -> dict[str, Any]:
    return dict(json.loads(resources.files("eval.faithfulness").joinpath("cards", "validity.json").read_text()))


def rules_validity() -> dict[str, Validity]:
    """The rule checker's packaged figures per corpus kind."""
    return {k: Validity.model_validate(v) for k, v in _packaged().get("rules", {}).items()}


def rules_embedder() -> str | None:
    """The embedder (registry name) the rule checker's packaged figures were measured with."""
    name = _packaged().get("embedder")
    return str(name) if name else None


def embedder_model(name: str) -> str:
    """What an embedder's registry name loads: the resolved model folder of a sentence-transformers embedder
    (`minilm-l6-v2`, `sentence-transformers` and `sentence-transformers:<the bundled folder>` are one model),
    else the name itself (another registered embedder, or one not registered here).
    """
    from corpus.embed import EMBEDDERS, bundled_minilm_path

    try:
        config = EMBEDDERS.spec(name).config
    except CribsheetError:  # not registered in this process: only its name can be compared
        return name
    if "model" not in config:
        return name
    model = config["model"] or str(bundled_minilm_path())
    return str(Path(model).expanduser().resolve()) if Path(model).expanduser().exists() else str(model)


def _other_embedder(measured: str | None, embedder: str) -> str | None:
    """The method-name suffix when the run's embedder is not the one a figure was measured with (or the figure
    does not record one), else None.
    """
    if measured is None:
        return f"with embedder {embedder}; its figures record no embedder"
    if embedder == measured or embedder_model(embedder) == embedder_model(measured):
        return None
    return f"with embedder {embedder}; its figures are for {measured}"


def validity_of(
    metric: str, verifier: dict[str, Any] | None, kind: str | None, embedder: str
) -> tuple[str, Validity | None]:
    """The method behind `metric` in a run with the stored `verifier` config, and its validity figure for the
    corpus `kind` (None: not measured for that kind, no kind known, no verifier ran, or measured with another
    embedder than the run's `embedder`, its registry name: the rule checker's verdicts depend on it, and so
    does a card's `rules` feature).
    """
    if metric == "faithfulness":
        other = _other_embedder(rules_embedder(), embedder)
        if other:
            return f"rule checker ({other})", None
        return "rule checker", rules_validity().get(kind or "")
    if not verifier:
        return "no verifier ran", None
    name = verifier.get("name", "nli")
    if name == "likelihood":
        card = load_card(verifier.get("model"))
        used, model = card.model(kind)
        name = f"likelihood card {card.digest()[:12]} ({used} model)"
        threshold = verifier.get("threshold")
        if threshold is not None and threshold != model.threshold:  # its figures hold at the card's threshold only
            return f"{name} at threshold {threshold} (not the card's)", None
        other = _other_embedder(card.embedder, embedder) if "rules" in model.features else None
        if other:  # its `rules` feature is the rule checker's verdicts, which the embedder moves
            return f"{name} ({other})", None
        # A kind's figure is of its own model on its own answers: another kind's model has none here.
        return name, model.validity if used == kind else None
    return f"{name}:{verifier.get('model')}", None


def validity_line(metric: str, verifier: dict[str, Any] | None, kind: str | None, embedder: str) -> str:
    """One line for people: the method and how far to trust it on this corpus kind."""
    method, figure = validity_of(metric, verifier, kind, embedder)
    if figure is None:
        where = f"on {kind} answers" if kind else "(the corpus kind is not known)"
        return f"{metric}: {method}, no measured validity {where}"
    auroc = f", AUROC {figure.auroc:.2f}" if figure.auroc is not None else ""
    return (
        f"{metric}: {method}, balanced accuracy {figure.balanced_accuracy:.2f}{auroc} against readers' labels "
        f"on {figure.n} held-out {kind} answers"
    )
