"""Extraction coverage on real documentation trees, one per format, all from packages:

- reStructuredText: the Django 5.2.19 sdist's docs/ (PyPI; Sphinx sources written as .txt; BSD-3-Clause)
- Markdown: Node.js 18 API docs from Debian's nodejs-doc (MIT)
- HTML: the Python 3.11 documentation from Debian's python3.11-doc (PSF licence)
- PDF: the LaTeX package manuals of Debian's texlive-latex-recommended-doc (mostly LPPL)
- DocBook XHTML (every page opens with an XML declaration): Debian's maint-guide (GPL-2+)
- Javadoc HTML: the API docs of Debian's libjcdf-java-doc (LGPL)
- Doxygen HTML: the API docs of Debian's libjsoncpp-doc (MIT / public domain)

For each tree: index it through the product path (folder source -> registered extractor -> chunker -> real
MiniLM embedder -> LanceDB), then report the corpus-wide coverage (words that reached the index / words the
parsers found), every file accounted for (indexed, or skipped with a reason), and how many facts of a
frozen list are found verbatim in the index. The facts (`benchmarks/data/extraction_facts.json`) sit inside
directives, lists, tables or notes; they were taken from the raw sources by a different method than the
extractors (regular expressions over the markup; `pdftotext` from poppler for PDFs), so the extractors were
not built around them. Matching normalises Unicode (NFKC, e.g. ligatures) and whitespace only.

    python benchmarks/extraction.py                 # fetch the trees once (pip / apt), index, report
    python benchmarks/extraction.py --build-facts --formats docbook   # freeze one format's facts (pdf needs pdftotext)
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FACTS_FILE = Path(__file__).resolve().parent / "data" / "extraction_facts.json"
PER_FORMAT = 60

TREES = {
    "rst": {"package": "django==5.2.19 (PyPI sdist)", "extensions": {".txt": "rst"}, "suffixes": {".txt", ".rst"}},
    "markdown": {"package": "nodejs-doc=18.20.4+dfsg-1~deb12u3 (Debian)", "extensions": {}, "suffixes": {".md"}},
    "html": {"package": "python3.11-doc=3.11.2-6+deb12u9 (Debian)", "extensions": {}, "suffixes": {".html"}},
    "pdf": {
        "package": "texlive-latex-recommended-doc=2022.20230122-3 (Debian)",
        "extensions": {},
        "suffixes": {".pdf"},
    },
    "docbook": {"package": "maint-guide=1.2.53 (Debian)", "extensions": {}, "suffixes": {".html"}},
    "javadoc": {"package": "libjcdf-java-doc=1.2.4+dfsg-1 (Debian)", "extensions": {}, "suffixes": {".html"}},
    "doxygen": {"package": "libjsoncpp-doc=1.9.5-4 (Debian)", "extensions": {}, "suffixes": {".html"}},
}

HTML_TREES = {  # format -> (package, folder of the pages inside it, page filter)
    "html": ("python3.11-doc=3.11.2-6+deb12u9", "usr/share/doc/python3.11/html"),
    "docbook": ("maint-guide=1.2.53", "usr/share/doc/maint-guide/html"),
    "javadoc": ("libjcdf-java-doc=1.2.4+dfsg-1", "usr/share/doc/libjcdf-java-doc/api"),
    "doxygen": ("libjsoncpp-doc=1.9.5-4", "usr/share/doc/libjsoncpp-doc"),
}


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"error: {' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")


def _deb(name: str, downloads: Path) -> Path:
    """The extracted contents of a Debian package (apt-get download, dpkg-deb -x; nothing is installed)."""
    found = sorted(downloads.glob(f"{name.split('=')[0]}_*.deb"))
    if not found:
        pinned = subprocess.run(["apt-get", "download", name], cwd=downloads, capture_output=True, text=True)
        if pinned.returncode:  # the mirror moved on (or back): take the version it has, and say so
            _run(["apt-get", "download", name.split("=")[0]], downloads)
        found = sorted(downloads.glob(f"{name.split('=')[0]}_*.deb"))
        if pinned.returncode:
            print(f"note: {name} is not on this mirror; measured {found[0].name} instead", file=sys.stderr)
    target = downloads / (found[0].stem + ".x")
    if not target.exists():
        _run(["dpkg-deb", "-x", str(found[0]), str(target)], downloads)
    return target


def fetch(fmt: str, trees: Path, downloads: Path) -> Path:
    """The tree of `fmt`, fetched from its package on first use."""
    root = trees / fmt
    if root.is_dir() and any(root.iterdir()):
        return root
    downloads.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{fmt}-", dir=trees.parent if trees.parent.exists() else None))
    if fmt == "rst":
        sdist = sorted(downloads.glob("django-5.2.19.tar.gz"))
        if not sdist:
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "django==5.2.19",
                    "-d",
                    str(downloads),
                ],
                downloads,
            )
            sdist = sorted(downloads.glob("django-5.2.19.tar.gz"))
        with tarfile.open(sdist[0]) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith("django-5.2.19/docs/") and m.isfile()]
            tar.extractall(tmp, members=members, filter="data")
        shutil.move(str(tmp / "django-5.2.19" / "docs"), str(tmp / "tree"))
    elif fmt == "markdown":
        src = _deb("nodejs-doc=18.20.4+dfsg-1~deb12u3", downloads) / "usr/share/doc/nodejs/api"
        (tmp / "tree").mkdir()
        for f in sorted(src.iterdir()):
            if f.name.endswith(".md.gz"):
                import gzip

                (tmp / "tree" / f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
            elif f.suffix == ".md":
                shutil.copy(f, tmp / "tree" / f.name)
    elif fmt in HTML_TREES:
        package, folder = HTML_TREES[fmt]
        src = _deb(package, downloads) / folder
        for f in src.rglob("*.html"):  # pages only: _sources/ holds the reStructuredText sources again
            if "_sources" not in f.parts and not f.is_symlink():
                (tmp / "tree" / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, tmp / "tree" / f.relative_to(src))
    else:
        src = _deb("texlive-latex-recommended-doc=2022.20230122-3", downloads) / "usr/share/doc/texlive-doc"
        for f in src.rglob("*.pdf"):
            if not f.is_symlink():
                (tmp / "tree" / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, tmp / "tree" / f.relative_to(src))
    trees.mkdir(parents=True, exist_ok=True)
    (tmp / "tree").rename(root)
    shutil.rmtree(tmp, ignore_errors=True)
    return root


def normalise(text: str) -> str:
    """NFKC (ligatures, compatibility forms) and collapsed whitespace: what matching ignores."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


