"""The bundled demo submissions that ``make demo`` and ``make demo-all`` grade.

Each demo student is a small spec, ``autograde/demo/<lab>/<student>.py``, whose file name names
the bug it carries (``buggy-merge-order.py``)::

    DESCRIPTION = "what the bug is and which exercises it should cost"
    BASE = "solution"                 # answer cells start from the reference answers...
    ANSWERS = {"encode": "def encode(...): ..."}   # ...except these (keyed by answer grade_id)
    WRITTEN = "blank"                 # optional: the written answers as released ("blank", the default),
                                      # or the model answers ("model"); ANSWERS may name one by its grade_id
    EXPECTED = {"01_tokenization": 18}             # autograded points it must score (asserted by the tests)
    EXPECTED = {"01_tokenization": {"auto": 23, "awaiting_ta": 3}}   # ...and the written answers' points
                                                   # that must await a TA (a number alone: none may)
    FILES = {"timestamp.txt": "..."}               # optional: other files of the hand-in, as text

A written answer (a Markdown cell a TA grades, ``course mark``) is never scored by the autograder: it
awaits a TA, or it is blank (as released, or emptied) and scores 0 with no TA work. So a spec says
both what the autograder must give and how many points must be left to a TA: ``correct`` (the model
answers) full marks of the test cells with every written answer awaiting a TA, ``blank`` 0 and none.

A demo student hands in the notebooks its ``EXPECTED`` names, like a student who submitted only the
chapters done so far (the others are graded as missing); with no ``EXPECTED`` (``correct``,
``blank``) it hands in every notebook of the lab. One bug per student, graded on the chapter it
lives in, keeps the demos and the pipeline tests fast as labs grow.

``make demo-all`` grades every demo student and compares each with its spec (``course grade
--demo-specs``): ``correct`` must score full marks, ``blank`` zero. ``make demo`` grades a small
class in minutes (``quick_demo_class``: per lab ``correct``, ``blank``, one buggy student and the
``written-*`` students on one short chapter, and the lab's ``attack-borrow-the-reference``), compared
with the same specs on the notebooks handed in. The test suite, which must stay fast, grades each lab's
``attack-borrow-the-reference`` and Lab 0.1's ``attack-read-secrets``
(``attack-*`` students are hostile code: borrowing the references, patching the checks, a fake
NeedsGPU, reading the hidden tests; their EXPECTED may be 0 or full marks). An attack that borrows
some answers and writes the others is also the suite's check that a lab's reference answers pass
under the grader.

``BASE = "release"`` starts from the untouched release stubs. A ``blank`` student (the release as
handed out) is always added. ``course release`` writes the submissions to
``autograde/demo_submissions/<student>/<lab>/<notebook>.ipynb`` from the release it just built,
and ``course release --check`` fails when they are stale.
"""

from __future__ import annotations

import copy
import re
import runpy
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograde.release import Difference
from course_lib.handin.notebooks import comparable_cells, is_written_answer, nbgrader_meta

DEMO_SPECS = Path("autograde") / "demo"
DEMO_SUBMISSIONS = Path("autograde") / "demo_submissions"
SOLUTION_REGION = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.MULTILINE)


@dataclass(frozen=True)
class Expected:
    """What one notebook of a demo student must come out as: the autograder's points, and the points of
    its written answers that await a TA."""

    auto: float
    awaiting_ta: float = 0.0

    @classmethod
    def read(cls, value, where: str) -> "Expected":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return cls(float(value))
        if isinstance(value, dict) and set(value) <= {"auto", "awaiting_ta"} and "auto" in value:
            return cls(float(value["auto"]), float(value.get("awaiting_ta", 0)))
        raise ValueError(f"{where}: EXPECTED values are points, or {{'auto': N, 'awaiting_ta': M}}; got {value!r}")


@dataclass
class DemoStudent:
    name: str
    description: str
    base: str = "solution"
    answers: dict[str, str] = field(default_factory=dict)
    expected: dict[str, Expected] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)   # other files handed in (timestamp.txt), by name
    written: str = "blank"     # the written answers: "blank" (as released) or "model" (the model answers)

    @property
    def is_attack(self) -> bool:
        return self.name.startswith("attack-")

    def hands_in(self, notebook_name: str) -> bool:
        """Whether this student's submission holds ``notebook_name`` (see the module docstring)."""
        return not self.expected or notebook_name in self.expected


