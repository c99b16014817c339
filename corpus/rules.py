"""The code version an index's vectors were made by (`IndexSpec.rules`): the source of the code that cuts
documents into chunks, sentences and units and embeds them, found by following names from a few roots, each
read as its syntax tree without docstrings or comments.

Why not whole modules: `corpus/text.py` also holds the stop words, normalisation and negations the metrics
and the answer-cache guard read, and `corpus/sentences.py` the query-time reader; a one-word edit there would
rebuild every index (CPU-days at 10 M documents) without changing one vector. Why not a hand-kept list:
a helper a root starts calling would be missed, and an incremental sync would mix vectors made by two
versions of it. The closure follows every name a definition uses (annotations included, so a chunker's
`Document` brings `section_at`) that is defined in, or imported from, a `corpus` module, through
re-exports to the definition.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from pathlib import Path

RULE_ROOTS = (
    "corpus.chunk:SentenceChunker",
    "corpus.index_batch:embed_batch",
    "corpus.table:indexed_text",
    "corpus.models:Chunk",
    "corpus.embed:SentenceTransformerEmbedder",
)
"""Where the rules start: the chunker, the batch step that chunks, lays out (`indexed_text`, `Chunk.heading`)
and embeds (chunk vectors, contextual span pooling, sentence and unit rows), and the bundled embedder's
adapter (its pooling, normalisation, token counts and query vectors). A plugin embedder's code is outside
`corpus`: its name and weights are in the build spec, its source is not."""
NOT_RULES = frozenset(
    {
        "corpus.weights:weights_fingerprint",  # the weights' digest, in the spec as `embedder_weights`
        "corpus.errors:CribsheetError",
        "corpus.index_batch:document_coverage",  # the report's coverage, no vector
        "corpus.table:DocCoverage",
    }
)
"""Definitions the closure reaches that shape no vector: not followed."""
_CORPUS = Path(__file__).resolve().parent


def rules_version(root: Path | None = None) -> str:
    """sha256 over the rule definitions (`rule_sources`): what an index's chunks, units and vectors were cut
    and embedded by. `root`: the folder holding the `corpus` package (default: this one's).
    """
    h = hashlib.sha256()
    for name, source in sorted(rule_sources(root).items()):
        h.update(f"{name}\x1f{source}\x1e".encode())
    return h.hexdigest()[:16]


def rule_sources(root: Path | None = None, roots: Iterable[str] = RULE_ROOTS) -> dict[str, str]:
    """`module:name` -> source (unparsed, docstrings and comments gone) of every definition reached from
    `roots`, `NOT_RULES` left out.
    """
    package = (root / "corpus") if root is not None else _CORPUS
    modules: dict[str, _Module] = {}
    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        ref = todo.pop()
        if ref in found or ref in NOT_RULES:
            continue
        module_name, _, qualname = ref.partition(":")
        module = modules.get(module_name) or modules.setdefault(module_name, _Module(package, module_name))
        nodes = module.definitions(qualname)
        if not nodes and qualname in module.imports:  # a re-export: follow it to where it is defined
            todo.append(module.imports[qualname])
            continue
        if not nodes:
            raise LookupError(f"{ref}: no such definition in {module.path} (a rule root was renamed?)")
        found[ref] = "\n".join(ast.unparse(node) for node in nodes)
        for node in nodes:
            todo += module.references(node)
    return found


class _Module:
    """One `corpus` module's syntax tree: its top-level definitions and what its names are imported from."""

    def __init__(self, package: Path, name: str) -> None:
        relative = Path(*name.split(".")[1:])
        path = package / relative.with_suffix(".py")
        self.path = path if path.exists() else package / relative / "__init__.py"
        self.name = name
        self.tree = _without_docstrings(ast.parse(self.path.read_text(encoding="utf-8")))
        self.imports = _corpus_imports(self.tree, name)

    def definitions(self, qualname: str) -> list[ast.stmt]:
        """The statements defining `qualname` (a top-level name, or `Class.member`)."""
        head, _, member = qualname.partition(".")
        nodes = [n for n in self.tree.body if head in _defines(n)]
        if member:
            nodes = [m for n in nodes if isinstance(n, ast.ClassDef) for m in n.body if member in _defines(m)]
        return nodes

    def references(self, node: ast.AST) -> list[str]:
        """`module:name` of each name `node` uses that this module defines or imports from a `corpus` module."""
        imports = self.imports | _corpus_imports(node, self.name)
        out = []
        for used in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)}):
            if used in imports:
                out.append(imports[used])
            elif any(used in _defines(top) for top in self.tree.body):
                out.append(f"{self.name}:{used}")
        return out


def _defines(node: ast.stmt) -> set[str]:
    """The names a top-level statement binds (a def, a class, an assignment)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _corpus_imports(node: ast.AST, module: str) -> dict[str, str]:
    """Local name -> `module:name` of each `from corpus... import` in `node` (relative imports resolved)."""
    out: dict[str, str] = {}
    for n in ast.walk(node):
        if not isinstance(n, ast.ImportFrom):
            continue
        source = n.module or ""
        if n.level:
            source = ".".join([*module.split(".")[: -n.level], *([source] if source else [])])
        if source.startswith("corpus."):
            out |= {(a.asname or a.name): f"{source}:{a.name}" for a in n.names}
    return out


def _without_docstrings(tree: ast.Module) -> ast.Module:
    """`tree` without bare string statements (docstrings, attribute docstrings): they shape no output."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            node.body = kept or [ast.Pass()]  # type: ignore[attr-defined]
    return tree
