"""A project file (`cribsheet.yaml`): one corpus, its questions, a grid, a gate policy and where the results
go; `cribsheet init` writes one from what it finds in a corpus, `cribsheet run` does everything it says.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from corpus.errors import CribsheetError
from corpus.sources import SourceConfig
from eval.settings import CompressionSpec, GridConfig, SweepConfig

if TYPE_CHECKING:
    from eval.gate.policy import ShippedSetting

PROJECT_FILE = "cribsheet.yaml"
SIGNATURE = "# written by cribsheet init; sha256 of the lines above: "
"""The last line of a file `init` wrote: an edit changes the lines above it, so `init` refuses to overwrite."""


DEFAULT_POLICY = Path("default")
"""What a project's `policy:` says to mean the release policy that ships with cribsheet."""


def packaged_policy(name: str = "gate.yaml") -> Path:
    """A policy that ships with cribsheet: the repository's `policies/`, installed as the package
    `cribsheet_policies` (so a project file finds it from any folder, a wheel install too).
    """
    from importlib.resources import files

    try:
        return Path(str(files("cribsheet_policies") / name))
    except ModuleNotFoundError:
        raise CribsheetError(
            "the packaged gate policies (cribsheet_policies) are not installed: reinstall cribsheet (make install)"
        ) from None


class QuestionsPlan(BaseModel):
    """Where the questions come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path | None = None
    """A JSONL question file (id, question, answers, optional gold_doc_ids); None: generate them."""
    generate: int = Field(default=300, ge=1)
    """Questions generated from the corpus's structure when `path` is None."""
    limit: int | None = Field(default=None, ge=1)
    """Sweep only the first N questions (None: all); a sequential gate goes on over the rest, batch by batch."""