# ---- the frozen fact list (built once, by methods independent of the extractors) -----------------------

_PROSE = re.compile(r"^[A-Za-z][A-Za-z0-9 ,;'()/.-]{30,150}$")
_RST_DIRECTIVE = re.compile(
    r"^(\s*)\.\. (note|warning|versionadded|versionchanged|deprecated|function|class|method|attribute|setting|"
    r"glossary|admonition|seealso|describe|fieldlookup|templatetag|templatefilter|django-admin)::"
)


def _rst_candidates(root: Path) -> list[tuple[str, str, str]]:
    out = []
    for f in sorted(root.rglob("*.txt")):
        directive, indent = None, 0
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            m = _RST_DIRECTIVE.match(line)
            if m:
                directive, indent = m.group(2), len(m.group(1))
                continue
            if directive and line.strip() and len(line) - len(line.lstrip()) <= indent:
                directive = None
            if directive and _PROSE.match(line.strip()) and not line.strip().startswith(":"):
                out.append((str(f.relative_to(root)), f"directive {directive}", line.strip()))
    return out


def _md_candidates(root: Path) -> list[tuple[str, str, str]]:
    out = []
    for f in sorted(root.rglob("*.md")):
        fenced = False
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if fenced:
                continue
            item = re.match(r"^\s*[*-] (.+)$", line)
            if item and _PROSE.match(item.group(1).strip()):
                out.append((f.name, "list item", item.group(1).strip()))
            if line.strip().startswith("|") and not re.match(r"^\s*\|[\s:|-]+\|\s*$", line):
                for cell in line.strip().strip("|").split("|"):
                    if re.match(r"^[A-Za-z][A-Za-z0-9 ,;'()/.-]{14,150}$", cell.strip()):
                        out.append((f.name, "table cell", cell.strip()))
    return out