def load_demo_students(specs_dir: Path) -> list[DemoStudent]:
    """The demo students of one lab (from its spec files), plus ``blank``."""
    students = []
    for spec_path in sorted(specs_dir.glob("*.py")) if specs_dir.is_dir() else []:
        spec = runpy.run_path(str(spec_path))
        base = spec.get("BASE", "solution")
        if base not in ("solution", "release"):
            raise ValueError(f"{spec_path}: BASE must be 'solution' or 'release', got {base!r}")
        files = dict(spec.get("FILES", {}))
        for name in files:
            if name != "timestamp.txt":
                raise ValueError(f"{spec_path}: FILES may hold timestamp.txt only (what a hand-in has besides "
                                 f"notebooks), got {name!r}")
        written = spec.get("WRITTEN", "blank")
        if written not in ("blank", "model"):
            raise ValueError(f"{spec_path}: WRITTEN must be 'blank' or 'model', got {written!r}")
        expected = {name: Expected.read(value, f"{spec_path}: EXPECTED[{name!r}]")
                    for name, value in dict(spec.get("EXPECTED", {})).items()}
        students.append(DemoStudent(spec_path.stem, spec.get("DESCRIPTION", ""), base,
                                    dict(spec.get("ANSWERS", {})), expected, files, written))
    if not any(student.name == "blank" for student in students):
        students.append(DemoStudent("blank", "the release as handed out: every answer still a stub", "release"))
    return students


def solution_answer(source: str) -> str:
    """The reference answer in a solution cell: the code between the SOLUTION markers, markers removed."""
    return SOLUTION_REGION.sub("", source).rstrip("\n")


def solution_cell(lab: str, notebook: str, grade_id: str, solutions: Path | None = None) -> str:
    """One answer cell of ``solutions/<lab>/<notebook>.ipynb`` as an honest student would write it:
    the reference with its SOLUTION marker lines removed (what the attack specs build on)."""
    import json

    from autograde.layout import find_repo_root

    path = (solutions or find_repo_root() / "solutions") / lab / f"{notebook}.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    source = next("".join(cell["source"]) for cell in cells
                  if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(line for line in source.splitlines()
                     if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)


def build_submission(release_nb, solution_nb, student: DemoStudent, notebook_name: str):
    """The release notebook with its answer cells filled in as the demo student would have: code answers
    from ``BASE`` and ``ANSWERS``, written answers from ``ANSWERS`` or ``WRITTEN``."""
    submission = copy.deepcopy(release_nb)
    solutions = {nbgrader_meta(c).get("grade_id"): c.source for c in solution_nb.cells if nbgrader_meta(c).get("solution")}
    for cell in submission.cells:
        meta = nbgrader_meta(cell)
        written = is_written_answer(cell)
        if not meta.get("solution") or (meta.get("grade") and not written):
            continue
        grade_id = meta.get("grade_id")
        replacement = student.answers.get(f"{notebook_name}/{grade_id}", student.answers.get(grade_id))
        if replacement is not None:
            cell.source = replacement.strip("\n")
        elif written:
            if student.written == "model" and grade_id in solutions:
                cell.source = solutions[grade_id]
        elif student.base == "solution" and grade_id in solutions:
            cell.source = solution_answer(solutions[grade_id])
    return submission


def unknown_answer_ids(student: DemoStudent, answer_ids: set[str]) -> list[str]:
    return sorted(key for key in student.answers if key.split("/")[-1] not in answer_ids)


