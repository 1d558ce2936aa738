"""The term as one test: every lab goes out in a kit and comes back graded.

For each lab, as an instructor and a class would:

1. **the kit** (``course kit``) is built with the labs it builds on unlocked (as after their
   deadlines): it must build, hold the release and nothing of the instructor's, and every
   reference of a locked lab must be a stub in it (the build's own leak scan has run too);
2. **scripted students** work in the kit on one chapter, two at a time: ``correct`` pastes the
   reference answers, one ``buggy-*`` demo student of that chapter answers one exercise the wrong
   way, ``blank`` hands in the release. An earlier chapter the chapter imports answers from
   (``answers_from``) is filled in and handed in the same way. Each runs ``course check --json``
   and ``course submit --zip`` with the kit's own edition of ``course_lib``, as a student's machine
   would;
3. **the instructor** grades every zip of the class (each chapter's students are students of
   their own, ``correct.lab01.02``) in one ``course grade`` run (the isolated grader, two workers),
   upholds one regrade request (``course adjust --score``), regrades that student, and writes the
   gradebook with ``course export --format canvas``: one column per lab.

Then: in the kit the reference answers pass every visible test and every other cell runs (no
platform code, plot or check may reach a locked reference: a stub's error anywhere fails the
test); a blank chapter fails its visible tests the way a student expects (the placeholder, a
check's verdict), never with an import error or a missing recording; what ``course check`` says
of each visible test cell agrees with the grader (a visible failure scores 0 when graded; a
visible pass loses points only to hidden tests) and of each written answer ("graded by your TA" for
one the grader leaves awaiting a TA, "not attempted" for a blank one); the scores are the demo
specs' (``correct`` full marks of the test cells with its model written answers awaiting a TA,
``blank`` 0, the buggy student its ``EXPECTED``); and the Canvas file carries them, with an empty
cell where written answers still await a TA.

CI runs every lab's kit build and one chapter of three labs (``CI_CHAPTERS``): Lab 0.1 (the first a
class meets), Lab 0.3 (compile and GPU cells) and Lab 0.5 (serving: worker processes, written answers
by the dozen), a chapter each chosen for its run time. The other chapters, Labs 0.2 and 0.4 included,
are marked ``full`` and run with ``make test-full`` (the whole of CI must stay under 20 minutes: with
all five labs' chapters this test alone took 460 s of the 1,110 s on 2026-11-27).
"""

from __future__ import annotations

import concurrent.futures
import csv
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograde.demos import (DEMO_SPECS, QUICK_DEMO_CHAPTERS, DemoStudent, build_submission, expected_scores,
                             load_demo_students)
from autograde.edition import marked_definitions
from autograde.kit import build_kit
from autograde.layout import list_labs
from course_lib.exercises import LABS
from course_lib.handin.notebooks import grade_cells, nbgrader_meta

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
COURSE_LABS = list_labs(ROOT / "solutions")

# One chapter of three labs in CI (see the module docstring): chapters make demo grades too (each has a
# buggy demo student). make demo grades a chapter of Labs 0.2 and 0.4 through the same grader.
CI_LABS = ("lab01-text-to-tensors", "lab03-kernels", "lab05-serving")
CI_CHAPTERS = {lab: chapter for lab, chapter in QUICK_DEMO_CHAPTERS.items() if lab in CI_LABS}

# What a blank notebook's visible test may fail with: the placeholder, a check's verdict, or the
# replay saying the stub's answer left the recorded path. Never an import or platform error.
EXPECTED_FAILURES = {"NotImplementedError", "CheckFailed", "AssertionError", "OffTheRecord"}
STUB_IN_LIBRARY = "is your exercise in"   # course_lib.exercises.stub_message: a locked reference was reached


def _chapters() -> list:
    params = []
    for lab in COURSE_LABS:
        for path in sorted((ROOT / "labs" / lab).glob("*.ipynb")):
            marks = [] if CI_CHAPTERS.get(lab) == path.stem else [pytest.mark.full]
            params.append(pytest.param((lab, path.stem), marks=marks, id=f"{lab}/{path.stem}"))
    return params


