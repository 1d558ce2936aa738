"""The instructor's term on a class handed in through an LMS (``tests/lms_fixture.py``): every mistake
an instructor or a student makes is accounted for, every grade survives the next regrade, and every
lost point can be explained.

The first tests read the download without grading it (intake, options, the --out folder); then one
class is graded once (six hand-ins of the fixture lab, seconds each) and taken through the term:
formgrader's edits, ``course adjust``, a test fixed mid-term and one student regraded, the export.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograde.intake import GRADED, IGNORED, NOT_GRADED, course_chapters, take_in
from autograde.lms import read_roster
from tests.grading_fixture import HIDDEN_MARKER, LAB, write_fixture_lab
from tests.lms_fixture import (ASSIGNMENT, DUE, EXPECTED, LATE_RULE, canvas_download, intake_by_entry, notebook,
                               report_entries)


def course(*args, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograde.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def download(tmp_path):
    write_fixture_lab(tmp_path / "solutions")
    return tmp_path, canvas_download(tmp_path)


def take(root: Path, lms, roster: bool = True):
    from autograde.due import read_receipts

    chapters = course_chapters(root / "solutions", [LAB])
    return take_in(lms.folder, root / "unpacked", chapters, roster=read_roster(lms.roster) if roster else None,
                   receipts={"*": read_receipts(lms.received)})


def by_entry(intake) -> dict:
    return {source.entry: source for source in intake.sources}


# ---- intake: nothing dropped in silence ---------------------------------------------------------


def test_every_file_of_the_download_gets_one_line_with_what_became_of_it(download):
    """A loose notebook, a .rar, a truncated zip and the instructor's notes: once in neither list, now each a line."""
    root, lms = download
    intake = take(root, lms)
    entries = sorted(path.name for path in lms.folder.iterdir())
    assert sorted(source.entry for source in intake.sources) == entries, "exactly one line per entry"
    lines = by_entry(intake)
    assert lines["ch2.ipynb"].outcome == NOT_GRADED and "its name says no student's" in lines["ch2.ipynb"].reason
    assert lines["blackerin_105_5005_erin.rar"].outcome == NOT_GRADED
    assert ".rar archive: only zips are read" in lines["blackerin_105_5005_erin.rar"].reason
    frank = lines["greenfrank_106_5006_frank-20260112T200000Z.zip"]
    assert frank.outcome == NOT_GRADED and "damaged or truncated" in frank.reason
    assert lines["notes.txt"].outcome == IGNORED
    # Dave uploaded a notebook, not a zip: the LMS's name says whose, its name which chapter.
    dave = lines["browndave_104_5004_ch1.ipynb"]
    assert dave.hand_ins == [f"dbrown/{LAB}"] and (root / "unpacked" / "dbrown" / LAB / "ch1.ipynb").is_file()


def test_two_students_who_typed_the_same_id_stay_two_and_each_is_flagged(download):
    root, lms = download
    without_roster = take(root, lms, roster=False)
    assert {f"smithalice-101/{LAB}", f"jonesbob-102/{LAB}"} <= set(without_roster.hand_ins)
    assert f"s1234567/{LAB}" not in without_roster.hand_ins, "neither is silently the other"
    with_roster = take(root, lms)
    alice = with_roster.hand_ins[f"asmith/{LAB}"]
    assert alice.claimed == "s1234567" and alice.lms.user_id == "101"
    assert any(flag.startswith("conflict: the zip holds the folder s1234567/") for flag in alice.flags)
    assert f"bjones/{LAB}" in with_roster.hand_ins


def test_a_zip_hands_in_only_for_its_own_student(download):
    """mallory-henry-<time>.zip holding a blank henry/ with a later timestamp replaced henry's own hand-in."""
    root, lms = download
    intake = take(root, lms)
    mallory = by_entry(intake)["mallory-henry-20260112T230000Z.zip"]
    assert mallory.outcome == NOT_GRADED and "a student its name does not name" in mallory.reason
    assert intake.hand_ins[f"henry/{LAB}"].source.entry == "henry-20260112T100000Z.zip"


