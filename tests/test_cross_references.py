"""Every "chapter N" and "Lab X.Y" a notebook or a book page mentions points to something that exists.

- "Lab X.Y" must be a lab of ``course_lib.exercises.LABS`` (labs being written elsewhere may be
  named before their folder exists);
- a chapter of a lab ("Lab 0.1, chapter 4", "chapter 3 of Lab 0.2", "chapter 2 of the next lab",
  or a bare "chapter 3" in a notebook, meaning its own lab) must be a notebook of that lab's folder
  in ``solutions/``: a lab whose folder does not exist yet is "a later lab", without a chapter;
- "chapter k of N" in a notebook's header must count the lab's notebooks;
- a book page has no lab of its own, so a bare "chapter N" there is ambiguous and not allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from course_lib.exercises import LABS

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
BOOK = ROOT / "book"

LAB_BY_NUMBER = {info.number: lab for lab, info in LABS.items()}
LAB_ORDER = sorted(LABS, key=lambda lab: tuple(int(part) for part in LABS[lab].number.split(".")))

# One pass over the text, references in order. Alternatives, tried left to right at each position:
#   Lab 0.1, chapter 4 / Lab 0.1 (chapter 4 / Lab 0.1 chapters 2 and 3 / {ref}`Lab 0.1 <lab01-...>` (chapter 4
#   chapter 3 of Lab 0.2 / chapter 2 of the next lab / chapter 1 of 5 / chapters 2 and 3 / chapter 3
REFERENCE = re.compile(
    r"Lab (?P<lab>\d\.\d+)(?:'s)?(?: <[\w-]+>`)?(?:,? \(?chapters? (?P<lab_chapters>\d+(?: and \d+)?))?"
    r"|[Cc]hapters? (?P<chapters>\d+(?: and \d+)?)"
    r"(?: of (?:Lab (?P<of_lab>\d\.\d+)|(?P<next>the next lab)|(?P<total>\d+)\b))?"
)


def _notebook_texts() -> list[tuple[str, str, str]]:
    """(where, its lab, text) for every cell of every solution notebook."""
    texts = []
    for path in sorted(SOLUTIONS.glob("lab*/*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        for index, cell in enumerate(notebook.cells):
            texts.append((f"{path.relative_to(ROOT)} cell {index}", path.parent.name, cell.source))
    return texts


def _book_texts() -> list[tuple[str, str | None, str]]:
    return [(str(path.relative_to(ROOT)), None, path.read_text())
            for path in sorted(BOOK.glob("**/*.md")) if "_build" not in path.parts]


def _chapters_of(lab: str) -> set[int]:
    return {int(path.stem.split("_", 1)[0]) for path in (SOLUTIONS / lab).glob("*.ipynb")}


def _next_lab(lab: str) -> str | None:
    index = LAB_ORDER.index(lab)
    return LAB_ORDER[index + 1] if index + 1 < len(LAB_ORDER) else None


def _problems(where: str, own_lab: str | None, text: str) -> list[str]:
    problems = []

    def require_chapters(lab: str | None, chapters: str, said: str) -> None:
        if lab is None:
            problems.append(f"{where}: {said!r} does not say which lab (a book page has no lab of its own)")
            return
        if not (SOLUTIONS / lab).is_dir():
            problems.append(f"{where}: {said!r} names a chapter of {lab}, which has no notebooks yet: "
                            "call it a later lab, without a chapter")
            return
        for number in (int(part) for part in chapters.split(" and ")):
            if number not in _chapters_of(lab):
                problems.append(f"{where}: {said!r}: {lab} has no chapter {number} "
                                f"(chapters: {sorted(_chapters_of(lab))})")

    for match in REFERENCE.finditer(text):
        said = match.group(0)
        named = match.group("lab") or match.group("of_lab")
        if named is not None and named not in LAB_BY_NUMBER:
            problems.append(f"{where}: {said!r}: there is no Lab {named} (labs: {sorted(LAB_BY_NUMBER)})")
            continue
        if match.group("lab"):
            if match.group("lab_chapters"):
                require_chapters(LAB_BY_NUMBER[named], match.group("lab_chapters"), said)
        elif match.group("total"):
            if own_lab is not None and int(match.group("total")) != len(_chapters_of(own_lab)):
                problems.append(f"{where}: {said!r}, but {own_lab} has {len(_chapters_of(own_lab))} chapters")
            require_chapters(own_lab, match.group("chapters"), said)
        elif match.group("of_lab"):
            require_chapters(LAB_BY_NUMBER[named], match.group("chapters"), said)
        elif match.group("next"):
            following = _next_lab(own_lab) if own_lab else None
            if following is None:
                problems.append(f"{where}: {said!r} but there is no next lab")
            else:
                require_chapters(following, match.group("chapters"), said)
        else:
            require_chapters(own_lab, match.group("chapters"), said)
    return problems


def test_the_pattern_reads_every_form():
    lab1, lab2 = "lab01-text-to-tensors", "lab02-prefill-vs-decode"
    assert not _problems("x", lab2, "Lab 0.1, chapter 4 and chapter 3 of Lab 0.1; Lab 0.1 (chapter 3)")
    assert not _problems("x", lab1, "chapter 2 of the next lab; chapters 2 and 3; chapter 1 of 5")
    assert not _problems("x", None, "{ref}`Lab 0.2 <lab02-prefill-vs-decode>` (chapter 5) has you")
    assert _problems("x", lab1, "chapter 9")
    assert _problems("x", lab1, "chapter 1 of 4")
    assert _problems("x", lab1, "Lab 0.9 covers it")
    assert _problems("x", None, "as chapter 2 explains")
    missing = next((lab for lab in LABS if not (SOLUTIONS / lab).is_dir()), None)
    if missing is not None:
        assert _problems("x", lab1, f"Lab {LABS[missing].number}, chapter 1")
        assert not _problems("x", lab1, f"Lab {LABS[missing].number} covers it")


def _documents() -> dict[str, list[tuple[str, str | None, str]]]:
    documents: dict[str, list[tuple[str, str | None, str]]] = {}
    for where, own_lab, text in _notebook_texts() + _book_texts():
        documents.setdefault(where.split(" cell ")[0], []).append((where, own_lab, text))
    return documents


@pytest.mark.parametrize("document", sorted(_documents()))
def test_cross_references_point_to_notebooks_that_exist(document):
    problems = [problem for where, own_lab, text in _documents()[document]
                for problem in _problems(where, own_lab, text)]
    assert not problems, "\n".join(problems)