class Project(BaseModel):
    """What `cribsheet run` does; paths are relative to the project file's folder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    corpus: SourceConfig
    dataset: Path | None = None
    """A folder the bundled dataset (Wikipedia leads, FanOutQA questions) is written into before each run;
    the demo's project files point their corpus and questions into it. None for your own corpus."""
    questions: QuestionsPlan = Field(default_factory=QuestionsPlan)
    grid: GridConfig = Field(default_factory=lambda: default_grid())
    policy: Path = DEFAULT_POLICY
    """Gate policy: `default`, the release policy that ships with cribsheet (`policies/gate.yaml`), or a YAML
    file; its `sequential:` block, when present, gates each candidate sequentially too."""
    workdir: Path = Path("runs/project")
    """Index, results store, questions and report go here."""
    embedder: str = "minilm-l6-v2"
    generator: dict[str, Any] = Field(default_factory=dict)
    """The generator's config (`name`, `model`, ...); empty: the bundled SmolLM2 on vLLM. A `model` written as
    a path (starting with `/`, `./`, `../` or `~`) is a folder relative to this file; any other is a hub id,
    read from the local Hugging Face cache."""
    probe_questions: int = Field(default=SweepConfig.model_fields["probe_questions"].default, ge=0)
    """Questions whose latency every setting is timed on (the policy's `min_probes` needs as many)."""
    probe_repeats: int = Field(default=SweepConfig.model_fields["probe_repeats"].default, ge=1)
    """Blocks per probe question: each times every setting once and each baseline twice (the A/A floor)."""
    verifier: str | None = None
    """A model verifier of faithfulness beside the rule checker: `likelihood` (the generator's own
    likelihoods through the packaged card), `likelihood:CARD` (a card file, relative to this file), or
    `nli:MODEL`; its verdicts are `samples.faithfulness_model`. None: the rule checker alone."""
    corpus_kind: Literal["documentation", "encyclopedia"] | None = None
    """What the corpus is, for the faithfulness methods' validity figures printed beside faithfulness
    (None: encyclopedia when `dataset:` writes the bundled one, else documentation)."""
    sequential: list[str] | None = None
    """Candidates gated sequentially against their twins when the policy has a `sequential:` block (None: every
    candidate); not read with `shipped:`, where every candidate is gated sequentially against the shipped one."""
    candidates: list[str] | None = None
    """The settings you mean to ship: a FAIL of one of them makes `run` exit 1, a FAIL of another is reported
    and read as decided (None: every candidate is one)."""
    shipped: str | None = None
    """The setting in production today (a setting of the grid): every other setting of the run is gated
    against it too, with Holm's adjustment across them, and `run` ends with one recommendation (ship one,
    keep shipping this one, or undecided) and exits on it. None: each compressed setting against its twin only.
    Written as the name or as `{setting: NAME, run: RUN_ID}` (`run` optional); this field holds the name."""
    shipped_run: str | None = None
    """The run `shipped` shipped on (the mapping form's `run`): `run` then also gates tonight's rows of it
    against that run's, the nightly watch (`eval.gate.watch_shipped`). None: not watched."""

    @model_validator(mode="before")
    @classmethod
    def _split_shipped(cls, data: Any) -> Any:
        """`shipped: {setting: NAME, run: RUN_ID}` split into `shipped` (the name, as every reader takes it)
        and `shipped_run`; a plain name passes as it is.
        """
        if not isinstance(data, Mapping) or not isinstance(data.get("shipped"), Mapping):
            return data
        given = data["shipped"]
        unknown = sorted(str(k) for k in given if k not in ("setting", "run"))
        if unknown or not isinstance(given.get("setting"), str):
            what = f"unknown key(s) {', '.join(unknown)}" if unknown else "it names no setting"
            raise ValueError(f"shipped: a setting name or {{setting: NAME, run: RUN_ID}}; {what}")
        if data.get("shipped_run") is not None:
            raise ValueError("shipped: give its run as shipped.run or as shipped_run, not both")
        return {**data, "shipped": given["setting"], "shipped_run": given.get("run")}

    @property
    def shipped_setting(self) -> ShippedSetting | None:
        """The setting in production and the run it shipped on, which `run` watches (None: no run given)."""
        from eval.gate.policy import ShippedSetting

        if self.shipped is None or self.shipped_run is None:
            return None
        return ShippedSetting(setting=self.shipped, run=self.shipped_run)

    @classmethod
    def load(cls, path: Path) -> Project:
        """The project file at `path`, every path resolved against its folder (whatever the working folder and
        whether the file exists yet) and `policy: default` to the packaged policy; errors name the file and field.
        """
        from flows.config import load_config

        project = load_config(cls, Path(path), {})
        base = Path(path).resolve().parent

        def here(p: Path) -> Path:
            return Path(os.path.normpath(base / p.expanduser()))  # an absolute `p` stays itself

        questions = project.questions.model_copy(
            update={"path": here(project.questions.path) if project.questions.path else None}
        )
        return project.model_copy(
            update={
                "corpus": project.corpus.model_copy(update={"path": here(project.corpus.path)}),
                "dataset": here(project.dataset) if project.dataset else None,
                "questions": questions,
                "policy": packaged_policy() if project.policy == DEFAULT_POLICY else here(project.policy),
                "workdir": here(project.workdir),
                "generator": project.generator | _model_here(project.generator.get("model"), here),
                "verifier": _verifier_here(project.verifier, here),
            }
        )

    @property
    def index_path(self) -> Path:
        """The LanceDB index `run` syncs the corpus into."""
        return self.workdir / "index.lancedb"

    def sweep_config(self, questions: Path) -> SweepConfig:
        """The sweep `run` runs over the question file `questions`: the project's grid, models and latency
        phase, its index and results store in the workdir.
        """
        return SweepConfig.model_validate(
            {
                "index_path": self.index_path,
                "questions_path": questions,
                "store_path": self.workdir / "results.duckdb",
                "embedder": self.embedder,
                "grid": self.grid.model_dump(),
                "limit": self.questions.limit,
                "probe_questions": self.probe_questions,
                "probe_repeats": self.probe_repeats,
                **({"generator": self.generator} if self.generator else {}),
                **({"verifier": self.verifier_config()} if self.verifier else {}),
                "corpus_kind": self.corpus_kind or ("encyclopedia" if self.dataset else "documentation"),
            }
        )

    def verifier_config(self) -> dict[str, Any]:
        """`verifier:` as the sweep's verifier config: `likelihood`, `likelihood:CARD` or `nli:MODEL`."""
        name, sep, model = (self.verifier or "").partition(":")
        if sep and not model.strip() or not sep and name != "likelihood":
            raise CribsheetError(f"verifier: '{self.verifier}': write likelihood, likelihood:CARD or nli:MODEL")
        return {"name": name, **({"model": model} if model else {})}


