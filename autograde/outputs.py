"""The one writer: grades.csv, report.json, the feedback pages' adjustments and one nbgrader gradebook.db.

Workers never write these. After a run (finished, stopped or resumed), and after ``course adjust``,
this process reads every ``OUT/results/<lab>/<student>.json`` and the ledger (``OUT/ledger.sqlite``:
people's scores, penalties, extensions, the due times and the late rule) and writes the class's
files, each to a temporary name renamed into place, so a reader (or a crash) never meets a
half-written one:

- ``grades.csv`` and ``report.json`` (``report``), every grade as ``final`` computes it;
- the feedback pages: a box at the top of each page lists what the course staff changed (a cell's
  points and their comment, the lab's score, a penalty, the late penalty), and one the written
  answers (how many points a TA grades; once the lab's marks are released, each answer's criteria
  met and the TA's comment), replaced on each rebuild;
- ``gradebook.db``: nbgrader's gradebook with every lab (generate_assignment's cells and points) and
  every student's autograded scores, the staff's cell scores as nbgrader's manual scores (a TA's
  mark of a written answer with its rubric lines as the cell's comment; an answered written cell
  without a mark "needs manual grade"), the due times and each hand-in's time and extension, next to
  ``autograded/<student>/<lab>/`` and an ``nbgrader_config.py``, so ``OUT`` opens in formgrader for
  manual review.

Scores changed in formgrader are not lost when the gradebook is built again: ``sync_formgrader``
reads every manual score that differs from what this writer last wrote (``GRADEBOOK_BASELINE``) into
the ledger first, as a ``cell`` event by ``formgrader``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from autograde.final import FinalGrade, final_grades
from autograde.layout import COURSE_ID, Workspace
from autograde.ledger import Ledger, LedgerState
from autograde.report import write_outputs
from autograde.results import AWAITING_TA, LabResult
from autograde.store import ResultStore, StoredResult, atomic_write_bytes

__all__ = ["CLASS_FILE", "ClassOutputs", "merge_gradebook", "rebuild_class_files", "sync_formgrader",
           "write_class_outputs"]

CLASS_FILE = "class.json"                          # how the class was graded: what `course adjust` rebuilds with
GRADEBOOK_BASELINE = ".gradebook-written.json"     # the manual scores this writer put in gradebook.db
ADJUSTMENTS_BEGIN, ADJUSTMENTS_END = "<!--course-staff-adjustments-->", "<!--/course-staff-adjustments-->"

FORMGRADER_CONFIG = '''\
# Written by `course grade`: open this folder in formgrader (`jupyter lab` here, then Nbgrader > Formgrader)
# to review the autograded notebooks; gradebook.db holds every lab and every student's scores.
# Manual scores you give there are read into ledger.sqlite by the next `course grade` or `course export`.
c = get_config()
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course_id!r}
'''


@dataclass
class ClassOutputs:
    grades: Path
    report: Path
    gradebook: Path | None
    results: list[LabResult] = field(default_factory=list)
    finals: list[FinalGrade] = field(default_factory=list)
    stored: list[StoredResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # unreadable result files, cells the gradebook lacks, formgrader


# ---- formgrader's edits -------------------------------------------------------------------------


def _gradebook_scores(database: Path) -> dict[str, list]:
    """{"lab/student/notebook/cell": [manual_score, extra_credit]} of every grade in a gradebook.db."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{database}", COURSE_ID) as gradebook:
        for assignment in gradebook.assignments:
            for submission in gradebook.assignment_submissions(assignment.name):
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        key = f"{assignment.name}/{submission.student.id}/{notebook.name}/{grade.name}"
                        scores[key] = [grade.manual_score, grade.extra_credit]
    return scores