def _environment(edition: Path) -> dict:
    """A subprocess that imports ``edition``'s course_lib (the kit's, or this checkout's)."""
    return {**os.environ, "PYTHONPATH": str(edition), "OMP_NUM_THREADS": "1", "TERM": "dumb"}


def course(*args, edition: Path = ROOT, cwd: Path = ROOT, timeout: float = 1800) -> subprocess.CompletedProcess:
    command = "autograde.cli" if edition == ROOT else "course_lib.cli"   # the instructor's course, or the kit's
    return subprocess.run([sys.executable, "-m", command, *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=_environment(edition))


_KITS: dict[str, Path] = {}


def _kit(lab: str, tmp_path_factory) -> Path:
    """The kit of ``lab`` with the labs it builds on unlocked: built once per test process."""
    if lab not in _KITS:
        info = LABS.get(lab)
        folder = tmp_path_factory.mktemp(f"kit-{lab}") / "kit"
        _KITS[lab] = build_kit(ROOT, folder, labs=[lab], unlock=list(info.builds_on) if info else []).folder
    return _KITS[lab]


# --------------------------------------------------------------------------------------------
# The kit of every lab
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lab", COURSE_LABS)
def test_the_kit_of_every_lab_builds_and_holds_nothing_of_a_locked_answer(lab, tmp_path_factory):
    kit = _kit(lab, tmp_path_factory)
    assert sorted(p.name for p in (kit / "labs" / lab).glob("*.ipynb")) == \
        sorted(p.name for p in (ROOT / "labs" / lab).glob("*.ipynb"))
    for forbidden in ("solutions", "autograde", "tests", "benchmarks", ".git"):
        assert not (kit / forbidden).exists(), forbidden
    for path in (p for p in kit.rglob("*") if p.is_file() and p.suffix in (".py", ".ipynb", ".md", ".json")):
        text = path.read_text(errors="ignore")
        if path.suffix == ".ipynb":
            text = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
        for line in text.splitlines():   # a marker in use starts its line (the grading code mentions them in prose)
            assert not line.strip().startswith(("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")), f"{path}: {line}"
    manifest = json.loads((kit / "KIT.json").read_text())
    assert lab in manifest["locked"] and manifest["labs"] == [lab]
    locked = set(manifest["locked"])
    # Every reference of a locked lab is a stub: its body is one `raise NotImplementedError(...)` (or,
    # for a Triton kernel, `pass`), whatever else the module holds.
    import ast

    for path in sorted((kit / "course_lib").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if "exercise(" not in source:
            continue
        for definition in marked_definitions(ast.parse(source)):
            if definition.exercise.lab not in locked:
                continue
            functions = [node for node in ast.walk(definition.node)
                         if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
            for function in functions:
                body = [statement for statement in function.body
                        if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))]
                assert len(body) == 1 and isinstance(body[0], (ast.Raise, ast.Pass)), \
                    f"{path.relative_to(kit)}:{function.lineno} {definition.qualname} is not stubbed in the kit"
    readme = (kit / "README.md").read_text()
    others = [other for other in COURSE_LABS if other != lab]
    assert f"labs/{lab}/" in readme and not any(f"/{other}/" in readme for other in others), \
        "the kit's README shows only the kit's own lab in its examples"
    assert "course grade" not in readme


# --------------------------------------------------------------------------------------------
# One chapter through the term
# --------------------------------------------------------------------------------------------


def _imported_chapters(lab_folder: Path, chapter: str) -> list[str]:
    """Earlier chapters whose answers ``chapter`` imports (``answers_from("...")``), theirs included."""
    found: list[str] = []
    pending = [chapter]
    while pending:
        notebook = nbformat.read(lab_folder / f"{pending.pop()}.ipynb", as_version=4)
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            for name in re.findall(r"answers_from\(\s*[\"']([\w.]+)[\"']", cell.source):
                stem = name.removesuffix(".ipynb")
                if stem != chapter and stem not in found:
                    found.append(stem)
                    pending.append(stem)
    return found


def _buggy_student(lab: str, chapter: str) -> DemoStudent:
    students = [s for s in load_demo_students(ROOT / DEMO_SPECS / lab)
                if s.name.startswith("buggy-") and chapter in s.expected]
    assert students, f"{lab}/{chapter} has no buggy demo student"
    return students[0]


def _students(lab: str, chapter: str) -> list[DemoStudent]:
    """``correct`` (the reference answers, the model written answers: they await a TA), the chapter's first
    buggy student (its written answers blank) and ``blank``."""
    correct = next(s for s in load_demo_students(ROOT / DEMO_SPECS / lab) if s.name == "correct")
    assert correct.written == "model", "correct hands in the model answers of the written questions"
    return [correct, _buggy_student(lab, chapter), DemoStudent("blank", "the release as handed out", "release")]


def _work_in_the_kit(kit: Path, lab: str, chapters: list[str], student: DemoStudent, home: Path) -> Path:
    """The student's copy of the kit's lab folder, with ``chapters`` answered as ``student`` would."""
    folder = home / "labs" / lab
    folder.mkdir(parents=True)
    for path in (kit / "labs" / lab).iterdir():   # the lab's data files, not its other notebooks
        if path.is_file() and path.suffix != ".ipynb":
            (folder / path.name).write_bytes(path.read_bytes())
    for name in chapters:
        release = nbformat.read(kit / "labs" / lab / f"{name}.ipynb", as_version=4)
        solution = nbformat.read(ROOT / "solutions" / lab / f"{name}.ipynb", as_version=4)
        nbformat.write(build_submission(release, solution, student, name), folder / f"{name}.ipynb")
    return folder


def _test_cells(report: dict) -> dict[str, dict]:
    return {test["grade_id"]: test for exercise in report["exercises"] for test in exercise["tests"]}


def _solution_cells(lab: str, chapter: str) -> dict[str, object]:
    notebook = nbformat.read(ROOT / "solutions" / lab / f"{chapter}.ipynb", as_version=4)
    return {nbgrader_meta(cell)["grade_id"]: cell for cell in grade_cells(notebook)}


TERM_TEST = "test_a_chapter_goes_out_in_the_kit_and_comes_back_graded"


def _student_id(student: DemoStudent, lab: str, chapter: str) -> str:
    """One class holds a student per lab and chapter: ``correct.lab01.02`` hands in Lab 0.1's chapter 2."""
    return f"{student.name}.{lab.split('-', 1)[0]}.{chapter.split('_', 1)[0]}"


class Term:
    """One class through the term: every selected chapter's students, one ``course grade``, one export."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.zips = folder / "collected"
        self.chapters: dict[tuple[str, str], dict] = {}   # (lab, chapter) -> what its students saw
        self.failed: dict[tuple[str, str], str] = {}      # (lab, chapter) -> why its students could not work

    def hand_out(self, lab: str, chapter: str, kit: Path) -> None:
        """The chapter's students work in the kit: course check, then course submit --zip. Two students
        work at a time (each a subprocess of its own), as two would on their own laptops."""
        chapters = [chapter, *_imported_chapters(kit / "labs" / lab, chapter)]
        students = _students(lab, chapter)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda student: self._work(lab, chapter, chapters, kit, student), students))
        self.chapters[(lab, chapter)] = {"chapters": chapters, "students": students,
                                         "checks": {student.name: check for student, (check, _) in zip(students, done)},
                                         "submits": {student.name: submit for student, (_, submit) in zip(students, done)}}

    def _work(self, lab: str, chapter: str, chapters: list[str], kit: Path, student: DemoStudent) -> tuple:
        """One student's ``course check`` report (and its run), then their ``course submit --zip`` run."""
        name = _student_id(student, lab, chapter)
        home = self.folder / lab / name
        folder = _work_in_the_kit(kit, lab, chapters, student, home)
        report_file = home / "check.json"
        run = course("check", folder / f"{chapter}.ipynb", "--json", report_file, edition=kit, cwd=home)
        if not report_file.is_file():
            raise AssertionError(f"course check wrote no report for {name}:\n{run.stdout[-2000:]}\n"
                                 f"{run.stderr[-2000:]}")
        check = (json.loads(report_file.read_text())[0], run)
        submit = course("submit", "--student", name, "--lab", lab, "--zip", "--labs-dir", home / "labs",
                        "--out", self.zips, edition=kit, cwd=home)
        return check, submit

    def grade(self) -> None:
        """The instructor's side, once for the whole class: course grade on the zips, then the Canvas file."""
        self.grades, self.canvas = self.folder / "grades", self.folder / "canvas.csv"
        # A whole term (every chapter: 75 zips) takes over half an hour on 2 cores: the wait grows with the class.
        zips = len(list(self.zips.glob("*.zip")))
        self.graded = course("grade", self.zips, "--out", self.grades, "--jobs", "2", "--timeout", "300",
                             timeout=600 + 90 * zips)
        # A regrade request upheld for one student, then that student regraded (the cheapest: a blank hand-in):
        # the change outlives the regrade and reaches the Canvas file.
        lab, chapter = next(iter(self.chapters))
        self.adjusted = _student_id(DemoStudent("blank", "", "release"), lab, chapter)
        self.adjust = course("adjust", self.grades, self.adjusted, "--lab", lab, "--score", "1",
                             "--why", "term test: a regrade request upheld")
        self.regraded = course("grade", self.zips, "--out", self.grades, "--student", self.adjusted, "--lab", lab,
                               "--timeout", "300", timeout=900)
        self.exported = course("export", self.grades, "--format", "canvas", "--out", self.canvas)
        report = self.grades / "report.json"
        self.report = json.loads(report.read_text()) if report.is_file() else {"submissions": []}


@pytest.fixture(scope="module")
def term(request, tmp_path_factory) -> Term:
    """The selected chapters of this run (CI: CI_CHAPTERS), handed out, handed in and graded as one class."""
    selected = [item.callspec.params["chapter"] for item in request.session.items
                if item.module is request.module and item.originalname == TERM_TEST]
    term = Term(tmp_path_factory.mktemp("term"))
    for lab, chapter in selected:
        try:
            term.hand_out(lab, chapter, _kit(lab, tmp_path_factory))
        except Exception as error:   # one lab's broken kit must not hide how the other labs fare
            term.failed[(lab, chapter)] = f"{type(error).__name__}: {error}"
    if term.chapters:
        term.grade()
    return term


@pytest.mark.parametrize("chapter", _chapters())
def test_a_chapter_goes_out_in_the_kit_and_comes_back_graded(chapter, term):
    lab, chapter = chapter
    assert (lab, chapter) not in term.failed, f"{lab}/{chapter}: {term.failed.get((lab, chapter))}"
    seen = term.chapters[(lab, chapter)]
    problems: list[str] = []

    # --- in the kit: course check --------------------------------------------------------------
    correct, _ = seen["checks"]["correct"]
    for grade_id, test in _test_cells(correct).items():
        if test["visible"] and test["status"] not in ("passed", "skipped: needs a GPU"):
            problems.append(f"kit, reference answers: {grade_id} {test['status']}: {test['message'][:300]}")
    for error in correct["other_errors"]:
        problems.append(f"kit, reference answers: a cell that is no test failed: {error['text'][:300]}")
    blank, _ = seen["checks"]["blank"]
    for grade_id, test in _test_cells(blank).items():
        if test["visible"] and test["status"] == "passed":
            problems.append(f"kit, blank: {grade_id} passed on the release")
        if test["ename"] and test["ename"] not in EXPECTED_FAILURES and test["status"] != "skipped: needs a GPU":
            problems.append(f"kit, blank: {grade_id} failed with {test['ename']}: {test['message'][:200]}")
        if "no recorded reference result" in test["message"]:
            problems.append(f"kit, blank: {grade_id}: a visible check has no recording: {test['message'][:200]}")
    for name, (report, _) in seen["checks"].items():
        if not report["ready"]:
            problems.append(f"kit, {name}: course check says the file is not ready: {report['file_checks']}")
        for error in report["other_errors"]:
            if STUB_IN_LIBRARY in error["evalue"] or error["kind"] == "locked in this kit":
                problems.append(f"kit, {name}: a cell reached a locked reference: {error['text'][:300]}")
        for test in _test_cells(report).values():
            assert test["visible"] or test["status"] != "passed", f"{name}: a hidden-only cell counted as passed"

    # --- handing in ---------------------------------------------------------------------------
    students = seen["students"]
    for student in students:
        run, name = seen["submits"][student.name], _student_id(student, lab, chapter)
        if run.returncode != 0:
            problems.append(f"course submit, {name}: {run.stderr.strip()[:300]}")
            continue
        archive = next(term.zips.glob(f"{name}-*.zip"))
        assert str(archive.resolve()) in run.stdout and "Not handed in yet" in run.stdout, run.stdout
        with zipfile.ZipFile(archive) as zipped:
            handed = {Path(entry).stem for entry in zipped.namelist() if entry.endswith(".ipynb")}
        assert handed == set(seen["chapters"]), f"{name} handed in {sorted(handed)}"

    # --- grading and the gradebook ------------------------------------------------------------
    graded = term.graded
    assert graded.returncode == 0, f"course grade failed:\n{graded.stdout[-3000:]}\n{graded.stderr[-3000:]}"
    entries = {entry["student"]: entry for entry in term.report["submissions"] if entry["lab"] == lab}
    solution_cells = _solution_cells(lab, chapter)
    for student in students:
        name = _student_id(student, lab, chapter)
        entry = entries[name]
        notebook = next(nb for nb in entry["notebooks"] if nb["name"] == chapter)
        expected = expected_scores(student, {chapter: notebook})[chapter]
        if notebook["score"] != expected.auto or notebook["awaiting_ta"] != expected.awaiting_ta:
            lost = [f"{p['cell']} -{p['points_lost']:g}: {p['reason'][:200]}" for p in entry["lost_points"]
                    if p["notebook"] == chapter]
            problems.append(f"graded, {name}: {notebook['score']:g} of {notebook['max_score']:g} with "
                            f"{notebook['awaiting_ta']:g} awaiting a TA, its spec says {expected.auto:g} with "
                            f"{expected.awaiting_ta:g}; lost: {lost}")
        assert (term.grades / "feedback" / name / lab / f"{chapter}.html").is_file()
        # What course check said of each visible test cell agrees with the grader, and of each written answer.
        check, _ = seen["checks"][student.name]
        said_written = {ex["grade_id"]: ex for ex in check["exercises"] if ex["ta_points"]}
        for cell in notebook["cells"]:
            if cell["written"]:
                said = said_written.get(cell["grade_id"], {}).get("status")
                wanted = {"awaiting a TA": "graded by your TA", "not attempted": "not attempted"}.get(cell["status"])
                if said != wanted:
                    problems.append(f"{name}/{cell['grade_id']}: course check said {said}, the grader {cell['status']}")
                continue
            said = _test_cells(check).get(cell["grade_id"])
            if said is None or not said["visible"] or cell["status"].startswith("skipped"):
                continue
            hidden = "BEGIN HIDDEN TESTS" in solution_cells[cell["grade_id"]].source
            if said["status"] != "passed" and cell["points"] > 0:
                problems.append(f"{name}/{cell['grade_id']}: course check said {said['status']}, the grader gave "
                                f"{cell['points']:g} points")
            if said["status"] == "passed" and cell["points"] < cell["max_points"] and not hidden:
                problems.append(f"{name}/{cell['grade_id']}: course check said passed, the grader gave "
                                f"{cell['points']:g} of {cell['max_points']:g} ({cell['reason'][:200]})")
    assert term.adjust.returncode == 0 and term.regraded.returncode == 0, term.adjust.stderr + term.regraded.stderr
    if term.adjusted in entries:   # this chapter's blank student: its override outlived its regrade
        adjusted = entries[term.adjusted]
        assert adjusted["score"] == 1 and adjusted["auto_score"] == 0, adjusted["final"]
        assert len(adjusted["gradings"]) == 2, "the regrade keeps the first grading in the history"
    exported = term.exported
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.reader(io.StringIO(term.canvas.read_text())))
    assert rows[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and lab in rows[0][5:]
    assert rows[1][0] == "Points Possible"
    column = rows[0].index(lab)
    by_student = {row[3]: row[column] for row in rows[2:]}
    for name, entry in entries.items():
        if entry["awaiting_ta"]:    # not graded yet: Canvas gets an empty cell, never the partial score
            assert by_student[name] == "", f"{name}: written answers await a TA, yet Canvas got {by_student[name]!r}"
            continue
        assert float(by_student[name]) == entry["score"], f"{name}: Canvas {by_student[name]}, graded {entry['score']}"
    assert not problems, f"{lab}/{chapter}:\n  " + "\n  ".join(problems)
