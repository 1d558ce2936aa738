"""Written answers through a real grading run, on the fixture lab with a written question (ch2, 2 points).

A class of three is graded by `course grade` (the isolated grader): ada answered the written question,
ben left it as released, cy pasted markup into it. Then, as a term goes:

- the grader leaves ada's and cy's written answers awaiting a TA (0 points, the grade not complete) and
  scores ben's blank one 0 with no TA work; the score table, report.json, grades.csv and the gradebook
  (formgrader: "needs manual grade") say so; `course export` leaves ada and cy empty for Canvas
  unless --partial, and its notes count the answers that await a TA;
- a TA marks both through `course mark`'s service (rubric criteria, a comment): the marks are cell
  events of the ledger; a regrade of ada (`course grade --student`) and a `--resume` keep them; the
  gradebook gets the TA's points and comment; the feedback pages say only that a TA grades those
  points, and hold no model answer or rubric text (the leak scan), until the instructor releases the
  marks (`course mark --release`): then they show the criteria met and the comment, escaped.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograde.demos import DemoStudent, build_submission
from tests.grading_fixture import LAB, WRITTEN_RUBRIC, write_fixture_lab

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
ADA = "Two numbers of the same sign multiply to a positive number, so -3 times -3 is 9."
CY = "<script>window.pwned = 1</script><b>nine</b>"
HOSTILE_COMMENT = "<b>see</b> the product & its sign"


def course(*args, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograde.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _entries(out: Path) -> dict[str, dict]:
    return {entry["student"]: entry for entry in json.loads((out / "report.json").read_text())["submissions"]}


def _canvas(root: Path, *extra) -> tuple[dict[str, str], str]:
    run = course("export", "out", "--format", "canvas", "--out", "canvas.csv", *extra, cwd=root)
    assert run.returncode == 0, run.stderr
    rows = list(csv.reader(io.StringIO((root / "canvas.csv").read_text())))
    return {row[3]: row[5] for row in rows[2:]}, run.stderr


def _feedback(out: Path, student: str) -> str:
    return (out / "feedback" / student / LAB / "ch2.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from autograde.layout import Workspace
    from autograde.release import generate_release

    root = tmp_path_factory.mktemp("written")
    lab_dir = write_fixture_lab(root / "solutions", written=True)
    (root / "questions").mkdir()
    (root / "questions" / f"{LAB}.toml").write_text(WRITTEN_RUBRIC, encoding="utf-8")
    release = generate_release(root / "solutions", LAB, Workspace.create(root / "workspace"))
    for name, written in (("ada", ADA), ("ben", None), ("cy", CY)):
        student = DemoStudent(name, "", "solution", {} if written is None else {"written_why_square": written})
        folder = root / "submissions" / name / LAB
        folder.mkdir(parents=True)
        for chapter in ("ch1", "ch2"):
            nbformat.write(build_submission(nbformat.read(release / f"{chapter}.ipynb", as_version=4),
                                            nbformat.read(lab_dir / f"{chapter}.ipynb", as_version=4), student,
                                            chapter), folder / f"{chapter}.ipynb")
    run = course("grade", "submissions", "--solutions", "solutions", "--out", "out", "--jobs", "2", "--timeout", "60",
                 cwd=root)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return root, run


def test_written_answers_await_a_ta_everywhere_and_a_blank_one_scores_zero(graded):
    from nbgrader.api import Gradebook

    from autograde.layout import COURSE_ID

    root, run = graded
    out = root / "out"
    entries = _entries(out)
    ada, ben = entries["ada"], entries["ben"]
    assert (ada["score"], ada["max_score"], ada["awaiting_ta"], ada["complete"]) == (8, 10, 2, False)
    assert (ben["score"], ben["max_score"], ben["awaiting_ta"], ben["complete"]) == (8, 10, 0, True)
    ch2 = {cell["grade_id"]: cell for nb in ada["notebooks"] if nb["name"] == "ch2" for cell in nb["cells"]}
    assert ch2["written_why_square"]["status"] == "awaiting a TA" and ch2["written_why_square"]["written"]
    assert not any(lost["cell"] == "written_why_square" for lost in ada["lost_points"]), "pending, not lost"
    blank = next(lost for lost in ben["lost_points"] if lost["cell"] == "written_why_square")
    assert blank["status"] == "not attempted" and blank["points_lost"] == 2
    assert "2 points await a TA (1 written answer)" in run.stdout
    assert "1 written answer not attempted" in run.stdout
    assert f"{LAB}: written answers await a TA: ch2 2 answers, 4 points (course mark out --lab {LAB})" in run.stdout
    with open(out / "grades.csv", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert (rows["ada"]["score"], rows["ada"]["complete"], rows["ada"]["awaiting_ta"]) == ("", "awaiting TA", "2")
    assert (rows["ben"]["score"], rows["ben"]["complete"]) == ("8", "yes")
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", COURSE_ID) as gradebook:
        assert gradebook.find_grade("written_why_square", "ch2", LAB, "ada").needs_manual_grade
        assert not gradebook.find_grade("written_why_square", "ch2", LAB, "ben").needs_manual_grade
        assert not gradebook.find_grade("test_square", "ch2", LAB, "ada").needs_manual_grade

    scores, notes = _canvas(root)
    assert scores == {"ada": "", "ben": "8", "cy": ""}, "a score without the TA's points is no grade"
    assert f"{LAB}: 2 written answers of 2 students await a TA" in notes
    scores, notes = _canvas(root, "--partial")
    assert scores == {"ada": "8", "ben": "8", "cy": "8"} and "PARTIAL: ada" in notes and "WARNING: --partial" in notes


def test_ta_marks_outlive_regrades_reach_the_gradebook_and_show_only_once_released(graded):
    from nbgrader.api import Gradebook

    from autograde.knowledge import load_lab
    from autograde.knowledge.leaks import given_text, unreleased_feedback_leaks
    from autograde.layout import COURSE_ID
    from autograde.ledger import Ledger
    from autograde.marking.session import open_session

    root, _ = graded
    out = root / "out"
    status = course("mark", "out", "--lab", LAB, "--questions", "questions", "--solutions", "solutions", "--status",
                    cwd=root)
    assert status.returncode == 0 and "2 answers await a mark" in status.stdout, status.stdout + status.stderr
    assert "marks released: no" in status.stdout
    questions = load_lab(LAB, root / "questions", root / "solutions")
    app = open_session(out, LAB, questions=questions)
    keys = {answer["student"]: answer["key"] for answer in app.answers("ch2/written_why_square")["answers"]}
    app.save("ch2/written_why_square", keys["ada"], "Ann", criteria={"same_sign": 1, "example": 1},
             comment="Right, with the example.", expected_version=0)
    app.save("ch2/written_why_square", keys["cy"], "Ann", criteria={"same_sign": 0, "example": 0.5},
             comment=HOSTILE_COMMENT, expected_version=0)
    assert [e.who for e in Ledger(out).events(kind="cell")] == ["Ann", "Ann"]

    regraded = course("grade", "submissions", "--solutions", "solutions", "--out", "out", "--student", "ada",
                      "--timeout", "60", cwd=root)
    assert regraded.returncode == 0, regraded.stderr[-3000:]
    resumed = course("grade", "submissions", "--solutions", "solutions", "--out", "out", "--resume", "--timeout", "60",
                     cwd=root)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    entries = _entries(out)
    ada, cy = entries["ada"], entries["cy"]
    assert (ada["score"], ada["complete"], ada["awaiting_ta"], len(ada["gradings"])) == (10, True, 0, 2)
    assert (cy["score"], cy["complete"]) == (8.5, True)
    mark = next(change for change in ada["final"]["adjustments"] if change["what"] == "ch2/written_why_square")
    assert mark["who"] == "Ann" and mark["criteria"] == {"same_sign": 1, "example": 1}
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", COURSE_ID) as gradebook:
        grade = gradebook.find_grade("written_why_square", "ch2", LAB, "ada")
        assert (grade.manual_score, grade.needs_manual_grade) == (2, False)
        comment = gradebook.find_comment("written_why_square", "ch2", LAB, "ada").manual_comment
        assert "Right, with the example." in comment and "1/1  Says that a product" in comment

    # Not released: the pages say a TA grades those points, and nothing of the marks or the rubric.
    for student in ("ada", "cy"):
        page = _feedback(out, student)
        assert "2 points are graded by your TA; marks appear here once released" in page
        assert "Right, with the example" not in page and "see</b>" not in page and "Says that a product" not in page
    assert unreleased_feedback_leaks(out, LAB, [questions], given=given_text(root / "solutions")) == []
    scores, _ = _canvas(root)
    assert scores == {"ada": "10", "ben": "8", "cy": "8.5"}, "the export has the marks before they are released"

    released = course("mark", "out", "--lab", LAB, "--questions", "questions", "--solutions", "solutions", "--release",
                      "--why", "ch2 marked", cwd=root)
    assert released.returncode == 0 and "released" in released.stdout, released.stderr
    ada_page, cy_page = _feedback(out, "ada"), _feedback(out, "cy")
    assert "Right, with the example." in ada_page and "Says that a product of two numbers of the same sign" in ada_page
    assert "&lt;b&gt;see&lt;/b&gt; the product &amp; its sign" in cy_page and "<b>see</b>" not in cy_page
    assert "partly: gives 9 without the product" in cy_page
    assert "window.pwned" not in cy_page.split("course-written-answers")[1].split("</div>")[0]
    withdrawn = course("mark", "out", "--lab", LAB, "--questions", "questions", "--solutions", "solutions",
                       "--withdraw", cwd=root)
    assert withdrawn.returncode == 0 and "Right, with the example" not in _feedback(out, "ada")
