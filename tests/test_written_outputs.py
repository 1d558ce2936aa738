"""Written answers in the class files, without a grading run (the synthetic class of marking_fixture):
the grade stays incomplete while answers await a TA, the export leaves such a lab empty unless
--partial, a TA's mark counts at once, and the feedback shows nothing of it (no points, rubric or
comment: the leak scan finds nothing) until a ``release`` event, then shows the criteria met and the
comment, escaped. And what `course check` says of a written answer, and the kit's scan for a model
answer."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import nbformat
import pytest

from autograde.export import canvas_csv, wide_csv
from autograde.final import final_grades
from autograde.knowledge.leaks import given_text, unreleased_feedback_leaks
from autograde.ledger import Ledger
from autograde.marking.ledger_marks import LedgerMarks
from autograde.outputs import rebuild_class_files
from autograde.store import ResultStore
from tests.marking_fixture import LAB, NOTEBOOK, fixture_questions, write_class, write_results

ANSWERS = {"alice": {"written_cache": "Old keys and values never change.", "written_batching": "Shared reads."},
           "bruno": {"written_cache": "<script>alert(1)</script> because.", "written_batching": "Faster."},
           "dana": {}}
COMMENT = "<b>why</b> & how?"


@pytest.fixture
def out(tmp_path):
    questions = fixture_questions(tmp_path / "questions")
    out = write_class(tmp_path / "out", ANSWERS)
    write_results(out, ANSWERS, tmp_path / "questions" / "solutions")
    return out, questions, tmp_path / "questions"


def _finals(out):
    stored, _ = ResultStore(out).all()
    return stored, {final.student: final for final in final_grades(stored, Ledger(out).state())}


def _page(out, student):
    return (out / "feedback" / student / LAB / f"{NOTEBOOK}.html").read_text(encoding="utf-8")


def _canvas(stored, finals, **options):
    export = canvas_csv(stored, [finals[entry.result.student] for entry in stored], **options)
    rows = list(csv.reader(io.StringIO(export.text)))
    return {row[0]: row[5] for row in rows[2:]}, export.notes


def test_awaiting_answers_keep_the_grade_incomplete_and_out_of_the_export(out):
    out, _, _ = out
    stored, finals = _finals(out)
    assert (finals["alice"].awaiting, finals["alice"].complete, finals["alice"].score) == \
        ({f"{NOTEBOOK}/written_cache": 3, f"{NOTEBOOK}/written_batching": 2}, False, 1)
    assert (finals["bruno"].awaiting_ta, finals["dana"].awaiting_ta, finals["dana"].complete) == (5, 0, True)
    scores, notes = _canvas(stored, finals)
    assert scores == {"alice": "", "bruno": "", "dana": "1"}
    assert any(note.startswith(f"{LAB}: 4 written answers of 2 students await a TA") for note in notes)
    scores, notes = _canvas(stored, finals, partial=True)
    assert scores == {"alice": "1", "bruno": "1", "dana": "1"}
    assert any(note.startswith("PARTIAL: alice/") for note in notes)
    wide = list(csv.reader(io.StringIO(wide_csv(stored, [finals[e.result.student] for e in stored]).text)))
    assert wide[1:] == [["alice", ""], ["bruno", ""], ["dana", "1"]]


def test_marks_count_at_once_but_reach_the_feedback_only_once_released(out):
    out, questions, questions_dir = out
    marks = LedgerMarks(out)
    marks.save_mark(LAB, "alice", NOTEBOOK, "written_cache", points=3, criteria={"reuse": 2, "cost": 1},
                    comment="Both points, clearly.", grader="Ann", expected_version=0)
    marks.save_mark(LAB, "alice", NOTEBOOK, "written_batching", points=1, criteria={"weights": 1},
                    comment="", grader="Ann", expected_version=0)
    marks.save_mark(LAB, "bruno", NOTEBOOK, "written_cache", points=1, criteria={"reuse": 1}, comment=COMMENT,
                    grader="Bo", expected_version=0)
    stored, finals = _finals(out)
    assert (finals["alice"].score, finals["alice"].complete, finals["bruno"].score) == (5, True, 2)
    assert (finals["bruno"].complete, finals["bruno"].awaiting) == (False, {f"{NOTEBOOK}/written_batching": 2})
    scores, _ = _canvas(stored, finals)
    assert scores == {"alice": "5", "bruno": "", "dana": "1"}

    rebuild_class_files(out, questions_dir=questions_dir)
    for student in ("alice", "bruno"):
        page = _page(out, student)
        assert "5 points are graded by your TA; marks appear here once released" in page
        assert "Both points" not in page and "why</b>" not in page and "Earlier keys" not in page
        assert "id='course-staff-adjustments'" not in page, "a TA's unreleased mark is no staff change to show"
    assert "5 points are graded by your TA" in _page(out, "dana")
    assert unreleased_feedback_leaks(out, LAB, [questions], given=given_text(questions_dir / "solutions")) == []

    Ledger(out).record("release", lab=LAB, why="marked")
    rebuild_class_files(out, questions_dir=questions_dir)
    alice, bruno = _page(out, "alice"), _page(out, "bruno")
    assert "Both points, clearly." in alice and "Earlier keys and values never change, so they can be kept." in alice
    assert "3 / 3 points" in alice and "1 / 2 points" in alice
    assert "&lt;b&gt;why&lt;/b&gt; &amp; how?" in bruno and "<b>why</b>" not in bruno
    assert "partly: says &#x27;to save time&#x27; without what is kept" in bruno
    assert "not graded yet (2 points)" in bruno, "bruno's unmarked batching answer"
    assert "0 / 3 points: not attempted" in _page(out, "dana")
    Ledger(out).record("release", lab=LAB, cleared=True, why="too early")
    rebuild_class_files(out, questions_dir=questions_dir)
    assert "Both points" not in _page(out, "alice")


def test_course_check_says_a_ta_grades_a_written_answer():
    from autograde.authoring import code, notebook, written_question
    from course_lib.handin.check import BY_TA, NOT_ATTEMPTED, CheckReport, VisibleRun, _exercises, format_report

    cells = [code("x = 1")]
    for grade_id, text in (("written_a", "My own words."), ("written_b", "YOUR ANSWER HERE"), ("written_c", "  ")):
        prompt, answer = written_question(grade_id, 2, "Why?", "Because.")
        answer.source = text
        cells += [prompt, answer]
    nb = notebook(cells)
    exercises = _exercises(nb, None, VisibleRun({}, [], 0.0, 1, 0))
    assert [(ex.grade_id, ex.status, ex.ta_points) for ex in exercises] == \
        [("written_a", BY_TA, 2), ("written_b", NOT_ATTEMPTED, 2), ("written_c", NOT_ATTEMPTED, 2)]
    report = CheckReport(path=Path("x.ipynb"), exercises=exercises, ran=True)
    assert report.totals.text() == "visible: 0 of 0 points; 6 points are graded by your TA"
    assert "2 TA" in format_report(report) and report.all_passed


def test_the_kit_scan_finds_a_model_answer_and_what_the_chapter_gives_is_none(tmp_path):
    from autograde.kit import written_answer_leaks
    from autograde.knowledge import load_lab
    from tests.test_knowledge import ROOT

    question = load_lab("lab01-text-to-tensors").question("04_paging/written_paging_like_an_os")
    (tmp_path / "labs").mkdir()
    (tmp_path / "README.md").write_text("# Kit\n\n" + question.model_answer.split("\n\n")[0] + "\n", encoding="utf-8")
    (leak,) = written_answer_leaks(ROOT, tmp_path)
    assert leak.path == "README.md" and "written_paging_like_an_os: model answer" in leak.origin
    (tmp_path / "README.md").write_text("# Kit\n\n" + question.prompt + "\n", encoding="utf-8")
    nbformat.write(nbformat.read(ROOT / "labs" / "lab01-text-to-tensors" / "04_paging.ipynb", as_version=4),
                   tmp_path / "labs" / "04_paging.ipynb")
    assert written_answer_leaks(ROOT, tmp_path) == []


def test_the_release_manifest_lists_a_written_answer_and_course_check_and_submit_use_it(tmp_path):
    """The kit's manifest (``release_manifest``) names written cells; ``course check`` reads them from it,
    a deleted one is a file problem, and a changed one makes the lab worth handing in."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions, ComputeChecksums, LockCells

    from autograde.authoring import code, notebook, written_question
    from course_lib.handin.check import BY_TA, NOT_ATTEMPTED, VisibleRun, _cell_checks, _exercises
    from course_lib.handin.manifest import release_manifest
    from course_lib.handin.submit import changed_labs

    source = notebook([code("x = 1"), *written_question("written_a", 3, "Why?", "Because.")])
    release, resources = nbformat.reads(nbformat.writes(source), as_version=4), {}
    for preprocessor in (LockCells, ClearSolutions, ClearHiddenTests, ComputeChecksums):
        release, resources = preprocessor().preprocess(release, resources)
    (tmp_path / "labs" / "lab00-x").mkdir(parents=True)
    nbformat.write(release, tmp_path / "labs" / "lab00-x" / "ch1.ipynb")
    cells = release_manifest(tmp_path / "labs")["lab00-x"]["ch1"]
    assert [(cell["grade_id"], cell["kind"], cell["points"]) for cell in cells] == [("written_a", "written", 3)]
    run = VisibleRun({}, [], 0.0, 1, 0)
    assert [ex.status for ex in _exercises(release, cells, run)] == [NOT_ATTEMPTED]
    answered = nbformat.reads(nbformat.writes(release), as_version=4)
    answered.cells[-1].source = "Because the sign cancels."
    assert [ex.status for ex in _exercises(answered, cells, run)] == [BY_TA]
    assert changed_labs(tmp_path / "labs", {"lab00-x": {"ch1": cells}}) == []
    nbformat.write(answered, tmp_path / "labs" / "lab00-x" / "ch1.ipynb")
    assert changed_labs(tmp_path / "labs", {"lab00-x": {"ch1": cells}}) == ["lab00-x"]
    deleted = nbformat.reads(nbformat.writes(release), as_version=4)
    deleted.cells = deleted.cells[:-1]
    problems = [check for check in _cell_checks(deleted, cells) if not check.ok]
    assert problems and "deleted: written_a" in problems[0].detail