def _model_here(model: object, here: Callable[[Path], Path]) -> dict[str, str]:
    """`{"model": folder}` when a generator's `model` is written as a path (resolved by `here`), else nothing:
    a hub id ("org/name") never starts with `/`, `./`, `../` or `~`.
    """
    if isinstance(model, str) and model.startswith(("/", "./", "../", "~")):
        return {"model": str(here(Path(model)))}
    return {}


def _verifier_here(verifier: str | None, here: Callable[[Path], Path]) -> str | None:
    """`likelihood:CARD` with the card resolved against the project file's folder; others as written (an
    nli model written as a path is resolved the same way).
    """
    name, sep, model = (verifier or "").partition(":")
    if verifier is None or not sep or not model.startswith(("/", "./", "../", "~")) and name != "likelihood":
        return verifier
    return f"{name}:{here(Path(model))}"


def default_shipped(grid: GridConfig) -> str | None:
    """The setting `init` proposes as shipped: the uncompressed one at the grid's largest top-k (the first
    such when other axes vary); None when the grid has no uncompressed setting.
    """
    plain = [s for s in grid.expand() if s.compressor == "none"]
    return max(plain, key=lambda s: s.top_k).name if plain else None


def default_grid() -> GridConfig:
    """No compression and the pruned family at top-3 and top-8, LLMLingua 4x at top-3 (at top-8 it alone
    takes minutes a question set on a 2-core CPU).
    """
    return GridConfig(
        compressions=[
            CompressionSpec(),
            CompressionSpec(compressor="pruned", target_ratio=4.0),
            CompressionSpec(compressor="pruned-auto", target_ratio=8.0),
            CompressionSpec(compressor="llmlingua", target_ratio=4.0, top_ks=[3]),
        ],
        top_ks=[3, 8],
    )


class Detected(BaseModel):
    """What `init` found in a corpus."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    counts: dict[str, int]
    """Files by extension (a folder), or the file's format."""
    extensions: dict[str, str] = Field(default_factory=dict)
    """Suffix -> reader over the defaults (a Sphinx tree's `.txt` sources as reStructuredText)."""
    exclude: list[str] = Field(default_factory=list)
    """Patterns of files not to read: the `_sources` copy beside a built Sphinx HTML tree."""


def detect(path: Path) -> Detected:
    """What a corpus holds: file counts by extension (a folder) or its format (a file), the extension mapping
    to read it with (a Sphinx source tree's `.txt` files as reStructuredText) and what not to read (a built
    Sphinx HTML tree keeps its sources in `_sources/` beside the pages: one copy is read, the pages, which hold
    what autodoc filled in).
    """
    path = Path(path)
    if not path.exists():
        raise CribsheetError(f"{path}: no such folder or file")
    if path.is_file():
        if path.suffix.lower() not in (".jsonl", ".parquet"):
            raise CribsheetError(f"{path}: a corpus file is .jsonl or .parquet (a folder tree is read file by file)")
        return Detected(counts={path.suffix.lower(): 1})
    files = [p for p in path.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.parts)]
    counts = Counter(p.suffix.lower() for p in files)
    exclude = sorted(
        f"{(d.relative_to(path).as_posix() + '/') if d != path else ''}_sources/*"
        for d in {p.parent for p in files if p.suffix.lower() == ".html"}
        if (d / "_sources").is_dir()
    )
    kept = [p for p in files if not any(fnmatch.fnmatchcase(p.relative_to(path).as_posix(), e) for e in exclude)]
    extensions: dict[str, str] = {}
    if any(p.suffix.lower() == ".txt" for p in kept) and (any(path.rglob("conf.py")) or _looks_like_rst(kept)):
        extensions[".txt"] = "rst"  # Sphinx keeps its reStructuredText sources as .txt
    return Detected(counts=dict(counts.most_common()), extensions=extensions, exclude=exclude)