def test_notebooks_outside_a_lab_folder_are_graded_as_their_lab_and_flagged(download):
    root, lms = download
    grace = by_entry(take(root, lms))["grace"]
    assert grace.hand_ins == [f"grace/{LAB}"] and any(note.startswith("placed:") for note in grace.notes)
    assert sorted(p.name for p in (root / "unpacked" / "grace" / LAB).iterdir()) == ["ch1.ipynb", "ch2.ipynb"]


def test_the_roster_names_who_handed_in_nothing_and_the_lms_gives_the_receipt_times(download):
    root, lms = download
    intake = take(root, lms)
    assert intake.roster_missing == {LAB: ["eblack", "fgreen", "ivy"]} and intake.roster_unknown == []
    bob = intake.hand_ins[f"bjones/{LAB}"]
    assert bob.lms.late and bob.receipt.received.isoformat() == "2026-01-13T09:00:10"
    assert intake.hand_ins[f"grace/{LAB}"].receipt is None   # collected by hand: only her claim


# ---- the command's options and its --out folder -------------------------------------------------


def test_a_due_date_without_a_time_is_refused_naming_the_option(download):
    root, lms = download
    run = course("grade", lms.folder, "--solutions", "solutions", "--out", "out", "--due", "2026-01-12", cwd=root)
    assert run.returncode == 1 and "--due 2026-01-12: a date alone would be read as 00:00 UTC" in run.stderr
    bad_rule = course("grade", lms.folder, "--solutions", "solutions", "--out", "out", "--late-penalty", "10%",
                      cwd=root)
    assert bad_rule.returncode == 1 and "--late-penalty '10%': expected RATE/PERIOD" in bad_rule.stderr
    assert not (root / "out" / "results").exists()


def test_a_run_that_grades_nothing_exits_non_zero_and_says_why(download):
    root, _ = download
    nothing = root / "nothing"
    nothing.mkdir()
    (nothing / "erin.rar").write_bytes(b"Rar!")
    (nothing / "ch2.ipynb").write_bytes(notebook("ch2"))
    run = course("grade", nothing, "--solutions", "solutions", "--out", "out", cwd=root)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "nothing was graded" in run.stderr
    assert re.search(r"erin\.rar +not graded +a \.rar archive", run.stdout)


def test_two_runs_cannot_write_one_out_folder(download):
    from autograde.out_folder import claim

    root, lms = download
    with claim(root / "out", "a grading run in another terminal"):
        run = course("grade", lms.folder, "--solutions", "solutions", "--out", "out", cwd=root)
    assert run.returncode == 1
    assert re.search(r"is being written by another `course grade` \(process \d+ on .+, started .+: a grading run "
                     r"in another terminal\)", run.stderr), run.stderr


def test_a_second_class_into_an_out_folder_needs_resume(download):
    from autograde.out_folder import record_source
    from autograde.results import LabResult
    from autograde.store import ResultStore, StoredResult

    root, lms = download
    out = root / "out"
    ResultStore(out).save(StoredResult(LabResult("zoe", LAB), {}, complete=True))
    record_source(out, root / "section-a")
    run = course("grade", lms.folder, "--solutions", "solutions", "--out", "out", cwd=root)
    assert run.returncode == 1 and "already holds the grades of another SUBMISSIONS" in run.stderr
    assert "Pass --resume to add these hand-ins to that class" in run.stderr


# ---- one class through the term ------------------------------------------------------------------


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    """The download graded once, with the roster, the LMS's receipt times, the due time and a late rule."""
    root = tmp_path_factory.mktemp("term")
    write_fixture_lab(root / "solutions")
    lms = canvas_download(root)
    run = course("grade", lms.folder, "--solutions", "solutions", "--out", "out", "--roster", lms.roster,
                 "--received", lms.received, "--due", DUE, "--late-penalty", LATE_RULE, "--jobs", "2",
                 "--timeout", "30", cwd=root)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return root, lms, run