def sync_demo_submissions(root: Path, labs: list[str], *, check: bool) -> list[Difference]:
    """Write (or, with check=True, compare) every lab's demo submissions; returns the differences."""
    differences: list[Difference] = []
    for lab in labs:
        students = load_demo_students(root / DEMO_SPECS / lab)
        release_dir, solutions_dir = root / "labs" / lab, root / "solutions" / lab
        notebooks = sorted(p.stem for p in solutions_dir.glob("*.ipynb"))
        answer_ids = {
            nbgrader_meta(cell).get("grade_id")
            for name in notebooks
            for cell in nbformat.read(solutions_dir / f"{name}.ipynb", as_version=4).cells
            if nbgrader_meta(cell).get("solution")
        }
        for student in students:
            for key in unknown_answer_ids(student, answer_ids):
                differences.append(Difference(str(DEMO_SPECS / lab / f"{student.name}.py"), "ANSWERS",
                                              f"{key!r} is not an answer cell of {lab}"))
            target_dir = root / DEMO_SUBMISSIONS / student.name / lab
            if not check:
                shutil.rmtree(target_dir, ignore_errors=True)
                target_dir.mkdir(parents=True)
            for key in sorted(set(student.expected) - set(notebooks)):
                differences.append(Difference(str(DEMO_SPECS / lab / f"{student.name}.py"), "EXPECTED",
                                              f"{key!r} is not a notebook of {lab}"))
            handed_in = [name for name in notebooks if student.hands_in(name)]
            if check and target_dir.is_dir():
                for extra in sorted(p for p in target_dir.glob("*.ipynb") if p.stem not in handed_in):
                    differences.append(Difference(str(extra.relative_to(root)), "file", "stale: not handed in by this student"))
            for name, text in sorted(student.files.items()):
                target = target_dir / name
                if not check:
                    target.write_text(text, encoding="utf-8")
                elif not target.is_file() or target.read_text(encoding="utf-8") != text:
                    differences.append(Difference(str(target.relative_to(root)), "file", "stale: differs from the spec"))
            for name in handed_in:
                release_path = release_dir / f"{name}.ipynb"
                if not release_path.is_file():
                    continue  # the release check reports the missing notebook
                built = build_submission(nbformat.read(release_path, as_version=4),
                                         nbformat.read(solutions_dir / f"{name}.ipynb", as_version=4), student, name)
                target = target_dir / f"{name}.ipynb"
                shown = str(target.relative_to(root))
                if not check:
                    nbformat.write(built, target)
                elif not target.is_file():
                    differences.append(Difference(shown, "file", "missing demo submission"))
                elif comparable_cells(nbformat.read(target, as_version=4)) != comparable_cells(built):
                    differences.append(Difference(shown, "cells", "stale: differs from release + spec"))
    return differences


@dataclass
class SpecComparison:
    """One demo student's notebook: what its spec asks for (autograded points, and points awaiting a TA)
    against what it got."""

    student: str
    lab: str
    notebook: str
    expected: Expected | None   # None: the notebook is not in the report (not graded)
    got: float | None
    max_score: float | None
    awaiting_ta: float | None = None   # the points that await a TA in the report

    @property
    def ok(self) -> bool:
        return (self.expected is not None and self.got is not None and abs(self.got - self.expected.auto) < 1e-9
                and abs((self.awaiting_ta or 0.0) - self.expected.awaiting_ta) < 1e-9)


def written_points(notebook: dict) -> float:
    """The points of a graded notebook's written answers (report.json's cells)."""
    return sum(float(cell["max_points"]) for cell in notebook.get("cells", []) if cell.get("written"))


def expected_scores(student: DemoStudent, notebooks: dict[str, dict]) -> dict[str, Expected]:
    """What the spec promises per notebook: ``correct`` full marks of the test cells (its written answers
    awaiting a TA when they are the model answers), ``blank`` zero and nothing awaiting, others EXPECTED.

    ``notebooks`` maps each notebook the student handed in to its report entry (max_score, GPU-only
    cells already left out; cells): ``make demo`` hands in one chapter of ``correct`` and ``blank`` per
    lab, ``make demo-all`` every chapter.
    """
    if student.name == "correct":
        expected = {}
        for name, notebook in notebooks.items():
            written = written_points(notebook)
            pending = written if student.written == "model" else 0.0
            expected[name] = Expected(float(notebook["max_score"]) - written, pending)
        return expected
    if student.name == "blank":
        return {name: Expected(0.0) for name in notebooks}
    return dict(student.expected)


def compare_with_specs(report: dict, specs_root: Path) -> list[SpecComparison]:
    """Every demo student's notebooks in ``report`` (report.json of ``course grade``) against its spec.

    Students of the report without a spec in ``specs_root/<lab>/`` are not demo students: left out.
    """
    rows: list[SpecComparison] = []
    specs: dict[str, dict[str, DemoStudent]] = {}
    for entry in report.get("submissions", []):
        lab = entry["lab"]
        if lab not in specs:
            specs[lab] = {s.name: s for s in load_demo_students(specs_root / lab)}
        student = specs[lab].get(entry["student"])
        if student is None:
            continue
        graded = {nb["name"]: nb for nb in entry.get("notebooks", [])}
        handed_in = {name: nb for name, nb in graded.items() if nb.get("status") != "missing"}
        for name, expected in sorted(expected_scores(student, handed_in).items()):
            notebook = graded.get(name)
            rows.append(SpecComparison(student.name, lab, name, expected,
                                       None if notebook is None else float(notebook["score"]),
                                       None if notebook is None else float(notebook["max_score"]),
                                       None if notebook is None else float(notebook.get("awaiting_ta") or 0)))
    return rows