def _looks_like_rst(files: list[Path]) -> bool:
    """Whether the first .txt files read as reStructuredText (a title underlined with = or -, directives)."""
    import re

    for file in sorted(p for p in files if p.suffix.lower() == ".txt")[:20]:
        text = file.read_text(errors="replace")[:5000]
        if re.search(r"^\S.*\n[=\-~^]{3,}\s*$", text, re.MULTILINE) or ".. " in text:
            return True
    return False


def render(corpus: Path, found_here: Detected, questions: Path | None, out: Path) -> str:
    """The project file's text, every field commented, signed on its last line."""
    rel = Path(_relative(corpus, out.parent))
    name = corpus.stem or "project"
    found = ", ".join(f"{n} {ext or '(none)'}" for ext, n in list(found_here.counts.items())[:8])
    ext_lines = "".join(f"    {k}: {v}\n" for k, v in found_here.extensions.items()) or "    {}\n"
    exclude = "[" + ", ".join(f'"{e}"' for e in found_here.exclude) + "]"
    q = f"  path: {_relative(questions, out.parent)}\n" if questions else "  path: null\n"
    generate, probes = QuestionsPlan().generate, Project.model_fields["probe_questions"].default
    grid = _grid_yaml(default_grid())
    shipped = _shipped_yaml(default_shipped(default_grid()))
    body = f"""# cribsheet project: `cribsheet run {out.name}` indexes the corpus, generates or reads the questions,
# sweeps the grid, times every setting's latency back to back, gates each compressed setting against its
# uncompressed twin and writes the report. Paths are relative to this file. Found: {found}.
corpus:
  path: {rel}             # a folder tree (Markdown, reStructuredText, HTML, PDF), a .jsonl or a .parquet
  extensions:              # file suffix -> reader, over the defaults (.txt as reStructuredText for Sphinx)
{ext_lines}  exclude: {exclude}        # files not read (fnmatch); a built Sphinx tree's _sources/ copy of its pages
questions:
{q}  generate: {generate}            # with no path: questions written from the corpus's structure (FAQ headings, API
                           # definitions, section leads), each with the sentence that answers it
grid:                      # what is compared: every compression at every top-k unless it names its own
{grid}policy: {DEFAULT_POLICY}            # the release policy cribsheet ships (margins, confidence, the latency rule);
                           # your own: a YAML file (start from a copy of cribsheet's policies/gate.yaml),
                           # relative to this file; a `sequential:` block in it gates sequentially too
candidates: null           # the settings you mean to ship, e.g. [pruned-4x-k8-hybrid-dense]: a FAIL of one of
                           # them exits 1, others are reported (null: every candidate)
{shipped}workdir: runs/{name}       # index, results store (results.duckdb), questions and report go here
embedder: minilm-l6-v2     # the bundled all-MiniLM-L6-v2
generator: {{}}              # empty: the bundled SmolLM2-135M on vLLM; e.g. {{name: vllm, model: /models/qwen}}
verifier: likelihood       # faithfulness from the generator's own likelihoods beside the rule checker (about 1 s an
                           # answer on a 2-core CPU, in the answers phase; 0.68 balanced accuracy on held-out
                           # documentation answers against the rule checker's 0.63, docs/faithfulness.md); null:
                           # the rule checker alone; nli:MODEL: a trained verifier, where you have one
corpus_kind: documentation # whose validity figures are printed beside faithfulness (documentation, encyclopedia)
probe_questions: {probes}        # questions every setting's latency is timed on (the policy's min_probes)
"""
    return body + SIGNATURE + hashlib.sha256(body.encode()).hexdigest() + "\n"


