"""The student's tools around handing in: `course check`, `course submit --zip`, `course grade` on zips.

A tiny lab (``lab00-handin``, one notebook with three exercises and a GPU-only check) is written
and released in a temporary course folder; the checks run on it in a real kernel. The CLI tests
use the repository's own release (``labs/``), which is what ``course check`` and ``course submit``
compare with in the instructor's checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest

from autograde import authoring as a
from autograde.intake import NOT_GRADED, take_in
from autograde.layout import GradingError
from autograde.unpack import MAX_FILE_BYTES, UnpackError, read_zip
from course_lib.cli import STUDENT_COMMANDS, main
from course_lib.handin.check import (BLOCKED, FAILED, HIDDEN_ONLY, NOT_ATTEMPTED, PASSED, SKIPPED_GPU, check_notebook,
                                     inspect_file)
from course_lib.handin.manifest import release_manifest
from course_lib.handin.submit import SubmitError, plan_hand_in, write_folder, write_zip
from tests.import_graph import foreign_imports

ROOT = Path(__file__).resolve().parent.parent
LAB = "lab00-handin"
REAL_LAB = "lab01-text-to-tensors"


def _source_notebook():
    return a.notebook([
        a.markdown("# Hand-in fixture"),
        a.answer("add_one", '''
            def add_one(x):
                """int -> int"""
                ### BEGIN SOLUTION
                return x + 1
                ### END SOLUTION
        '''),
        a.tests("test_add_one", 2, '''
            assert add_one(1) == 2, "add_one(1) should be 2"
            print("add_one: visible tests passed")
            ### BEGIN HIDDEN TESTS
            assert add_one(41) == 42
            ### END HIDDEN TESTS
        '''),
        a.answer("double", '''
            def double(x):
                ### BEGIN SOLUTION
                return 2 * x
                ### END SOLUTION
        '''),
        a.tests("test_double", 3, '''
            from course_lib.checks import expect_equal
            expect_equal(double(2), 4, "double(2)", hint="twice the input")
        '''),
        a.answer("square", '''
            def square(x):
                ### BEGIN SOLUTION
                return x * x
                ### END SOLUTION
        '''),
        a.tests("test_square", 1, '''
            assert square(3) == 9, "square(3) should be 9"
        '''),
        a.tests("test_square_gpu", 1, '''
            from course_lib.checks import require_gpu
            require_gpu("the fixture's GPU check")
        ''', needs_gpu=True),
        a.answer("halve", '''
            def halve(x):
                """int -> float"""
                ### BEGIN SOLUTION
                return x / 2
                ### END SOLUTION
        '''),
        a.tests("test_halve_hidden", 2, '''
            # halve is checked with hidden inputs when your notebook is graded.
            ### BEGIN HIDDEN TESTS
            assert halve(8) == 4
            ### END HIDDEN TESTS
        '''),
        a.code('''
            # A worked example that runs your halve.
            halves = [halve(n) for n in (2, 4)]
            print(halves)
        '''),
    ])


def _release(source):
    """What `course release` makes of a source notebook (nbgrader's own preprocessors)."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions, ComputeChecksums, LockCells

    notebook, resources = nbformat.reads(nbformat.writes(source), as_version=4), {}
    for preprocessor in (LockCells, ClearSolutions, ClearHiddenTests, ComputeChecksums):
        notebook, resources = preprocessor().preprocess(notebook, resources)
    return notebook


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course folder: solutions/lab00-handin/ch1.ipynb and its release in labs/."""
    root = tmp_path_factory.mktemp("handin")
    source = _source_notebook()
    (root / "solutions" / LAB).mkdir(parents=True)
    nbformat.write(source, root / "solutions" / LAB / "ch1.ipynb")
    (root / "labs" / LAB).mkdir(parents=True)
    nbformat.write(_release(source), root / "labs" / LAB / "ch1.ipynb")
    return root


@pytest.fixture(scope="module")
def manifest(course):
    return release_manifest(course / "labs")


def _student(course: Path, folder: Path, answers: dict[str, str], *, name: str = "ch1.ipynb",
             edit: dict[str, str] | None = None) -> Path:
    """The release with answer cells (and, to misbehave, test cells) replaced; written to folder/name."""
    notebook = nbformat.read(course / "labs" / LAB / "ch1.ipynb", as_version=4)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = textwrap.dedent(answers[grade_id]).strip()
        if edit and grade_id in edit:
            cell.source = edit[grade_id]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / name)
    return folder / name


ADD_ONE = "def add_one(x):\n    return x + 1"
DOUBLE_WRONG = "def double(x):\n    return 2 * x + 1"
DOUBLE = "def double(x):\n    return 2 * x"
SQUARE = "def square(x):\n    return x * x"
HALVE = "def halve(x):\n    return x / 2"
HALVE_WITH_A_HELPER_ELSEWHERE = "def halve(x):\n    return half_of(x)"   # half_of is defined nowhere


# --------------------------------------------------------------------------------------------
# course check
# --------------------------------------------------------------------------------------------


def test_check_says_per_exercise_passed_failed_or_not_attempted_and_runs_the_released_tests(course, manifest,
                                                                                            tmp_path, capsys):
    # double is wrong, and its test cell was "fixed" by the student: the released test still runs.
    path = _student(course, tmp_path / LAB, {"add_one": ADD_ONE, "double": DOUBLE_WRONG},
                    edit={"test_double": "pass  # my test now"})
    report = check_notebook(path, manifest=manifest, gpu=False, progress=False)
    printed = capsys.readouterr().out
    by_id = {exercise.grade_id: exercise for exercise in report.exercises}
    assert [exercise.grade_id for exercise in report.exercises] == ["add_one", "double", "square", "halve"]
    assert by_id["add_one"].status == PASSED and by_id["add_one"].points == 2
    assert by_id["double"].status == FAILED and by_id["double"].points == 3
    assert "expected: 4" in by_id["double"].message and "got:      5" in by_id["double"].message
    assert "hint: twice the input" in by_id["double"].message
    assert by_id["square"].status == NOT_ATTEMPTED and "as released" in by_id["square"].message
    assert by_id["square"].points == 1   # the GPU-only check is not at stake on a CPU
    assert [test.status for test in by_id["square"].tests] == [NOT_ATTEMPTED, SKIPPED_GPU]
    assert by_id["halve"].status == NOT_ATTEMPTED and by_id["halve"].hidden_points == 2 and by_id["halve"].points == 0
    (waiting,) = report.other_errors   # the worked example that runs halve, still the release's stub
    assert waiting.kind == "not written yet" and waiting.answer == "halve", waiting
    assert not report.ready and not report.all_passed
    edited = next(check for check in report.file_checks if check.what == "test cells")
    assert not edited.ok and "edited: test_double" in edited.detail
    for words in ("add_one", "passed", "failed", "not attempted", "expected: 4", "The file to hand in? NO",
                  "Total: visible: 2 of 6 points; 2 more points are graded only with hidden inputs; 1 more point "
                  "needs a GPU.",
                  "cell `# A worked example that runs your halve.` needs your `halve` (answer cell 'halve'), "
                  "not written yet"):
        assert words in printed, words


def test_a_finished_notebook_is_ready_and_a_check_inside_it_does_not_recurse(course, manifest, tmp_path, capsys):
    path = _student(course, tmp_path / LAB, {"add_one": ADD_ONE, "double": DOUBLE, "square": SQUARE, "halve": HALVE})
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(
        "from course_lib.handin import check_notebook\nresult = check_notebook('ch1.ipynb')\n"
        "assert result is None, 'a check inside a check must do nothing'"))
    nbformat.write(notebook, path)
    report = check_notebook(path, manifest=manifest, gpu=False, progress=False)
    assert report.ready and report.all_passed, report.text()
    # A test cell with no visible check is never "passed": it is graded later, with hidden inputs.
    assert [exercise.status for exercise in report.exercises] == [PASSED, PASSED, PASSED, HIDDEN_ONLY]
    assert report.other_errors == []   # the cell that calls check_notebook ran and did nothing
    printed = capsys.readouterr().out
    assert "Hand it in as <student id>/lab00-handin/ch1.ipynb" in printed
    assert re.search(r"halve +\(2\) +graded later with hidden inputs \(2 points: no visible check", printed), printed
    assert repr(report) == ("CheckReport(ch1.ipynb: visible: 6 of 6 points; 2 more points are graded only with hidden "
                            "inputs; 1 more point needs a GPU; ready to hand in: yes)")


def test_a_worked_example_that_fails_in_an_answer_is_reported_against_that_answer(course, manifest, tmp_path,
                                                                                  capsys):
    # halve passes its (hidden-only) test cell here, then breaks the worked example that runs it.
    path = _student(course, tmp_path / LAB, {"add_one": ADD_ONE, "double": DOUBLE, "square": SQUARE,
                                             "halve": HALVE_WITH_A_HELPER_ELSEWHERE})
    report = check_notebook(path, manifest=manifest, gpu=False, progress=False)
    printed = capsys.readouterr().out
    (error,) = report.other_errors
    assert (error.kind, error.answer, error.function, error.ename) == ("your answer", "halve", "halve", "NameError")
    halve = report.exercises[-1]
    assert halve.status == FAILED and "your `halve` (answer cell 'halve') raised NameError" in halve.message
    assert not report.all_passed and report.ready
    assert ("your `halve` (answer cell 'halve') raised NameError: name 'half_of' is not defined, in cell "
            "`# A worked example that runs your halve.`") in printed
    assert "not done" not in printed and "not written yet" not in printed


def test_the_totals_add_up_over_several_notebooks_and_the_reports_go_to_json(course, manifest, tmp_path, capsys,
                                                                              monkeypatch):
    import course_lib.handin.manifest as manifest_module

    monkeypatch.setattr(manifest_module, "load_manifest", lambda: manifest)
    done = _student(course, tmp_path / "a" / LAB, {"add_one": ADD_ONE, "double": DOUBLE, "square": SQUARE,
                                                   "halve": HALVE})
    half = _student(course, tmp_path / "b" / LAB, {"add_one": ADD_ONE})
    code = main(["check", str(done), str(half), "--json", str(tmp_path / "reports.json")])
    printed = capsys.readouterr().out
    assert code == 1   # the second one has visible tests to fix
    assert ("All 2 notebooks: visible: 8 of 12 points; 4 more points are graded only with hidden inputs; "
            "2 more points need a GPU; 2 of 2 files ready to hand in.") in printed, printed
    reports = json.loads((tmp_path / "reports.json").read_text())
    assert [report["totals"]["passed"] for report in reports] == [6, 2]
    assert [exercise["status"] for exercise in reports[0]["exercises"]] == ["passed"] * 3 + ["graded later with hidden inputs"]


def test_an_error_from_another_process_is_blamed_on_the_answer_its_message_names():
    from course_lib.handin.blame import AnswerCells, blame

    answers = AnswerCells()
    answers.ran("pack_kv", "def pack_kv(cache, table):\n    return _flat(cache)\n\ndef _flat(x):\n    return x", 3,
                unchanged=False)
    answers.ran("unpack_kv", "def unpack_kv(data):\n    raise NotImplementedError()", 4, unchanged=True)
    worker = {"ename": "RuntimeError", "evalue": "the prefill worker failed: NameError: name '_flat' is not defined",
              "traceback": ["Cell In[9], line 2\n----> 2 run_disaggregated(pack_kv, unpack_kv)"]}
    error = blame(worker, "cell `run_disaggregated(pack_kv, unpack_kv)`", "run_disaggregated(pack_kv, unpack_kv)",
                  answers)
    assert (error.kind, error.answer, error.function) == ("your answer", "pack_kv", "_flat")
    assert "names your `_flat` (answer cell 'pack_kv')" in error.text()
    stub = {"ename": "NotImplementedError", "evalue": "",
            "traceback": ["Cell In[9], line 2, in <module>", "Cell In[4], line 2, in unpack_kv(data)"]}
    assert blame(stub, "cell `x`", "unpack_kv(1)", answers).kind == "not written yet"
    locked = {"ename": "NotImplementedError", "evalue": "course_lib.metrics.percentile is your exercise in Lab 0.2 "
              "chapter 4 (...): write it there and pass your version in; ...", "traceback": []}
    assert blame(locked, "cell `x`", "plot(results)", answers).kind == "locked in this kit"
    plain = {"ename": "ValueError", "evalue": "bad input", "traceback": ["Cell In[9], line 1, in <module>"]}
    assert blame(plain, "cell `x`", "pack_kv(1, 2)", answers).text() == \
        "cell `x` raised ValueError: bad input (it runs your `pack_kv`)"


def test_wrong_name_wrong_folder_copied_and_deleted_cells_are_named(course, manifest, tmp_path):
    path = _student(course, tmp_path / "Downloads", {"add_one": ADD_ONE}, name="ch1 (1).ipynb")
    notebook = nbformat.read(path, as_version=4)
    test_cells = [cell for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade")]
    copy = nbformat.from_dict(json.loads(json.dumps(test_cells[0])))
    copy.id = "copied-cell"
    notebook.cells.append(copy)                                                      # copied, grade_id and all
    notebook.cells.remove(test_cells[-1])                                           # deleted
    nbformat.write(notebook, path)
    _, lab, name, checks = inspect_file(path, manifest)
    problems = {check.what: check.detail for check in checks if not check.ok}
    assert (lab, name) == (LAB, "ch1")   # recognised from its cells
    assert "rename it back to ch1.ipynb" in problems["name"]
    assert f"<student id>/{LAB}/ch1.ipynb" in problems["folder"]
    assert "test_add_one" in problems["copied cells"]
    assert "deleted: test_halve_hidden" in problems["test cells"]
    assert "JSON" not in problems


def test_a_path_relative_to_the_notebook_folder_is_checked_in_that_folder(course, manifest, tmp_path, monkeypatch):
    path = _student(course, tmp_path / LAB, {})
    monkeypatch.chdir(path.parent)   # a notebook cell's working folder
    _, lab, name, checks = inspect_file(Path("ch1.ipynb"), manifest)
    assert (lab, name) == (LAB, "ch1") and all(check.ok for check in checks), checks


def test_a_file_that_is_not_a_notebook_is_not_run_and_fails_the_check(tmp_path, capsys):
    folder = tmp_path / REAL_LAB
    folder.mkdir()
    (folder / "04_paging.ipynb").write_text('{"cells": [', encoding="utf-8")
    assert main(["check", str(folder / "04_paging.ipynb")]) == 1
    printed = capsys.readouterr().out
    assert "not run: the file is not a readable notebook" in printed
    assert "FIX  JSON: not valid JSON" in printed
    assert "ok   name: 04_paging.ipynb is a chapter of lab01-text-to-tensors" in printed


def test_an_unknown_notebook_is_named_as_such(manifest, tmp_path):
    path = tmp_path / "notes.ipynb"
    nbformat.write(a.notebook([a.markdown("# my notes")]), path)
    _, lab, _, checks = inspect_file(path, manifest)
    assert lab is None and "no notebook of this kit" in checks[0].detail and not checks[0].ok


STUB_SCRIPT = """
from IPython.core.interactiveshell import InteractiveShell
from course_lib.handin.stubs import install, load_ipython_extension
shell = InteractiveShell.instance()
load_ipython_extension(shell)
print("installed in the instructor's edition:", bool(shell.custom_exceptions))
assert install(shell)
shell.run_cell("def double(x):\\n    # YOUR CODE HERE\\n    raise NotImplementedError()")
result = shell.run_cell("def test():\\n    return double(2)\\ntest()")
print("cell failed with:", type(result.error_in_exec).__name__)
shell.run_cell("def f():\\n    raise NotImplementedError('the library says where')\\nf()")
"""


def test_an_exercise_not_written_yet_fails_with_the_course_message():
    run = subprocess.run([sys.executable, "-c", STUB_SCRIPT], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TERM": "dumb"})
    out = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout)   # IPython's colours
    assert run.returncode == 0, run.stderr
    assert "installed in the instructor's edition: False" in out
    assert "NotImplementedError: double is not written yet." in out
    assert re.search(r"expected: your code in place of `raise NotImplementedError\(\)` \(Cell In\[1\], line 3\)", out)
    assert "hint: write double, run its cell (Shift+Enter), then run this cell again." in out
    assert "cell failed with: NotImplementedError" in out   # still an error: Run All stops, graders see it
    assert "the library says where" in out and out.count("is not written yet") == 1   # other errors untouched


def test_check_and_submit_are_student_commands_and_grade_is_not():
    assert {"check", "submit"} <= set(STUDENT_COMMANDS) and "grade" not in STUDENT_COMMANDS


# --------------------------------------------------------------------------------------------
# course submit
# --------------------------------------------------------------------------------------------


def test_submit_zip_holds_the_grader_layout_and_a_timestamp(course, manifest, tmp_path):
    labs = tmp_path / "labs"
    _student(course, labs / LAB, {"add_one": ADD_ONE})
    before = datetime.now(timezone.utc)
    hand_in = plan_hand_in("s1234567", labs, manifest=manifest)
    archive = write_zip(hand_in, tmp_path / "out")
    match = re.fullmatch(r"s1234567-(\d{8}T\d{6}Z)\.zip", archive.name)
    assert match, archive.name
    named = datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    assert before - timedelta(seconds=1) <= named <= datetime.now(timezone.utc)
    with zipfile.ZipFile(archive) as zipped:
        assert sorted(zipped.namelist()) == [f"s1234567/{LAB}/ch1.ipynb", f"s1234567/{LAB}/timestamp.txt"]
        from nbgrader.utils import parse_utc

        stamp = parse_utc(zipped.read(f"s1234567/{LAB}/timestamp.txt").decode().strip())
        assert abs(stamp.replace(tzinfo=timezone.utc) - named) < timedelta(seconds=2)
        handed = nbformat.reads(zipped.read(f"s1234567/{LAB}/ch1.ipynb").decode(), as_version=4)
    assert any(cell.source == ADD_ONE for cell in handed.cells)


def test_submit_refuses_a_broken_notebook_a_bad_id_and_nothing_to_hand_in(course, manifest, tmp_path):
    labs = tmp_path / "labs"
    (labs / LAB).mkdir(parents=True)
    shutil.copy(course / "labs" / LAB / "ch1.ipynb", labs / LAB / "ch1.ipynb")
    with pytest.raises(SubmitError, match="no notebook .* has a changed answer cell"):
        plan_hand_in("s1", labs, manifest=manifest)
    with pytest.raises(SubmitError, match="--student '../s1'"):
        plan_hand_in("../s1", labs, [LAB], manifest=manifest)
    (labs / LAB / "ch1.ipynb").write_text("{broken", encoding="utf-8")
    with pytest.raises(SubmitError, match="ch1.ipynb: not valid JSON"):
        plan_hand_in("s1", labs, [LAB], manifest=manifest)


def test_submit_folder_is_replaced_on_a_second_hand_in(course, manifest, tmp_path):
    labs = tmp_path / "labs"
    path = _student(course, labs / LAB, {"add_one": ADD_ONE})
    out = tmp_path / "submission"
    write_folder(plan_hand_in("s1", labs, manifest=manifest), out)
    _student(course, labs / LAB, {"add_one": ADD_ONE, "double": DOUBLE})
    write_folder(plan_hand_in("s1", labs, manifest=manifest), out)
    assert sorted(p.name for p in (out / "s1" / LAB).iterdir()) == ["ch1.ipynb", "timestamp.txt"]
    assert (out / "s1" / LAB / "ch1.ipynb").read_bytes() == path.read_bytes()


def test_submit_command_on_the_real_release_hands_in_only_the_changed_lab(tmp_path, capsys):
    labs = tmp_path / "labs"
    shutil.copytree(ROOT / "labs" / REAL_LAB, labs / REAL_LAB)
    shutil.copytree(ROOT / "labs" / "lab02-prefill-vs-decode", labs / "lab02-prefill-vs-decode")
    notebook = nbformat.read(labs / REAL_LAB / "04_paging.ipynb", as_version=4)
    answer = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "block_allocator")
    answer.source = answer.source.replace("# YOUR CODE HERE\n        raise NotImplementedError()",
                                          "self.num_blocks = num_blocks", 1)
    nbformat.write(notebook, labs / REAL_LAB / "04_paging.ipynb")
    assert main(["submit", "--student", "s42", "--zip", "--labs-dir", str(labs), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    archive = next(tmp_path.glob("s42-*.zip"))
    with zipfile.ZipFile(archive) as zipped:
        names = sorted(zipped.namelist())
    expected = sorted(f"s42/{REAL_LAB}/{p.name}" for p in (ROOT / "labs" / REAL_LAB).glob("*.ipynb"))
    assert names == sorted([*expected, f"s42/{REAL_LAB}/timestamp.txt"])
    assert f"{REAL_LAB}: 5 notebooks" in printed and "lab02" not in printed
    assert str(archive.resolve()) in printed   # where the zip is, whatever folder the student ran it from
    assert "Not handed in yet: upload this zip" in printed


# --------------------------------------------------------------------------------------------
# course grade on zips: unpacked safely
# --------------------------------------------------------------------------------------------


def _zip(path: Path, entries: dict[str, bytes | str], *, links: tuple[str, ...] = ()) -> Path:
    with zipfile.ZipFile(path, "w") as zipped:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = ((stat.S_IFLNK | 0o777) if name in links else (stat.S_IFREG | 0o644)) << 16
            zipped.writestr(info, data)
    return path


NOTEBOOK = nbformat.writes(a.notebook([a.markdown("# x")]))


@pytest.mark.parametrize("entry, words", [
    ("../evil/lab00-handin/ch1.ipynb", "a '..' part"),
    ("s1/../../evil.ipynb", "a '..' part"),
    ("/etc/s1/lab00-handin/ch1.ipynb", "an absolute path"),
    ("C:/s1/lab00-handin/ch1.ipynb", "an absolute path"),
    ("s1\\lab00-handin\\ch1.ipynb", "a backslash"),
    ("s1/./lab00-handin/ch1.ipynb", "an empty or '.' part"),
])
def test_a_zip_with_a_path_outside_its_folder_is_refused_whole(tmp_path, entry, words):
    archive = _zip(tmp_path / "hostile.zip", {"s1/lab00-handin/ch1.ipynb": NOTEBOOK, entry: NOTEBOOK})
    with pytest.raises(UnpackError, match=re.escape(words)):
        read_zip(archive)
    with pytest.raises(GradingError, match=re.escape(words)):   # given on its own: the command stops
        take_in(archive, tmp_path / "unpacked", CHAPTERS)
    assert not list((tmp_path / "unpacked").rglob("*.ipynb"))
    assert not (tmp_path / "evil").exists() and not (tmp_path / "evil.ipynb").exists()


def test_links_huge_entries_and_duplicates_are_refused(tmp_path):
    link = _zip(tmp_path / "link.zip", {"s1/lab00-handin/ch1.ipynb": "/etc/passwd"},
                links=("s1/lab00-handin/ch1.ipynb",))
    with pytest.raises(UnpackError, match="a symbolic link"):
        read_zip(link)
    huge = tmp_path / "huge.zip"
    with zipfile.ZipFile(huge, "w", zipfile.ZIP_DEFLATED) as zipped:
        zipped.writestr("s1/lab00-handin/ch1.ipynb", b"\0" * (MAX_FILE_BYTES + 1))   # compresses to ~64 KB
    assert huge.stat().st_size < MAX_FILE_BYTES // 100
    with pytest.raises(UnpackError, match="at most"):
        read_zip(huge)
    twice = _zip(tmp_path / "twice.zip", {"s1/lab00-handin/ch1.ipynb": NOTEBOOK})
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(twice, "a") as zipped:
        zipped.writestr("s1/lab00-handin/ch1.ipynb", NOTEBOOK)
    with pytest.raises(UnpackError, match="appears twice"):
        read_zip(twice)


CHAPTERS = {LAB: {"ch1": frozenset(), "ch2": frozenset()}}


def outcomes(intake) -> dict[str, tuple[str, str]]:
    return {source.entry: (source.outcome, source.reason) for source in intake.sources}


def test_a_folder_of_zips_grades_the_latest_hand_in_and_reports_the_refused(tmp_path):
    folder = tmp_path / "downloads"
    folder.mkdir()
    old = nbformat.writes(a.notebook([a.markdown("# first try")]))
    new = nbformat.writes(a.notebook([a.markdown("# second try")]))
    _zip(folder / "s1-20260101T100000Z.zip", {"s1/lab00-handin/ch1.ipynb": old,
                                              "s1/lab00-handin/timestamp.txt": "2026-01-01 10:00:00.000000 UTC"})
    _zip(folder / "s1-20260102T100000Z.zip", {"s1/lab00-handin/ch1.ipynb": new,
                                              "s1/lab00-handin/timestamp.txt": "2026-01-02 10:00:00.000000 UTC",
                                              "s1/notes.txt": "hello"})
    _zip(folder / "s2-evil.zip", {"../../s2/lab00-handin/ch1.ipynb": NOTEBOOK})
    (folder / "s3" / "lab00-handin").mkdir(parents=True)
    (folder / "s3" / "lab00-handin" / "ch1.ipynb").write_text(NOTEBOOK)
    intake = take_in(folder, tmp_path / "unpacked", CHAPTERS)
    seen = outcomes(intake)
    assert seen["s2-evil.zip"][0] == NOT_GRADED and "a '..' part" in seen["s2-evil.zip"][1]
    assert seen["s1-20260101T100000Z.zip"] == (NOT_GRADED, "replaced by a later hand-in of s1/lab00-handin "
                                                           "(s1-20260102T100000Z.zip)")
    assert "second try" in (tmp_path / "unpacked" / "s1" / "lab00-handin" / "ch1.ipynb").read_text()
    assert (tmp_path / "unpacked" / "s3" / "lab00-handin" / "ch1.ipynb").is_file()
    assert not (tmp_path / "unpacked" / "s2").exists()
    notes = "\n".join(note for source in intake.sources for note in source.notes)
    assert "handed in twice" in notes and "graded the later one, s1-20260102T100000Z.zip" in notes
    assert "ignored s1/notes.txt" in notes


def test_a_zip_named_for_one_student_cannot_hand_in_or_replace_another_students_lab(tmp_path):
    """s1's zip holding s2's folder with a later timestamp would have replaced s2's own hand-in."""
    folder = tmp_path / "downloads"
    folder.mkdir()
    honest = nbformat.writes(a.notebook([a.markdown("# s2's own work")]))
    forged = nbformat.writes(a.notebook([a.markdown("# blank, handed in by s1")]))
    _zip(folder / "s2-20260101T100000Z.zip", {"s2/lab00-handin/ch1.ipynb": honest,
                                              "s2/lab00-handin/timestamp.txt": "2026-01-01 10:00:00.000000 UTC"})
    _zip(folder / "s1-20260102T100000Z.zip", {"s1/lab00-handin/ch1.ipynb": NOTEBOOK,
                                              "s2/lab00-handin/ch1.ipynb": forged,
                                              "s2/lab00-handin/timestamp.txt": "2099-01-01 10:00:00.000000 UTC"})
    _zip(folder / "homework.zip", {"s2/lab00-handin/ch1.ipynb": forged})   # renamed: names nobody
    # Canvas's download names the uploader; a browser's copy number keeps the name's student.
    _zip(folder / "doejane_1234_99_s3-20260102T100000Z (1).zip", {"s3/lab00-handin/ch1.ipynb": NOTEBOOK})
    _zip(folder / "s30-20260102T100000Z.zip", {"s3/lab00-handin/ch2.ipynb": NOTEBOOK})   # s30 is not s3
    _zip(folder / "s1-s2-20260102T100000Z.zip", {"s2/lab00-handin/ch1.ipynb": forged})  # names s2 as a word only
    intake = take_in(folder, tmp_path / "unpacked", CHAPTERS)
    seen = outcomes(intake)
    refused = {entry for entry, (outcome, _) in seen.items() if outcome == NOT_GRADED}
    assert refused == {"s1-20260102T100000Z.zip", "homework.zip", "s30-20260102T100000Z.zip",
                       "s1-s2-20260102T100000Z.zip"}, seen
    assert "it holds the folder 's2/', a student its name does not name" in seen["s1-20260102T100000Z.zip"][1]
    assert not (tmp_path / "unpacked" / "s3" / "lab00-handin" / "ch2.ipynb").exists()
    assert "s2's own work" in (tmp_path / "unpacked" / "s2" / "lab00-handin" / "ch1.ipynb").read_text()
    assert (tmp_path / "unpacked" / "s3" / "lab00-handin" / "ch1.ipynb").is_file()
    assert not (tmp_path / "unpacked" / "s1").exists()   # refused whole, with the reason reported


def test_course_grade_refuses_a_hostile_zip_with_a_clear_error(course, tmp_path, capsys):
    archive = _zip(tmp_path / "s1.zip", {"s1/lab00-handin/../../../escape.ipynb": NOTEBOOK})
    from autograde.cli import main as instructor_main

    code = instructor_main(["grade", str(archive), "--solutions", str(course / "solutions"), "--out",
                            str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert code == 1
    assert "course grade: s1.zip: refused: entry 's1/lab00-handin/../../../escape.ipynb' has a '..' part" in error
    assert not list(tmp_path.rglob("escape.ipynb"))


@pytest.mark.slow
def test_course_grade_grades_the_zip_that_course_submit_made(course, manifest, tmp_path):
    labs = tmp_path / "labs"
    _student(course, labs / LAB, {"add_one": ADD_ONE, "double": DOUBLE_WRONG})
    archive = write_zip(plan_hand_in("s7", labs, manifest=manifest), tmp_path)
    run = subprocess.run([sys.executable, "-m", "autograde.cli", "grade", str(archive), "--solutions",
                          str(course / "solutions"), "--out", str(tmp_path / "out"), "--timeout", "30"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "(1 entry, 1 hand-in)" in run.stderr and re.search(r"graded +as s7/lab00-handin", run.stdout), run.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (entry,) = report["submissions"]
    assert (entry["student"], entry["lab"]) == ("s7", LAB)
    cells = {cell["grade_id"]: cell for notebook in entry["notebooks"] for cell in notebook["cells"]}
    assert cells["test_add_one"]["points"] == 2 and cells["test_double"]["points"] == 0, entry
    assert cells["test_square"]["points"] == 0
    assert entry["timestamp"]   # timestamp.txt from the zip reached the grades


# --------------------------------------------------------------------------------------------
# The kit: what it ships for checking and handing in
# --------------------------------------------------------------------------------------------


def test_the_kit_ships_the_manifest_the_student_commands_and_says_how_to_hand_in(tmp_path):
    from autograde.kit import build_kit
    from autograde.layout import list_labs

    later = [lab for lab in list_labs(ROOT / "solutions") if lab != REAL_LAB]
    kit = build_kit(ROOT, tmp_path / "kit", labs=[REAL_LAB], unlock=later).folder
    shipped = json.loads((kit / "course_lib" / "_release.json").read_text())
    assert shipped == release_manifest(ROOT / "labs", [REAL_LAB])
    assert sorted(shipped[REAL_LAB]) == sorted(p.stem for p in (ROOT / "labs" / REAL_LAB).glob("*.ipynb"))
    readme, makefile = (kit / "README.md").read_text(), (kit / "Makefile").read_text()
    for words in ("course check labs/lab01-text-to-tensors/01_tokenization.ipynb", 'check_notebook("01_tokenization',
                  "course submit --student s1234567 --zip", "s1234567/lab01-text-to-tensors/01_tokenization.ipynb",
                  "**Nothing is handed in until you upload that zip**", "`course check`, `course submit`"):
        assert words in readme, words
    assert "course grade" not in readme and "course kit" not in readme
    assert "-m course_lib.handin.stubs" in makefile
    # The kit ships the library alone: no platform code, and importing the library loads none of it.
    assert not [path for path in kit.rglob("*") if path.name in ("autograde", "grading")], "the platform is in the kit"
    assert not foreign_imports(kit, "course_lib", "autograde")
    assert 'course = "course_lib.cli:main"' in (kit / "pyproject.toml").read_text()
    loaded = subprocess.run([sys.executable, "-c", "import sys, course_lib, course_lib.cli, course_lib.handin, "
                             "course_lib.runner.student; print(sorted(m for m in sys.modules if m.split('.')[0] == "
                             "'autograde'))"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(kit)},
                            cwd=tmp_path, timeout=120)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
    cli = subprocess.run([sys.executable, "-m", "course_lib.cli", "--help"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(kit)}, cwd=tmp_path, timeout=120)
    listed = set(re.findall(r"^    (\w+)\s", cli.stdout, re.MULTILINE))
    # Lab 0.1 is locked here, so the commands that run the engine on its answers wait for a later kit.
    assert listed == {"check", "submit", "loadtest"}, cli.stdout
    assert "`course chat`, `course bench`, `course serve` run on the answers of Lab 0.1" in readme
    for command, reason in (("chat", "runs on the answers of Lab 0.1, which are your exercises in this kit"),
                            ("grade", "is an instructor's command")):
        refused = subprocess.run([sys.executable, "-m", "course_lib.cli", command], capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": str(kit)}, cwd=tmp_path, timeout=120)
        assert refused.returncode == 2 and reason in refused.stderr, refused.stderr
    assert "grade" not in cli.stdout and "release" not in cli.stdout, cli.stdout
    for command in ("check", "submit"):   # their help shows this kit's lab, never the grader
        shown = subprocess.run([sys.executable, "-m", "course_lib.cli", command, "--help"], capture_output=True,
                               text=True, env={**os.environ, "PYTHONPATH": str(kit)}, cwd=tmp_path, timeout=120)
        assert shown.returncode == 0 and "course grade" not in shown.stdout, shown.stdout
    assert "labs/lab01-text-to-tensors/01_tokenization.ipynb" in shown.stdout or "lab01-text-to-tensors" in shown.stdout


# --------------------------------------------------------------------------------------------
# course check on a chapter that runs an earlier chapter's answers (answers_from)
# --------------------------------------------------------------------------------------------

CHAPTERS_LAB = "lab00-chapters"


def _second_chapter():
    return a.notebook([
        a.markdown("# Chapter 2 of the fixture: it runs chapter 1's halve"),
        a.code('''
            from course_lib.chapters import answers_from

            chapter1 = answers_from("ch1")
            halve = chapter1.halve
        '''),
        a.answer("triple", '''
            def triple(x):
                ### BEGIN SOLUTION
                return 3 * x
                ### END SOLUTION
        '''),
        a.tests("test_triple", 1, '''
            assert triple(2) == 6, "triple(2) should be 6"
        '''),
        a.tests("test_halve_here", 1, '''
            assert halve(8) == 4, "halve(8) should be 4"
        '''),
        a.code('''
            results = []
            for n in (4, 8):
                results.append(halve(halve(n)))
            print(results)
        '''),
        a.code('''
            print("mean:", sum(results) / len(results))
        '''),
    ])


@pytest.fixture(scope="module")
def chapters_course(tmp_path_factory):
    """lab00-chapters: ch1 (the hand-in fixture's notebook) and ch2, which reads ch1's answers."""
    root = tmp_path_factory.mktemp("chapters")
    for name, source in (("ch1", _source_notebook()), ("ch2", _second_chapter())):
        (root / "solutions" / CHAPTERS_LAB).mkdir(parents=True, exist_ok=True)
        (root / "labs" / CHAPTERS_LAB).mkdir(parents=True, exist_ok=True)
        nbformat.write(source, root / "solutions" / CHAPTERS_LAB / f"{name}.ipynb")
        nbformat.write(_release(source), root / "labs" / CHAPTERS_LAB / f"{name}.ipynb")
    return root


def _chapter_copy(course: Path, folder: Path, name: str, answers: dict[str, str]) -> Path:
    notebook = nbformat.read(course / "labs" / CHAPTERS_LAB / f"{name}.ipynb", as_version=4)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / f"{name}.ipynb")
    return folder / f"{name}.ipynb"


TRIPLE = "def triple(x):\n    return 3 * x"


def test_a_chapter_checked_away_from_its_earlier_chapters_says_so_and_blames_no_answer(chapters_course, tmp_path,
                                                                                       capsys):
    manifest = release_manifest(chapters_course / "labs")
    path = _chapter_copy(chapters_course, tmp_path / "Downloads", "ch2", {"triple": TRIPLE})
    report = check_notebook(path, manifest=manifest, gpu=False, progress=False)
    printed = capsys.readouterr().out
    (note,) = report.notes
    assert "ch1.ipynb (answers_from), which is not in its folder" in note and f"labs/{CHAPTERS_LAB}/" in note
    assert "NOTE: this notebook runs your answers of ch1.ipynb" in printed
    (exercise,) = report.exercises
    assert exercise.status == BLOCKED and [test.status for test in exercise.tests] == [PASSED, BLOCKED]
    assert "a knock-on of cell `from course_lib.chapters import answers_from`" in exercise.tests[1].message
    kinds = [(error.kind, error.ename) for error in report.other_errors]
    assert kinds == [("an earlier chapter", "ChapterNotFound"), ("knock-on", "NameError"),
                     ("knock-on", "ZeroDivisionError")], kinds
    zero = report.other_errors[-1]
    assert zero.root == "cell `from course_lib.chapters import answers_from`", zero   # the first failed cell
    assert not any(error.kind == "your answer" for error in report.other_errors)
    assert report.cells_raised == 4 and f"its {report.cells_run} code cells ran" in printed
    assert "4 of them raised" in printed and "every cell ran" not in printed
    assert not report.all_passed


def test_a_chapter_checked_before_its_earlier_chapter_is_written_says_so(chapters_course, tmp_path, capsys):
    manifest = release_manifest(chapters_course / "labs")
    folder = tmp_path / CHAPTERS_LAB
    shutil.copy(chapters_course / "labs" / CHAPTERS_LAB / "ch1.ipynb", folder.mkdir() or folder / "ch1.ipynb")
    path = _chapter_copy(chapters_course, folder, "ch2", {"triple": TRIPLE})
    report = check_notebook(path, manifest=manifest, gpu=False, progress=False)
    printed = capsys.readouterr().out
    (note,) = report.notes
    assert "runs your `halve` of ch1.ipynb (answers_from), still as released there: write ch1 first" in note
    (exercise,) = report.exercises
    assert [test.status for test in exercise.tests] == [PASSED, BLOCKED]
    assert "needs your `halve` of ch1.ipynb (answer cell 'halve'), not written yet there" in exercise.tests[1].message
    earlier, knock_on = report.other_errors
    assert (earlier.kind, earlier.evidence, earlier.chapter) == ("an earlier chapter", "not written", "ch1")
    assert (knock_on.kind, knock_on.ename, knock_on.root) == ("knock-on", "ZeroDivisionError", "cell `results = []`")
    assert "raised ZeroDivisionError: division by zero, a knock-on of cell `results = []`, which failed first" in printed
    assert "3 of them raised" in printed


def test_a_chapter_with_its_earlier_chapter_done_runs_clean(chapters_course, tmp_path, capsys):
    manifest = release_manifest(chapters_course / "labs")
    folder = tmp_path / "elsewhere"   # a folder of another name: the lab's chapters beside it come along
    _chapter_copy(chapters_course, folder, "ch1", {"add_one": ADD_ONE, "double": DOUBLE, "square": SQUARE,
                                                   "halve": HALVE})
    path = _chapter_copy(chapters_course, folder, "ch2", {"triple": TRIPLE})
    report = check_notebook(path, manifest=manifest, gpu=False, progress=False)
    printed = capsys.readouterr().out
    assert report.notes == [] and report.other_errors == [] and report.all_passed, printed
    assert "none raised" in printed