def _html_candidates(root: Path, sphinx: bool = True) -> list[tuple[str, str, str]]:
    out = []
    for f in sorted(root.rglob("*.html")):
        page = f.read_text(encoding="utf-8", errors="replace")
        if sphinx:  # the page's own text, not the sidebar
            start = page.find('role="main"')
            end = page.find('class="sphinxsidebar"', start)
        else:  # other generators: the body, less navigation bars
            page = re.sub(
                r"<nav\b.*?</nav>|<div class=\"(?:navheader|navfooter|topNav|bottomNav)\".*?</div>",
                " ",
                page,
                flags=re.S,
            )
            start, end = page.find("<body"), page.find("</body>")
        body = page[start : end if end > start else len(page)] if start >= 0 else ""
        for tag in ("td", "li", "dd"):
            for raw in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", body, re.S):
                if f"<{tag}" in raw:
                    continue  # nested: the inner element is the fact
                text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())
                text = re.sub(r" ([,.;)])", r"\1", text).replace("( ", "(")
                if _PROSE.match(text):
                    out.append((str(f.relative_to(root)), f"{tag} (table cell / list / definition)", text))
    return out


def _pdf_candidates(root: Path) -> list[tuple[str, str, str]]:
    out = []
    for f in sorted(root.rglob("*.pdf")):
        proc = subprocess.run(["pdftotext", "-enc", "UTF-8", str(f), "-"], capture_output=True, text=True)
        for line in proc.stdout.splitlines():
            line = normalise(line)
            if len(line.split()) >= 8 and _PROSE.match(line) and not line.endswith("-"):
                out.append((str(f.relative_to(root)), "body text (pdftotext)", line))
    return out


def build_facts(trees: Path, downloads: Path, formats: list[str]) -> None:
    """Derive and freeze PER_FORMAT facts per format, at most 3 per file, in a stable pseudo-random order."""
    if "pdf" in formats and not shutil.which("pdftotext"):
        sys.exit("error: pdftotext not found (apt-get install poppler-utils)")

    def generic_html(root: Path) -> list[tuple[str, str, str]]:
        return _html_candidates(root, sphinx=False)

    makers = {"rst": _rst_candidates, "markdown": _md_candidates, "html": _html_candidates, "pdf": _pdf_candidates}
    makers |= dict.fromkeys(("docbook", "javadoc", "doxygen"), generic_html)
    facts: dict[str, object] = json.loads(FACTS_FILE.read_text()) if FACTS_FILE.exists() else {}
    facts["_about"] = __doc__.split("\n\n")[2].replace("\n", " ") if __doc__ else ""
    for fmt in formats:  # only the formats asked for are (re)frozen; the others keep their facts
        make = makers[fmt]
        cands = sorted(
            set(make(fetch(fmt, trees, downloads))), key=lambda c: hashlib.sha256("|".join(c).encode()).hexdigest()
        )
        chosen, per_file = [], {}
        for file, where, fact in cands:
            if per_file.get(file, 0) < 3 and fact not in {c["fact"] for c in chosen}:
                chosen.append({"file": file, "where": where, "fact": fact})
                per_file[file] = per_file.get(file, 0) + 1
            if len(chosen) == PER_FORMAT:
                break
        facts[fmt] = {"package": TREES[fmt]["package"], "facts": chosen}
        print(f"{fmt}: {len(cands)} candidates, {len(chosen)} frozen")
    FACTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    FACTS_FILE.write_text(json.dumps(facts, indent=1, ensure_ascii=False) + "\n")
    print(FACTS_FILE)


# ---- the benchmark ---------------------------------------------------------------------------------