def _shipped_yaml(name: str | None) -> str:
    """The `shipped:` lines of the project file: `run` gates every other setting against it and ends with one
    recommendation; written with the run it shipped on, `run` also watches it nightly.
    """
    if name is None:
        return ""
    return (
        f"shipped: {name}   # what is in production today (replace it with yours): every other\n"
        "                           # setting is gated against it (Holm across them; context_token_recall reports\n"
        "                           # but does not decide there: fewer passages hold fewer words by construction)\n"
        "                           # and run ends with one recommendation (ship X, keep shipping this, or\n"
        "                           # undecided) and exits on it; delete the line to gate each compressed setting\n"
        "                           # against its twin only; written {setting: NAME, run: <run id>}, run also\n"
        "                           # watches it nightly: tonight's rows of it against that run's\n"
    )


_COMPRESSION_NOTES = {
    "none": "the baseline each candidate is gated against",
    "pruned": "query-aware unit selection on index-time vectors",
    "pruned-auto": "pruned, budget by relevance (at most its ratio)",
    "llmlingua": "query-agnostic LLMLingua",
}


def _grid_yaml(grid: GridConfig) -> str:
    """`grid`'s lines of the project file: its top-ks, then one commented flow mapping per compression."""
    specs = []
    for c in grid.compressions:
        fields = [f"compressor: {c.compressor}"]
        fields += [f"target_ratio: {c.target_ratio:g}"] if c.target_ratio != 1.0 else []
        fields += [f"top_ks: {json.dumps(c.top_ks)}"] if c.top_ks is not None else []
        specs.append("{" + ", ".join(fields) + "}")
    width = max(len(spec) for spec in specs)
    lines = [f"  top_ks: {json.dumps(grid.top_ks)}", "  compressions:"]
    for spec, c in zip(specs, grid.compressions, strict=True):
        note = _COMPRESSION_NOTES.get(c.compressor)
        lines.append(f"    - {spec:<{width}}  # {note}" if note else f"    - {spec}")
    return "".join(line + "\n" for line in lines)


def _relative(path: Path, base: Path) -> str:
    return os.path.relpath(Path(path).resolve(), Path(base).resolve())


def edited_by_hand(path: Path) -> bool:
    """Whether an existing project file was changed since `init` wrote it (or was not written by it)."""
    text = Path(path).read_text(encoding="utf-8")
    body, _, last = text.rstrip("\n").rpartition("\n")
    if not last.startswith(SIGNATURE):
        return True
    return hashlib.sha256((body + "\n").encode()).hexdigest() != last.removeprefix(SIGNATURE).strip()


def exit_code(
    decisions: Sequence[Any],
    sequential: Sequence[Any] = (),
    named: Sequence[str] | None = None,
    recommendation: Any | None = None,
) -> int:
    """With a `recommendation` (the project names `shipped:`): its exit code, 0 for ship or keep, 2 for
    undecided. Otherwise 1 when a named candidate failed (`named` None: every candidate is named), 2 when a
    candidate could not decide (or none was gated), else 0. A candidate's sequential decision, when it has
    one, stands for it: it is the fixed-n decision carried on until decided.
    """
    if recommendation is not None:
        return int(recommendation.exit_code)
    final = {d.candidate: d.decision for d in decisions} | {d.candidate: d.decision for d in sequential}
    if not final:
        return 2
    if any(v == "fail" and (named is None or c in named) for c, v in final.items()):
        return 1
    return 2 if "undecided" in final.values() else 0