def spec_table(rows: list[SpecComparison]) -> str:
    """The comparison as a plain-text table, mismatches marked; "+N TA": points that await a TA."""
    def shown(auto, pending):
        return f"{auto:g}" + (f" +{pending:g} TA" if pending else "")

    lines = [f"{'lab':<26} {'student':<40} {'notebook':<28} {'expected':>12} {'got':>14}  "]
    for row in rows:
        expected = "-" if row.expected is None else shown(row.expected.auto, row.expected.awaiting_ta)
        got = "-" if row.got is None else f"{shown(row.got, row.awaiting_ta or 0)}/{row.max_score:g}"
        lines.append(f"{row.lab:<26} {row.student:<40} {row.notebook:<28} {expected:>12} {got:>14}  "
                     + ("ok" if row.ok else "MISMATCH"))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# make demo: a small class that shows the whole job in minutes
# --------------------------------------------------------------------------------------------

# The chapter of each lab that ``make demo`` hands in for correct, blank and one buggy student, and
# that CI takes through the term (tests/test_term.py): the quickest notebook of each lab to check
# and grade. `course check` of the reference answers took, on the 2-core build machine (2026-11-26):
# lab01 01_tokenization 12 s, lab02 02_prefill 14 s (its zip holds 01_autoregression too, 27 s: it
# imports its answers, so CI also takes a chapter that builds on another), lab03 01_triton_basics
# 7 s, lab04 01_weight_quantization 18 s, lab05 01_metrics_from_the_wire 21 s. (The longest:
# lab04 04_drafts 88 s, lab05 02_load 82 s, lab05 03_admission 71 s.) make demo-all grades every
# demo student, make test-full takes every chapter through the term.
QUICK_DEMO_CHAPTERS = {
    "lab01-text-to-tensors": "01_tokenization",
    "lab02-prefill-vs-decode": "02_prefill",
    "lab03-kernels": "01_triton_basics",
    "lab04-faster-decoding": "01_weight_quantization",
    "lab05-serving": "01_metrics_from_the_wire",
}
QUICK_DEMO_ATTACK = "attack-borrow-the-reference"


def quick_demo_class(root: Path, out: Path, labs: list[str]) -> list[tuple[str, str, list[str]]]:
    """Copy ``make demo``'s class out of the demo submissions into ``out``; returns (student, lab, notebooks).

    Per lab: ``correct``, ``blank``, the first buggy student of the lab's quick chapter and its
    ``written-*`` students (a weak, a blank and a hostile written answer), each handing in that chapter
    alone, and the lab's ``attack-borrow-the-reference`` (its own chapters).
    """
    picked = []
    for lab in labs:
        chapter = QUICK_DEMO_CHAPTERS.get(lab) or sorted(p.stem for p in (root / "solutions" / lab).glob("*.ipynb"))[0]
        students = {student.name: student for student in load_demo_students(root / DEMO_SPECS / lab)}
        buggy = next((name for name, student in sorted(students.items())
                      if name.startswith("buggy-") and set(student.expected) == {chapter}), None)
        chosen = [("correct", [chapter]), ("blank", [chapter])]
        if buggy:
            chosen.append((buggy, [chapter]))
        chosen += [(name, [chapter]) for name, student in sorted(students.items())
                   if name.startswith("written-") and set(student.expected) == {chapter}]
        if QUICK_DEMO_ATTACK in students:
            chosen.append((QUICK_DEMO_ATTACK, sorted(students[QUICK_DEMO_ATTACK].expected)))
        for name, notebooks in chosen:
            source, target = root / DEMO_SUBMISSIONS / name / lab, Path(out) / name / lab
            target.mkdir(parents=True, exist_ok=True)
            for notebook in notebooks:
                shutil.copyfile(source / f"{notebook}.ipynb", target / f"{notebook}.ipynb")
            picked.append((name, lab, notebooks))
    return picked


def main(argv: list[str] | None = None) -> int:
    """``python -m autograde.demos OUT``: write make demo's class (see ``quick_demo_class``)."""
    import argparse

    from autograde.layout import find_repo_root, list_labs

    parser = argparse.ArgumentParser(prog="python -m autograde.demos",
                                     description="Copy make demo's small class out of autograde/demo_submissions.")
    parser.add_argument("out", type=Path, help="folder to write <student>/<lab>/<notebook>.ipynb into (must not exist)")
    args = parser.parse_args(argv)
    if args.out.exists():
        parser.error(f"{args.out} exists; remove it first")
    root = find_repo_root()
    picked = quick_demo_class(root, args.out, list_labs(root / "solutions"))
    for name, lab, notebooks in picked:
        print(f"  {lab:<26} {name:<40} {', '.join(notebooks)}")
    print(f"{len(picked)} demo submissions in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