pytestmark_term = pytest.mark.slow


@pytestmark_term
def test_the_first_grading_lists_every_entry_and_grades_each_hand_in_as_its_own_student(term):
    root, lms, run = term
    entries = report_entries(root / "out")
    assert {student: (entry["score"], entry["max_score"]) for student, entry in entries.items()} == EXPECTED
    lines = intake_by_entry(root / "out")
    assert sorted(lines) == sorted(path.name for path in lms.folder.iterdir())
    assert lines["whitecarol_103_5003_carol-20260112T210000Z.zip"]["outcome"] == GRADED
    table = run.stdout.split("SUBMISSIONS:", 1)[1].split("\nstudent ", 1)[0]
    for entry in lines:
        assert len(re.findall(rf"^{re.escape(entry[:57])}", table, re.MULTILINE)) == 1, entry
    assert "roster: 3 handed in nothing for lab00-fixture: eblack, fgreen, ivy" in run.stdout


@pytestmark_term
def test_a_renamed_notebook_is_graded_as_its_chapter_and_flagged_everywhere(term):
    root, _, run = term
    carol = report_entries(root / "out")["carol"]
    ch1 = next(nb for nb in carol["notebooks"] if nb["name"] == "ch1")
    assert ch1["handed_in_as"] == "ch1-Copy1.ipynb" and ch1["score"] == 6
    assert any("ch1-Copy1.ipynb: graded as ch1.ipynb" in problem for problem in carol["problems"])
    assert re.search(r"^carol .*ch1 graded from ch1-Copy1\.ipynb \(renamed\)", run.stdout, re.MULTILINE)


