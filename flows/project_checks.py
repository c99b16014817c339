"""What `cribsheet run` checks before it works: everything it will read, each problem in one line naming the
project file and the field (and the file the field names), so a bad policy, question file or model path
fails in a second instead of after the index build and the sweep.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from corpus.errors import CribsheetError
from corpus.load import read_jsonl
from corpus.models import Question
from eval.faithfulness.verifier import check_verifier
from eval.gate import GatePolicy
from eval.run.provenance import faithfulness_bar
from eval.settings import SweepConfig
from flows.config import validation_message
from flows.project import Project
from flows.project_questions import QUESTIONS_FILE


def check_settings(project: Project, project_file: Path) -> GatePolicy:
    """The setting names the project gives (`sequential`, `candidates`, `shipped`), the gate policy (read by the gate's
    own loader; its `shipped` block, when it has one, must name the project's `shipped:` setting), the sweep's
    components and every model it will load; returns the policy. Reads no corpus and writes nothing.
    """
    where = Path(project_file)
    names = {s.name for s in project.grid.expand()}
    for field_name in ("sequential", "candidates"):
        unknown = sorted(set(getattr(project, field_name) or []) - names)
        if unknown:
            raise CribsheetError(f"{where}: {field_name}: {', '.join(unknown)} is no setting of the grid")
    if project.shipped is not None and project.shipped not in names:
        raise CribsheetError(
            f"{where}: shipped: {project.shipped} is no setting of the grid; name the one in production today, "
            f"e.g. {sorted(names)[0]}"
        )
    try:
        policy = GatePolicy.load(project.policy)
    except CribsheetError as exc:
        raise CribsheetError(f"{where}: policy: {exc}") from None
    if project.shipped is not None and policy.shipped is not None and policy.shipped.setting != project.shipped:
        raise CribsheetError(
            f"{where}: shipped: {project.shipped}, but its policy {project.policy} watches "
            f"{policy.shipped.setting} as shipped; name one setting in production in both"
        )
    try:
        config = project.sweep_config(project.questions.path or project.workdir / QUESTIONS_FILE)
    except ValidationError as exc:
        raise CribsheetError(f"{where}: {validation_message(exc)}") from None
    except CribsheetError as exc:  # a field sweep_config reads (`verifier:`) names itself; the file is added
        raise CribsheetError(f"{where}: {exc}") from None
    for field_name, model in model_refs(config):
        _check_model(where, field_name, model)
    if config.verifier is not None:
        try:
            check_verifier(config.verifier)
        except CribsheetError as exc:
            raise CribsheetError(f"{where}: verifier: {exc}") from None
        if config.verifier.name == "likelihood" and config.generator.name == "vllm":
            from eval.engine.bundled_models import SMOLLM2_NAME
            from eval.faithfulness.likelihood import foreign_generator, load_card

            generator = config.generator.model or SMOLLM2_NAME  # the name, without converting the model
            mismatch = foreign_generator(load_card(config.verifier.model), config.verifier.model, generator)
            if mismatch:
                raise CribsheetError(f"{where}: verifier: {mismatch}")
    refusal = faithfulness_bar(config, policy)  # the gate would refuse it after the whole sweep
    if refusal:
        raise CribsheetError(f"{where}: policy: {refusal}")
    return policy


def model_refs(config: SweepConfig) -> list[tuple[str, str]]:
    """(field, model) for every model folder or hub id the sweep loads besides the bundled ones: the
    generator's `model` and the model of each reranker that names one (`cross-encoder:PATH`, `bi-encoder:PATH`).
    """
    from eval.rerank import RERANKERS

    refs = [("generator.model", config.generator.model)] if config.generator.model else []
    for ref in config.grid.rerankers:
        model = RERANKERS.spec(ref).config.get("model")
        if isinstance(model, str):
            refs.append((f"grid.rerankers ({ref})", model))
    return refs


def _check_model(where: Path, field_name: str, model: str) -> None:
    """Refuse a model that is neither a folder nor a hub id with a snapshot in the local cache (runs are
    offline: nothing is downloaded).
    """
    from corpus.weights import local_model

    if local_model(model) is not None:
        return
    as_path = model.startswith(("/", ".", "~"))
    raise CribsheetError(
        f"{where}: {field_name}: {model}: "
        + (
            "no such folder"
            if as_path
            else "no such folder here and no snapshot of this hub id in the local Hugging Face cache (runs are "
            "offline); a folder is written as a path, ./models/x"
        )
    )


def check_inputs(project: Project, project_file: Path) -> None:
    """The corpus exists and the question file, when the project gives one, reads as questions (the sweep's
    own reader, every line): run after the bundled dataset is written, before anything is indexed.
    """
    where = Path(project_file)
    corpus = project.corpus.path
    if not corpus.exists():
        raise CribsheetError(f"{where}: corpus.path: {corpus}: no such folder or file")
    if corpus.is_file() and corpus.suffix not in (".jsonl", ".parquet"):
        raise CribsheetError(f"{where}: corpus.path: {corpus}: a corpus file is .jsonl or .parquet")
    path = project.questions.path
    if path is None:
        return
    if not path.is_file():
        raise CribsheetError(f"{where}: questions.path: {path}: question file not found")
    seen: set[str] = set()
    count = 0
    try:
        for lineno, question in read_jsonl(path, Question):
            if question.id in seen:  # the store's key: found here, not as a constraint error after the sweep
                raise CribsheetError(f"{path}:{lineno}: duplicate question id '{question.id}'")
            seen.add(question.id)
            count += 1
    except CribsheetError as exc:  # InputFileError names the file and line
        raise CribsheetError(f"{where}: questions.path: {exc}") from None
    if count == 0:
        raise CribsheetError(f"{where}: questions.path: {path}: no questions in file")