def sync_formgrader(out_dir: Path, ledger: Ledger) -> list[str]:
    """Record in the ledger every manual score (and extra credit) formgrader changed in ``OUT/gradebook.db``
    since this writer built it; returns one note per score taken over."""
    database = Path(out_dir) / "gradebook.db"
    if not database.is_file():
        return []
    try:
        baseline = json.loads((Path(out_dir) / GRADEBOOK_BASELINE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        baseline = {}
    try:
        current = _gradebook_scores(database)
    except Exception as error:  # a gradebook.db that is not nbgrader's: say so, never lose the run
        return [f"gradebook.db could not be read for formgrader's scores ({type(error).__name__}: {error})"]
    events, notes = [], []
    for key, (manual, extra) in sorted(current.items()):
        written = baseline.get(key, [None, None])
        if [manual, extra] == list(written) or (manual is None and extra in (None, 0) and written[0] is None):
            continue
        lab, student, notebook, cell = key.split("/", 3)
        if manual is None and written[0] is not None:
            events.append(dict(kind="cell", lab=lab, student=student, notebook=notebook, cell=cell, cleared=True,
                               who="formgrader", why="manual score removed in formgrader"))
            notes.append(f"formgrader: {key}: manual score removed (back to the autograder's)")
            continue
        if manual is None:   # extra credit alone: on top of the autograder's points
            manual = _auto_score(database, key)
        events.append(dict(kind="cell", lab=lab, student=student, notebook=notebook, cell=cell, value=float(manual),
                           data={"extra_credit": float(extra or 0)}, who="formgrader",
                           why="manual score given in formgrader"))
        notes.append(f"formgrader: {key}: {manual:g} points{f' + {extra:g} extra credit' if extra else ''} "
                     "recorded in the ledger")
    if events:
        ledger.record_many(events)
    return notes


def _auto_score(database: Path, key: str) -> float:
    from nbgrader.api import Gradebook

    lab, student, notebook, cell = key.split("/", 3)
    with Gradebook(f"sqlite:///{database}", COURSE_ID) as gradebook:
        return float(gradebook.find_grade(cell, notebook, lab, student).auto_score or 0)


# ---- the gradebook ------------------------------------------------------------------------------


def _parse_utc(text: str | None):
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(text) if text else None
    except Exception:
        return None


def merge_gradebook(out_dir: Path, solutions_dir: Path, stored: list[StoredResult],
                    state: LedgerState | None = None, questions_dir: Path | None = None) -> tuple[Path, list[str]]:
    """Build ``out_dir/gradebook.db`` from the result files and the ledger; returns it and notes on what did
    not fit. The staff's cell scores become nbgrader's manual scores; each lab's due time, each hand-in's
    time (the LMS's receipt when known, else the student's claim) and extension are set, so formgrader
    shows how late each hand-in is."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograde.final import final_grade
    from autograde.release import generate_release
    from autograde.snapshot import prepared_earlier, write_workspace_files

    state = state or LedgerState()
    notes: list[str] = []
    written: dict[str, list] = {}
    labs = sorted({entry.result.lab for entry in stored})
    questions = _questions(labs, solutions_dir, notes, questions_dir)
    with tempfile.TemporaryDirectory(prefix="course-gradebook-") as scratch:
        workspace = Workspace.create(Path(scratch))
        prepared = prepared_earlier(solutions_dir, labs[0]) if len(labs) == 1 and (solutions_dir / labs[0]).is_dir() \
            else None
        if prepared:   # the gradebook this run prepared for its one lab: nbgrader need not run again
            write_workspace_files(workspace.root, prepared)
        for lab in labs if not prepared else []:
            if (solutions_dir / lab).is_dir():
                generate_release(solutions_dir, lab, workspace)   # the lab, its notebooks, cells and points
            else:
                notes.append(f"gradebook: {lab} is not in {solutions_dir}; its results are left out")
        database = workspace.path("gradebook.db")
        with Gradebook(f"sqlite:///{database}", COURSE_ID) as gradebook, warnings.catch_warnings():
            # nbgrader 0.9's update_or_create_submission trips SQLAlchemy 2's autoflush warning; harmless.
            warnings.simplefilter("ignore")
            known = {assignment.name for assignment in gradebook.assignments}
            for entry in stored:
                result = entry.result
                if result.lab not in known:
                    continue
                final = final_grade(entry, state)
                gradebook.update_or_create_student(result.student)
                due = _parse_utc((final.hand_in or {}).get("due"))     # this student's: an extension included
                class_due = state.due(result.lab)
                lab_due = _parse_utc(class_due.data["due"]) if class_due is not None else due
                if lab_due is not None:
                    gradebook.update_or_create_assignment(result.lab, duedate=lab_due)
                handed_in = _parse_utc((entry.hand_in or {}).get("received")) or _parse_utc(result.timestamp)
                extension = due - lab_due if due is not None and lab_due is not None and due > lab_due else timedelta(0)
                gradebook.update_or_create_submission(result.lab, result.student, timestamp=handed_in,
                                                      extension=extension)
                staff = state.cell_scores(result.lab, result.student)
                for notebook in result.notebooks:
                    for cell in notebook.cells:
                        try:
                            grade = gradebook.find_grade(cell.grade_id, notebook.name, result.lab, result.student)
                        except MissingEntry:
                            notes.append(f"gradebook: {result.student}/{result.lab}: no cell {notebook.name}/"
                                         f"{cell.grade_id} in the lab's source any more; left out")
                            continue
                        event = staff.get((notebook.name, cell.grade_id))
                        if cell.written:   # formgrader lists an answered one as needing a manual grade
                            grade.auto_score = None if cell.status == AWAITING_TA else 0.0
                            grade.needs_manual_grade = cell.status == AWAITING_TA and event is None
                            _set_comment(gradebook, result, notebook.name, cell.grade_id, event, questions)
                        else:
                            grade.auto_score = cell.points
                            grade.needs_manual_grade = False
                        grade.manual_score = float(event.value) if event is not None else None
                        grade.extra_credit = float(event.data.get("extra_credit") or 0) if event is not None else None
                        written[f"{result.lab}/{result.student}/{notebook.name}/{cell.grade_id}"] = \
                            [grade.manual_score, grade.extra_credit]
                gradebook.db.commit()
        target = out_dir / "gradebook.db"
        staging = out_dir / f".gradebook.db.{os.getpid()}.tmp"
        shutil.copyfile(database, staging)
        os.replace(staging, target)
    atomic_write_bytes(out_dir / GRADEBOOK_BASELINE, json.dumps(written, indent=0).encode())
    atomic_write_bytes(out_dir / "nbgrader_config.py",
                       FORMGRADER_CONFIG.format(root=str(out_dir.resolve()), course_id=COURSE_ID).encode())
    return target, notes


def _questions(labs: list[str], solutions_dir: Path | None, notes: list[str], questions_dir: Path | None = None) -> dict:
    """{lab: its written questions (``knowledge.LabQuestions``: rubrics from ``questions_dir``, by default the
    course's)}; a lab whose rubric file cannot be read is noted, and its marks are shown without their
    criteria's words."""
    from autograde.knowledge import KNOWLEDGE_DIR, RubricError, load_lab

    found = {}
    for lab in labs:
        try:
            found[lab] = load_lab(lab, Path(questions_dir or KNOWLEDGE_DIR), solutions=solutions_dir)
        except RubricError as error:
            notes.append(f"written questions of {lab}: {error}")
    return found


def _set_comment(gradebook, result, notebook: str, grade_id: str, event, questions: dict) -> None:
    """nbgrader's comment on a written answer: the TA's rubric lines and comment (or none)."""
    from nbgrader.api import MissingEntry

    from autograde.marking.shown import mark_text

    try:
        comment = gradebook.find_comment(grade_id, notebook, result.lab, result.student)
    except MissingEntry:
        return
    lab = questions.get(result.lab)
    question = lab.by_cell(notebook, grade_id) if lab is not None else None
    comment.manual_comment = mark_text(question, event) if event is not None else None


# ---- the feedback pages -------------------------------------------------------------------------


def apply_to_feedback(out_dir: Path, stored: StoredResult, final: FinalGrade, state: LedgerState | None = None,
                      questions=None) -> None:
    """Put (or replace, or remove) the staff's boxes at the top of each feedback page of one result: what the
    staff changed, and the written answers' marks (once ``state`` says the lab's marks are released)."""
    from autograde.feedback import adjustments_box, written_box

    state = state or LedgerState()
    result = stored.result
    released = state.released(result.lab) is not None
    staff = state.cell_scores(result.lab, result.student)
    for notebook in result.notebooks:
        if not notebook.feedback:
            continue
        path = out_dir / notebook.feedback
        try:
            page = original = path.read_text(encoding="utf-8")
        except OSError:
            continue
        start = page.find(ADJUSTMENTS_BEGIN)
        if start != -1:
            end = page.find(ADJUSTMENTS_END, start)
            page = page[:start] + page[end + len(ADJUSTMENTS_END):] if end != -1 else page
        marks = {cell: event for (name, cell), event in staff.items() if name == notebook.name}
        box = adjustments_box(final, notebook.name, released=released) + \
            written_box(notebook, marks if released else {}, released=released, questions=questions)
        if box:
            anchor = page.find("<div id='course-grader-verdict'")
            at = anchor if anchor != -1 else 0
            page = page[:at] + ADJUSTMENTS_BEGIN + box + ADJUSTMENTS_END + page[at:]
        if page != original:
            atomic_write_bytes(path, page.encode("utf-8"))


# ---- all of it ----------------------------------------------------------------------------------


def write_class_outputs(out_dir: Path, solutions_dir: Path | None, *, problems: list[str], device: str, timeout: int,
                        gradebook: bool = True, limits: dict | None = None, intake: dict | None = None,
                        current_tests: dict[str, str] | None = None, questions_dir: Path | None = None) -> ClassOutputs:
    """grades.csv, report.json, the feedback pages' boxes and (``gradebook``) gradebook.db, from every result
    file in ``out_dir`` and its ledger. ``intake``: ``Intake.as_dict`` of the run (the report's list of
    every SUBMISSIONS entry); ``current_tests``: {lab: the digest of its sources now} (flags results graded
    on an older version of the tests); ``questions_dir``: the written questions' rubric files (default: the
    ones recorded in OUT's class.json, else the course's)."""
    out_dir = Path(out_dir)
    questions_dir = questions_dir or _class_record(out_dir).get("questions")
    ledger = Ledger(out_dir)
    notes = sync_formgrader(out_dir, ledger) if gradebook else []
    stored, unreadable = ResultStore(out_dir).all()
    state = ledger.state()
    finals = final_grades(stored, state)
    grades_path, report_path = write_outputs(out_dir, stored, finals, [*problems, *unreadable], state=state,
                                             device=device, timeout=timeout, limits=limits, intake=intake,
                                             current_tests=current_tests)
    questions = _questions(sorted({entry.result.lab for entry in stored}), solutions_dir, [], questions_dir)
    for entry, final in zip(stored, finals):
        apply_to_feedback(out_dir, entry, final, state, questions.get(entry.result.lab))
    outputs = ClassOutputs(grades_path, report_path, None, [entry.result for entry in stored], finals, stored,
                           notes + list(unreadable))
    if gradebook and stored and solutions_dir is not None:
        outputs.gradebook, gradebook_notes = merge_gradebook(out_dir, solutions_dir, stored, state, questions_dir)
        outputs.notes += gradebook_notes
    atomic_write_bytes(out_dir / CLASS_FILE, json.dumps(
        {**_class_record(out_dir), "device": device, "timeout": timeout, "limits": limits,
         "solutions": str(solutions_dir) if solutions_dir else _class_record(out_dir).get("solutions"),
         "intake": intake if intake is not None else _class_record(out_dir).get("intake"),
         "current_tests": current_tests if current_tests is not None else _class_record(out_dir).get("current_tests"),
         "questions": str(questions_dir) if questions_dir else None, "problems": problems}, indent=1).encode())
    return outputs


def _class_record(out_dir: Path) -> dict:
    try:
        return json.loads((Path(out_dir) / CLASS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def rebuild_class_files(out_dir: Path, *, gradebook: bool = False, questions_dir: Path | None = None,
                        solutions_dir: Path | None = None) -> ClassOutputs:
    """The class files again, as the last ``course grade`` wrote them, with the ledger as it is now
    (``course adjust``, ``course mark``). The gradebook is rebuilt only with ``gradebook`` (it runs nbgrader).
    ``questions_dir``, ``solutions_dir``: where the written questions are, when not where class.json says."""
    record = _class_record(out_dir)
    solutions = solutions_dir or (Path(record["solutions"]) if record.get("solutions") else None)
    return write_class_outputs(out_dir, solutions, problems=list(record.get("problems") or []),
                               device=record.get("device") or "", timeout=int(record.get("timeout") or 0),
                               gradebook=gradebook, limits=record.get("limits"), intake=record.get("intake"),
                               current_tests=record.get("current_tests"), questions_dir=questions_dir)