@pytestmark_term
def test_lateness_rests_on_the_lms_receipt_and_the_penalty_reaches_grades_csv(term):
    root, _, run = term
    bob = report_entries(root / "out")["bjones"]
    assert bob["hand_in"]["status"] == "late by the LMS's receipt" and bob["hand_in"]["late_penalty"] == 0.8
    assert "received.csv" in bob["hand_in"]["basis"]
    with open(root / "out" / "grades.csv", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert (rows["bjones"]["raw_score"], rows["bjones"]["late_submission_penalty"], rows["bjones"]["score"]) == \
        ("8", "0.8", "7.2")
    assert rows["bjones"]["timestamp"] == "2026-01-13 09:00:10.000000 UTC", "the receipt, not bob's claim of 23:00"
    assert re.search(r"^bjones .*late by 9 h 01 min \(LMS receipt\), -0\.8 late penalty", run.stdout, re.MULTILINE)


@pytestmark_term
def test_every_lost_point_is_on_record_for_the_instructor_and_nowhere_a_student_looks(term):
    root, _, _ = term
    out = root / "out"
    record = json.loads((out / "instructor" / LAB / "henry.json").read_text())
    hidden = record["ch1"]["test_cells"]["test_add_one"]
    assert hidden["message"] == "hidden check failed" and HIDDEN_MARKER in hidden["grader_traceback"]
    assert record["ch1"]["test_cells"]["test_warnings"]["after_hidden_checks"]
    why = course("why", out, "henry", cwd=root)
    assert why.returncode == 0 and HIDDEN_MARKER in why.stdout and "ch1/test_warnings: -1" in why.stdout
    for path in [*(out / "feedback").rglob("*"), *(out / "results").rglob("*.json"), out / "report.json",
                 out / "grades.csv"]:
        if path.is_file():
            assert HIDDEN_MARKER not in path.read_text(errors="replace"), path


@pytestmark_term
def test_the_term_through_formgrader_adjustments_a_test_fix_a_regrade_and_the_export(term, tmp_path):
    """A TA's formgrader score and an instructor's regrade outcome survive --resume and a regrade on fixed
    tests; the regrade keeps the old score; the class graded on two versions of the tests is flagged;
    the Canvas file fills the instructor's own column, with empty cells where nothing was graded."""
    import shutil

    from nbgrader.api import Gradebook

    from autograde.layout import COURSE_ID

    source, lms, _ = term
    root = tmp_path / "term"
    shutil.copytree(source, root, symlinks=True)
    out = root / "out"
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", COURSE_ID) as gradebook:   # a TA in formgrader
        gradebook.find_grade("test_double", "ch1", LAB, "grace").manual_score = 1.5
        gradebook.db.commit()
    adjusted = course("adjust", out, "dbrown", "--score", "7", "--why", "regrade request #3: ch2 came by e-mail",
                      "--comment", "your ch2 counts", "--by", "prof", cwd=root)
    assert adjusted.returncode == 0, adjusted.stderr
    assert "rebuilt" in adjusted.stdout and report_entries(out)["dbrown"]["score"] == 7
    page = (out / "feedback" / "dbrown" / LAB / "ch1.html").read_text()
    assert "course-staff-adjustments" in page and "your ch2 counts" in page and "regrade request" not in page
    penalty = course("adjust", out, "henry", "--penalty", "25%", "--why", "integrity case", cwd=root)
    assert penalty.returncode == 0, penalty.stderr

    resumed = course("grade", lms.folder, "--solutions", "solutions", "--out", "out", "--resume", "--roster",
                     lms.roster, "--timeout", "30", cwd=root)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "graded 0 of 6, 6 already graded (--resume)" in resumed.stdout
    entries = report_entries(out)
    assert entries["grace"]["score"] == 6.5 and entries["dbrown"]["score"] == 7 and entries["henry"]["score"] == 3
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", COURSE_ID) as gradebook:
        assert gradebook.find_grade("test_double", "ch1", LAB, "grace").manual_score == 1.5, "formgrader's score kept"

    # A test is fixed mid-term (its hidden check gets a second input) and one student is regraded.
    solution = root / "solutions" / LAB / "ch1.ipynb"
    fixed = nbformat.read(solution, as_version=4)
    test = next(c for c in fixed.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_add_one")
    test.source = test.source.replace("### END HIDDEN TESTS", "assert add_one(-1) == 0\n### END HIDDEN TESTS")
    nbformat.write(fixed, solution)
    regraded = course("grade", lms.folder, "--solutions", "solutions", "--out", "out", "--student", "henry",
                      "--timeout", "30", cwd=root)
    assert regraded.returncode == 0, regraded.stderr[-3000:]
    assert "graded on 2 version(s) of its tests" in regraded.stdout and "graded on older tests" in regraded.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["labs"][LAB]["mixed_tests"]
    henry = report_entries(out)["henry"]
    assert [g["score"] for g in henry["gradings"]] == [5, 5] and henry["gradings"][0]["tests"] != \
        henry["gradings"][1]["tests"], "the old grading is kept beside the new one"
    assert henry["score"] == 3, "the penalty outlives the regrade"

    exported = course("export", out, "--format", "canvas", "--assignment", f"{LAB}=Lab 0 fixture",
                      "--out", root / "canvas.csv", cwd=root)
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.reader(io.StringIO((root / "canvas.csv").read_text())))
    assert rows[0][5:] == [ASSIGNMENT], "the instructor's own column, so the import fills it"
    by_login = {row[3]: row[5] for row in rows[2:]}
    assert by_login == {"asmith": "8", "bjones": "7.2", "carol": "8", "dbrown": "7", "eblack": "", "fgreen": "",
                        "grace": "6.5", "henry": "3", "ivy": ""}
    notes = exported.stderr
    assert "graded from renamed notebooks (ch1-Copy1.ipynb)" in notes and "conflict" in notes
    assert "graded on 2 version(s) of its tests" in notes and "3 student(s) of the roster have no graded" in notes
    assert "bjones/lab00-fixture: late penalty -0.8 (late by the LMS's receipt, 10%/day,max=50%)" in notes
    history = course("history", out, "--student", "henry", cwd=root)
    assert history.stdout.count(" graded ") == 2 and "integrity case" in history.stdout