def measure(fmt: str, root: Path, work: Path, facts: list[dict[str, str]]) -> dict[str, float | int]:
    from corpus.chunk import SentenceChunker
    from corpus.embed import SentenceTransformerEmbedder
    from corpus.index import open_table, sync_index
    from corpus.sources import SkipLog, SourceConfig, extractor_versions, iter_documents

    config = SourceConfig(path=root, extensions=TREES[fmt]["extensions"])
    emb = SentenceTransformerEmbedder()
    skips = SkipLog()
    start = time.perf_counter()
    report = sync_index(
        iter_documents(config, skips),
        SentenceChunker(count_tokens=emb.count_tokens),
        emb,
        work / f"{fmt}.lancedb",
        skipped=skips.items,
        extractors=extractor_versions(config),
    )
    seconds = time.perf_counter() - start
    rows = open_table(work / f"{fmt}.lancedb").to_arrow().select(["doc_id", "position", "text"]).to_pylist()
    docs: dict[str, list[tuple[int, str]]] = {}
    for r in rows:
        docs.setdefault(r["doc_id"], []).append((r["position"], r["text"]))
    by_doc = {d: normalise(" ".join(t for _, t in sorted(parts))) for d, parts in docs.items()}
    found = 0
    missed = []
    for fact in facts:
        doc = by_doc.get(fact["file"], "")
        if normalise(fact["fact"]) in doc or any(normalise(fact["fact"]) in t for t in by_doc.values()):
            found += 1
        else:
            missed.append(fact)
    files = [f for f in root.rglob("*") if f.is_file() and f.suffix.lower() in TREES[fmt]["suffixes"]]
    skipped = {s.source for s in report.skipped}
    unaccounted = [f for f in files if str(f) not in skipped and f.relative_to(root).as_posix() not in docs]
    kinds = {k: sum(s.kind == k for s in report.skipped) for k in ("filtered", "empty", "failed")}
    for m in missed[:3]:
        print(f"  missed ({fmt}) {m['file']}: {m['fact'][:90]}")
    return {
        "files": len(files),
        "documents": report.n_documents,
        "chunks": report.n_chunks,
        "coverage": report.coverage or 0.0,
        "low_coverage_docs": len(report.low_coverage),
        "skipped_empty": kinds["empty"],
        "skipped_failed": kinds["failed"],
        "silently_empty": len(unaccounted),
        "facts": len(facts),
        "facts_found": found,
        "seconds": seconds,
    }


def main() -> None:
    from eval.engine.bundled_models import default_cache_dir

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", type=Path, default=default_cache_dir() / "doctrees")
    parser.add_argument("--downloads", type=Path, default=default_cache_dir() / "downloads")
    parser.add_argument("--build-facts", action="store_true")
    parser.add_argument("--formats", nargs="*", default=list(TREES))
    args = parser.parse_args()
    from corpus.runtime import quiet_offline_env

    quiet_offline_env()
    if args.build_facts:
        build_facts(args.trees, args.downloads, args.formats)
        return
    frozen = json.loads(FACTS_FILE.read_text())
    work = Path(tempfile.mkdtemp(prefix="cribsheet-extraction-"))
    results = {
        fmt: measure(fmt, fetch(fmt, args.trees, args.downloads), work, frozen[fmt]["facts"]) for fmt in args.formats
    }
    print(
        f"{'format':<10}{'files':>7}{'docs':>7}{'chunks':>8}{'coverage':>10}{'low':>5}{'empty':>7}"
        f"{'failed':>8}{'silent':>8}{'facts':>9}{'s':>7}"
    )
    for fmt, r in results.items():
        print(
            f"{fmt:<10}{r['files']:>7}{r['documents']:>7}{r['chunks']:>8}{r['coverage']:>10.4f}"
            f"{r['low_coverage_docs']:>5}{r['skipped_empty']:>7}{r['skipped_failed']:>8}{r['silently_empty']:>8}"
            f"{r['facts_found']:>5}/{r['facts']:<3}{r['seconds']:>7.0f}"
        )
    print("packages: " + "; ".join(f"{fmt}: {TREES[fmt]['package']}" for fmt in results))
    figures: dict[str, float | int] = {}
    for fmt, r in results.items():
        figures[f"{fmt}_coverage_ratio"] = round(float(r["coverage"]), 4)
        figures[f"{fmt}_facts_found_ratio"] = round(r["facts_found"] / max(r["facts"], 1), 4)
        figures[f"{fmt}_silently_empty"] = r["silently_empty"]
        figures[f"{fmt}_documents"] = r["documents"]
        figures[f"{fmt}_skipped_failed"] = r["skipped_failed"]
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
