"""The repository stands alone: its README, docs, package docstrings, comments and OVERVIEWs
and its examples point only to files of the repository.

A user who clones Tremula has none of the research notes it was built from, so "spec 3.5",
"§2.4" or a path into ``../shared/`` tells them nothing: a docstring that relies on a fact of
the real system states the fact and names its source (a PopLibs file or function, a PopART
class), and a Markdown file named anywhere is one of the repository's. Tests and
``tools/clients.py`` may still default to ``../shared/clients`` for client code, and so may
the README's description of those tests.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What must stand alone: the package, the examples, the README and the docs.
SCANNED = ("tremula", "examples", "README.md", "docs")
SUFFIXES = (".py", ".md")

#: A citation of a numbered section of a document outside the repository.
SECTION_CITATION = re.compile(r"\bspecs?\s+(?:sections?\s+)?\d+(?:\.\d+)*|§\s*\d", re.IGNORECASE)
#: A path into the reference material beside the repository (client code excepted).
SHARED_PATH = re.compile(r"(?:\.\./)?\bshared/(?!clients\b)[\w.-]+|\.\./shared\b(?!/clients\b)")
#: A Markdown file named in the text.
MARKDOWN_NAME = re.compile(r"(?<![\w/.*-])([\w./*-]*[\w-]+\.md)\b")


def _files() -> list[Path]:
    out: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
    return out


def _repository_markdown() -> tuple[set[str], set[str]]:
    """Every Markdown file of the repository, by path from the root and by base name."""
    paths = {
        p.relative_to(ROOT).as_posix()
        for p in ROOT.rglob("*.md")
        if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
    }
    return paths, {p.rsplit("/", 1)[-1] for p in paths}


def _offences(path: Path, text: str, md_paths: set[str], md_names: set[str]) -> list[str]:
    where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in ((SECTION_CITATION, "section citation"), (SHARED_PATH, "path")):
            out += [f"{where}:{number}: {what} {m.group(0)!r}" for m in pattern.finditer(line)]
        for m in MARKDOWN_NAME.finditer(line):
            name = m.group(1)
            local = (path.parent / name).resolve()
            known = (
                name in md_paths
                or local.is_file()
                or ("/" not in name and name in md_names)
                or ("*" in name and any(ROOT.glob(name)))
            )
            if not known:
                out.append(f"{where}:{number}: Markdown file {name!r} is not in the repository")
    return out


def test_no_citation_of_documents_outside_the_repository() -> None:
    md_paths, md_names = _repository_markdown()
    files = _files()
    assert len(files) > 100, "the scan found too few files: is the tree laid out as expected?"
    offences = []
    for path in files:
        offences += _offences(path, path.read_text(encoding="utf-8"), md_paths, md_names)
    assert not offences, (
        "state the fact and name its real source (a PopLibs file or function, a PopART "
        "class) instead of citing a document the repository does not ship:\n" + "\n".join(offences)
    )


@pytest.mark.parametrize(
    "line",
    [
        '"""Block products on the AMP (ConvPartial1x1Out estimator, spec 3.5)."""',
        '# ---- reduction of partials (PopLibs\' ReduceAdd, spec 3.6 "Reduce") ----',
        "Estimators follow spec section 3.4.",
        '"""Spec 3.6\'s estimate, plus zeroing."""',
        "the bucket accounting of §2.4",
        "(``shared/spec/popsparse-paper-method.md`` 2)",
        "see ../shared/DESIGN.md",
        "## Semantics (`host-embedding.md`)",
    ],
)
def test_each_kind_of_outside_citation_is_caught(line: str) -> None:
    md_paths, md_names = _repository_markdown()
    assert _offences(ROOT / "tremula" / "x.py", line, md_paths, md_names)


@pytest.mark.parametrize(
    "line",
    [
        "PopLibs' ConvPartial1x1Out estimator (``poplin/PerformanceEstimation.hpp``)",
        "by default `../shared/clients` beside the repository",
        "the optimizer spec of the table",
        "return [TensorSpec(specs[0].shape, specs[0].dtype)]",
        "see `benchmarks/RESULTS.md`, `OVERVIEW.md` and `tremula/libs/*/OVERVIEW.md`",
        "Python 3.10 must stay supported (see section PopSparse)",
    ],
)
def test_what_the_repository_may_say(line: str) -> None:
    md_paths, md_names = _repository_markdown()
    assert not _offences(ROOT / "tremula" / "x.py", line, md_paths, md_names)
