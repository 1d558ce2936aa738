"""The grading rules an instructor relies on, each checked on a tiny fixture lab.

One `course grade` run over hostile submissions (an infinite loop, os._exit, a segfault,
tampered and deleted test cells, stderr noise, malformed notebooks) is shared by the tests.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograde.preprocessors import strip_hidden_tests
from tests.grading_fixture import DUE, EXPECTED_CPU, HIDDEN_MARKER, LAB, LIMITS, write_fixture_lab, write_submissions

pytestmark = pytest.mark.slow
GPU_CHECK_PASSES = {"correct", "noisy", "tampered", "copied-test-cells", "wrong-hidden", "attack-fake-gpu",
                    "attack-lying-eq",
                    "attack-read-secrets", "attack-write-outside", "attack-disk-filler", "attack-output-flood",
                    "attack-print-hidden", "attack-feedback-script", "attack-forged-timestamp", "attack-assert-hidden",
                    "attack-error-name-hidden", "attack-huge-range"}
GPU = False
try:
    import torch

    GPU = torch.cuda.is_available()
except Exception:
    pass


def course(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograde.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=1500)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("grading")
    solutions_lab = write_fixture_lab(root / "solutions")
    release = course("release", "--solutions", str(root / "solutions"), "--labs", str(root / "labs"), cwd=root)
    assert release.returncode == 0, release.stdout + release.stderr
    write_submissions(root / "labs" / LAB, solutions_lab, root / "submissions")
    run = course("grade", "submissions", "--solutions", "solutions", "--out", "out", "--timeout", "10",
                 "--jobs", "2", "--limits", LIMITS, "--due", DUE, cwd=root)
    report = json.loads((root / "out" / "report.json").read_text()) if (root / "out" / "report.json").exists() else None
    return root, run, report


def by_student(report) -> dict[str, dict]:
    return {entry["student"]: entry for entry in report["submissions"]}


def cell(entry, notebook: str, grade_id: str) -> dict:
    for nb in entry["notebooks"]:
        if nb["name"] == notebook:
            for c in nb["cells"]:
                if c["grade_id"] == grade_id:
                    return c
    raise KeyError((notebook, grade_id))


def test_grading_completes_with_exit_code_zero(graded):
    root, run, report = graded
    assert run.returncode == 0, run.stdout + run.stderr
    assert report is not None
    assert "correct" in run.stdout and "%" in run.stdout


def test_scores_are_exact(graded):
    _, _, report = graded
    entries = by_student(report)
    assert set(entries) == set(EXPECTED_CPU)
    for student, (score, max_score) in EXPECTED_CPU.items():
        if GPU:  # the GPU check runs: a point for those whose double() works, and one more available
            score += student in GPU_CHECK_PASSES
            max_score += 1
        got = (entries[student]["score"], entries[student]["max_score"])
        assert got == (score, max_score), f"{student}: {entries[student]['lost_points']}"


def test_stderr_output_costs_no_points(graded):
    _, _, report = graded
    noisy = by_student(report)["noisy"]
    assert cell(noisy, "ch1", "test_warnings")["status"] == "passed"
    assert cell(noisy, "ch1", "test_add_one")["status"] == "passed"


def test_infinite_loop_costs_only_the_hanging_cell(graded):
    _, _, report = graded
    entry = by_student(report)["infinite-loop"]
    assert cell(entry, "ch1", "test_double")["status"] == "timeout"
    assert "10 s" in cell(entry, "ch1", "test_double")["reason"]
    assert cell(entry, "ch1", "test_add_one")["status"] == "passed"
    assert cell(entry, "ch2", "test_square")["status"] == "passed"


@pytest.mark.parametrize("student", ["os-exit", "segfault"])
def test_dead_kernel_is_graded_as_far_as_it_got(graded, student):
    _, _, report = graded
    entry = by_student(report)[student]
    assert cell(entry, "ch1", "test_add_one")["status"] == "passed"
    assert cell(entry, "ch1", "test_warnings")["status"] == "passed"
    assert cell(entry, "ch1", "test_double")["status"] == "not run"
    assert "kernel died" in cell(entry, "ch1", "test_double")["reason"]
    assert cell(entry, "ch2", "test_square")["status"] == "passed"


def test_edited_and_deleted_test_cells_are_restored(graded):
    _, _, report = graded
    entry = by_student(report)["tampered"]
    # add_one is wrong; the emptied test cell was restored and caught it
    assert cell(entry, "ch1", "test_add_one")["status"] == "failed"
    assert "add_one(1) should be 2" in cell(entry, "ch1", "test_add_one")["reason"]
    # the deleted one was put back and ran
    assert cell(entry, "ch1", "test_warnings")["status"] == "failed"


def test_hidden_tests_count_but_never_show(graded):
    root, _, report = graded
    entry = by_student(report)["wrong-hidden"]
    assert cell(entry, "ch1", "test_add_one")["status"] == "failed"
    assert cell(entry, "ch1", "test_add_one")["reason"] == "hidden check failed"
    released = (root / "labs" / LAB / "ch1.ipynb").read_text()
    assert HIDDEN_MARKER not in released
    feedback_files = list((root / "out" / "feedback").rglob("*.html"))
    assert feedback_files, "no feedback was written"
    for path in feedback_files:
        text = path.read_text()
        assert HIDDEN_MARKER not in text, f"hidden test leaked into {path}"
        assert "BEGIN HIDDEN TESTS" not in text
    assert HIDDEN_MARKER not in (root / "out" / "report.json").read_text()


@pytest.mark.skipif(GPU, reason="on a GPU the check runs instead of being skipped")
def test_gpu_checks_are_skipped_on_a_cpu(graded):
    _, _, report = graded
    entry = by_student(report)["correct"]
    gpu_cell = cell(entry, "ch1", "test_gpu")
    assert gpu_cell["status"] == "skipped: needs a GPU"
    assert entry["skipped_points"] == 1
    assert all(lost["cell"] != "test_gpu" for lost in entry["lost_points"])


@pytest.mark.parametrize("student,words", [("malformed", "not valid JSON"), ("old-format", "nbformat 3")])
def test_malformed_notebook_gets_a_clear_message_and_a_zero(graded, student, words):
    _, _, report = graded
    entry = by_student(report)[student]
    ch1 = next(nb for nb in entry["notebooks"] if nb["name"] == "ch1")
    assert ch1["status"] == "malformed" and ch1["score"] == 0
    assert words in ch1["message"]
    assert cell(entry, "ch2", "test_square")["status"] == "passed"


def test_folders_that_are_not_students_are_reported(graded):
    _, run, report = graded
    lines = {line["entry"]: line for line in report["intake"]}
    assert lines["README.txt"]["outcome"] == "ignored" and "not a hand-in" in lines["README.txt"]["reason"]
    assert lines["bad name!"]["outcome"] == "not graded" and "not a student id" in lines["bad name!"]["reason"]
    assert lines["correct"]["outcome"] == "graded"
    assert re.search(r"^bad name! +not graded +not a student id", run.stdout, re.MULTILINE)


def test_grades_csv_has_nbgrader_columns(graded):
    root, _, _ = graded
    with open(root / "out" / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for column in ("assignment", "student_id", "score", "max_score"):
        assert column in rows[0]
    scores = {row["student_id"]: float(row["score"]) for row in rows}
    assert scores["correct"] == EXPECTED_CPU["correct"][0] + (1 if GPU else 0)
    assert {row["assignment"] for row in rows} == {LAB}


def test_release_check_names_the_stale_cell(graded, tmp_path):
    root, _, _ = graded
    import shutil

    import nbformat

    labs = tmp_path / "labs"
    shutil.copytree(root / "labs", labs)
    notebook = nbformat.read(labs / LAB / "ch1.ipynb", as_version=4)
    notebook.cells[5].source += "\n# edited by hand"
    nbformat.write(notebook, labs / LAB / "ch1.ipynb")
    check = course("release", "--check", "--solutions", str(root / "solutions"), "--labs", str(labs), cwd=root)
    assert check.returncode == 1
    assert "ch1.ipynb" in check.stdout and "cell 'test_double'" in check.stdout
    clean = course("release", "--check", "--solutions", str(root / "solutions"), "--labs", str(root / "labs"), cwd=root)
    assert clean.returncode == 0, clean.stdout + clean.stderr


def test_unknown_lab_is_a_clear_error(graded):
    root, _, _ = graded
    run = course("grade", "submissions", "--solutions", "solutions", "--lab", "lab99-nope", "--out", "x", cwd=root)
    assert run.returncode == 1
    assert "unknown lab 'lab99-nope'" in run.stderr


def test_strip_hidden_tests_handles_unterminated_regions():
    source = "check(1)\n### BEGIN HIDDEN TESTS\nsecret()\n"
    stripped, found = strip_hidden_tests(source)
    assert found and "secret" not in stripped and stripped.startswith("check(1)")


def test_patching_the_checks_in_the_kernel_changes_nothing(graded):
    _, _, report = graded
    entry = by_student(report)["attack-patch-checks"]
    assert cell(entry, "ch1", "test_double")["status"] == "error"
    assert "NotImplementedError" in cell(entry, "ch1", "test_double")["reason"]


def test_a_look_alike_needs_gpu_is_a_failure_not_a_skip(graded):
    _, _, report = graded
    entry = by_student(report)["attack-fake-gpu"]
    assert cell(entry, "ch1", "test_add_one")["status"] == "error", "the student's code raised: an error, not a skip"
    assert "NeedsGPU" in cell(entry, "ch1", "test_add_one")["reason"]
    assert entry["max_score"] == EXPECTED_CPU["attack-fake-gpu"][1] + (1 if GPU else 0)
    assert entry["skipped_points"] == (0 if GPU else 1), "only the cell the source marks as GPU-only is skipped"


def test_an_object_equal_to_everything_is_not_an_answer(graded):
    _, _, report = graded
    assert cell(by_student(report)["attack-lying-eq"], "ch1", "test_add_one")["status"] == "failed"


def test_a_submission_cannot_read_the_hidden_tests_or_the_gradebook(graded):
    root, _, report = graded
    entry = by_student(report)["attack-read-secrets"]
    assert entry["score"] == EXPECTED_CPU["attack-read-secrets"][0] + (1 if GPU else 0)
    feedback = (root / "out" / "feedback" / "attack-read-secrets" / LAB / "ch1.html").read_text()
    assert "searched; found" in feedback, "the probe ran and its output reached the feedback"
    assert HIDDEN_MARKER not in feedback and "BEGIN HIDDEN TESTS" not in feedback
    assert "SQLite format" not in feedback


def test_a_submission_cannot_write_outside_its_folder(graded):
    root, _, report = graded
    entry = by_student(report)["attack-write-outside"]
    assert entry["score"] == EXPECTED_CPU["attack-write-outside"][0] + (1 if GPU else 0)
    assert not Path("/tmp/course-escape.txt").exists()
    assert not (Path.home() / "course-escape.txt").exists()
    assert "overwritten" not in (root / "out" / "report.json").read_text()


# ---- attacks on the grader itself: each costs only its own cells, and nothing of it leaks or lasts --------


def feedback_page(root: Path, student: str, notebook: str = "ch1") -> str:
    return (root / "out" / "feedback" / student / LAB / f"{notebook}.html").read_text()


def test_the_header_names_the_limits_in_force(graded):
    _, run, report = graded
    assert "Limits per kernel: memory 1 GB, 128 processes" in run.stderr
    assert "Limits of the grading process (test cells run there): memory 8 GB, CPU 10 min per test cell" \
        in run.stderr
    assert report["kernel_limits"]["processes"] == 128 and report["kernel_limits"]["grader_memory"] == 8 << 30


@pytest.mark.parametrize("student,words", [("attack-memory-hog", "memory limit of 1 GB reached"),
                                           ("attack-process-storm", "process limit of 128 reached")])
def test_a_kernel_past_a_limit_loses_its_cells_with_the_reason(graded, student, words):
    _, _, report = graded
    entry = by_student(report)[student]
    died = cell(entry, "ch1", "test_double")
    assert died["status"] in ("kernel died", "not run") and words in died["reason"], died
    assert cell(entry, "ch1", "test_add_one")["status"] == "passed"
    assert cell(entry, "ch2", "test_square")["status"] == "passed", "the next notebook gets a fresh kernel"


def test_a_stalled_kernel_is_killed_at_the_deadline_and_graded_as_far_as_it_got(graded):
    root, _, report = graded
    entry = by_student(report)["attack-stall"]
    assert cell(entry, "ch1", "test_add_one")["status"] == "passed"
    assert cell(entry, "ch1", "test_double")["status"] == "not run"
    stored = json.loads((root / "out" / "results" / LAB / "attack-stall.json").read_text())
    assert stored["elapsed_s"] < 240, "bounded by the cell's limit and the kill's grace, not hours"


def test_an_output_flood_stays_small_everywhere_it_goes(graded):
    root, _, _ = graded
    page = feedback_page(root, "attack-output-flood")
    assert len(page) < 3 << 20 and "bytes of printed output cut here" in page
    assert "FLOOD-HEAD" in page and "FLOOD-TAIL" in page
    notebook = root / "out" / "autograded" / "attack-output-flood" / LAB / "ch1.ipynb"
    assert notebook.stat().st_size < 4 << 20
    assert (root / "out" / "results" / LAB / "attack-output-flood.json").stat().st_size < 200_000
    assert (root / "out" / "report.json").stat().st_size < 2 << 20


def test_what_the_student_prints_during_hidden_checks_is_not_shown(graded):
    root, _, _ = graded
    page = feedback_page(root, "attack-print-hidden")
    assert "ARGS 1" in page, "output during visible checks is kept"
    assert "ARGS 41" not in page, "the hidden input 41 must not reach the feedback"
    assert "output printed by your code during hidden checks is not shown" in page
    notebook = json.loads((root / "out" / "autograded" / "attack-print-hidden" / LAB / "ch1.ipynb").read_text())
    outputs = json.dumps([c.get("outputs", []) for c in notebook["cells"]])
    assert "ARGS 41" not in outputs


def test_an_assertion_error_the_student_raises_in_a_hidden_check_keeps_its_message_back(graded):
    """An answer that raises AssertionError(f"...{x}") on a hidden input would have published it: the
    grader showed every AssertionError's message, meant for the test code's own asserts."""
    root, _, report = graded
    entry = by_student(report)["attack-assert-hidden"]
    assert cell(entry, "ch1", "test_add_one")["points"] == 0
    graded_notebook = (root / "out" / "autograded" / "attack-assert-hidden" / LAB / "ch1.ipynb").read_text()
    for text in (feedback_page(root, "attack-assert-hidden"), graded_notebook,
                 (root / "out" / "report.json").read_text()):
        assert "LEAKED-ARGUMENT-41" not in text   # the hidden input is 41 (the answer's source shows the f-string)
    assert "during a hidden check" in feedback_page(root, "attack-assert-hidden")


def test_what_an_answer_kept_from_a_hidden_check_is_not_shown_in_a_later_cell(graded):
    """add_one keeps every argument (1 from the visible check, then the hidden 41); the next answer cell
    prints, displays and raises them. From the first hidden check on, the notebook shows only what the
    grader knows: that double raised, in the grader's words, and a note where output was withheld."""
    root, _, report = graded
    student = "attack-print-hidden-later"
    entry = by_student(report)[student]
    assert cell(entry, "ch1", "test_add_one")["points"] == 2       # honest answer, honest points
    assert cell(entry, "ch1", "test_double") == {**cell(entry, "ch1", "test_double"), "points": 0, "status": "error"}
    page = feedback_page(root, student)
    graded_notebook = (root / "out" / "autograded" / student / LAB / "ch1.ipynb").read_text()
    for text in (page, graded_notebook, (root / "out" / "report.json").read_text(),
                 (root / "out" / "results" / LAB / f"{student}.json").read_text()):
        assert "[1, 41" not in text, "the hidden input 41 came out in a later cell"
    outputs = [output for c in json.loads(graded_notebook)["cells"] for output in c.get("outputs", [])]
    assert {o["ename"] for o in outputs if o["output_type"] == "error"} <= {"Error", "CheckFailed", "NeedsGPU"}, outputs
    assert "hidden checks have called your code earlier in this notebook" in page
    assert "your code raised an exception here" in page


@pytest.mark.parametrize("student", ["attack-exit-code-hidden", "attack-forged-frame", "attack-error-name-hidden"])
def test_how_the_kernel_died_or_what_it_raised_carries_no_hidden_input(graded, student):
    """The grader's own words about a cell quoted what the answer chose: the exit code of os._exit(41),
    a malformed message the kernel forged on the channel, the name of the built-in error it picked with
    the hidden input. From the first hidden check on they are fixed sentences."""
    import builtins

    root, _, _ = graded
    errors = sorted(n for n in dir(builtins) if n.endswith("Error") and isinstance(getattr(builtins, n), type))
    graded_notebook = json.loads((root / "out" / "autograded" / student / LAB / "ch1.ipynb").read_text())
    outputs = json.dumps([c.get("outputs", []) for c in graded_notebook["cells"]])
    for text in (feedback_page(root, student), outputs, (root / "out" / "report.json").read_text(),
                 (root / "out" / "results" / LAB / f"{student}.json").read_text(),
                 (root / "out" / "grades.csv").read_text()):
        assert "code 41" not in text and "[1, 41" not in text
    assert errors[41 % len(errors)] not in outputs
    assert "exited with code" not in outputs and "sent a malformed message" not in outputs


def test_an_error_dressed_as_the_graders_own_death_is_the_students_and_carries_nothing_out(graded):
    """A class named course_lib + runner.student.KernelDied was rebuilt as the grader's KernelDied, whose
    words the grader kept where they had the shape of its own ("limit of X files in the scratch folder
    reached"): X held the inputs add_one kept from the hidden check. The grader knows its deaths by its own
    record: the error is the student's, withheld like any other, and the kernel, alive, grades on."""
    root, _, report = graded
    student = "attack-forged-kernel-died"
    entry = by_student(report)[student]
    assert cell(entry, "ch1", "test_double")["status"] == "error"
    graded_notebook = json.loads((root / "out" / "autograded" / student / LAB / "ch1.ipynb").read_text())
    outputs = json.dumps([c.get("outputs", []) for c in graded_notebook["cells"]])
    for text in (feedback_page(root, student), outputs, (root / "out" / "report.json").read_text(),
                 (root / "out" / "results" / LAB / f"{student}.json").read_text()):
        assert "[1, 41" not in text
    assert "files in the scratch folder" not in outputs   # (the page shows the answer's source, which has it)
    assert "KernelDied" not in outputs and "NotRun" not in outputs, "the kernel did not die: nothing was skipped"


def test_a_huge_range_is_refused_on_receipt_with_a_sentence(graded):
    """range(40_000_000) crosses the channel as three ints; whatever the grader makes of it (list() took
    1.5 GB) costs the grader, not the student. It is refused on receipt: those cells fail, saying why."""
    _, _, report = graded
    entry = by_student(report)["attack-huge-range"]
    reason = cell(entry, "ch1", "test_add_one")["reason"]
    assert "range of 40,000,000 items" in reason and "at most 1,048,576 items" in reason
    assert cell(entry, "ch1", "test_double")["points"] == 3 and cell(entry, "ch2", "test_square")["points"] == 2


def test_a_copied_test_cell_is_the_students_own_cell(graded):
    """Copying a test cell in Jupyter copies its nbgrader metadata; nbgrader then failed the whole lab
    (a graded cell with no grade_id). The copies run in the kernel, never in the grader."""
    _, _, report = graded
    entry = by_student(report)["copied-test-cells"]
    assert all(notebook["status"] == "graded" for notebook in entry["notebooks"])
    assert not Path("/tmp/COPIED-CELL-RAN-IN-THE-GRADER").exists()


def test_no_cell_timing_is_kept_once_hidden_checks_have_run(graded):
    """How long a cell took is the answer's to choose (time.sleep(x / 10)): no timings from the first
    hidden check on, in the graded notebook."""
    root, _, _ = graded
    notebook = json.loads((root / "out" / "autograded" / "attack-print-hidden-later" / LAB / "ch1.ipynb").read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    first_hidden = next(i for i, c in enumerate(code)
                        if c["metadata"].get("nbgrader", {}).get("grade_id") == "test_add_one")
    assert "execution" in code[0]["metadata"]
    assert not any("execution" in c["metadata"] for c in code[first_hidden:])


def test_feedback_pages_run_no_script_and_show_the_graders_verdict(graded):
    from tests.test_grading_bounds import unsafe_tags

    root, _, _ = graded
    for page_path in (root / "out" / "feedback").rglob("*.html"):
        page = page_path.read_text()
        assert unsafe_tags(page) == [], page_path
        assert "Content-Security-Policy" in page and "course-grader-verdict" in page, page_path
    page = feedback_page(root, "attack-feedback-script")
    assert "<div class='verdict'>" not in page, "the student's HTML is never rendered (its source shows, escaped)"
    assert "Grader's verdict: 6 / 6 points" in page


def test_the_notebooks_formgrader_shows_the_instructor_run_no_script_of_the_students(graded):
    """`course grade` leaves the autograded notebooks for formgrader, which renders them in the instructor's
    own Jupyter server: the student's HTML and JavaScript outputs, an image's width and a Markdown cell's HTML
    went into that page as they were, where a script can use the instructor's session (Jupyter's API: files,
    terminals). They are sanitized like the feedback: what nbgrader's formgrader serves holds none of it."""
    import nbformat
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    from tests.test_grading_bounds import unsafe_tags

    root, _, _ = graded
    path = root / "out" / "autograded" / "attack-feedback-script" / LAB / "ch1.ipynb"
    notebook = json.loads(path.read_text())
    kinds = {kind for c in notebook["cells"] for output in c.get("outputs", []) for kind in output.get("data", {})}
    assert kinds <= {"text/plain", "image/png", "image/jpeg"}, kinds
    assert HIDDEN_MARKER in path.read_text(), "the instructor's copy keeps the hidden tests"
    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"assignment_id": LAB, "notebook_id": "ch1", "submission_id": "s", "index": 0, "total": 1,
                 "base_url": "", "student": "attack-feedback-script", "last_name": None, "first_name": None,
                 "notebook_path": "/ch1"}
    page, _ = HTMLExporter(config=config).from_filename(str(path), resources=dict(resources))
    template, _ = HTMLExporter(config=config).from_notebook_node(nbformat.v4.new_notebook(), resources=resources)
    assert set(unsafe_tags(page)) - set(unsafe_tags(template)) == set(), "formgrader's own scripts only"
    assert "document.title='OWNED-BY-JAVASCRIPT'\n" not in page, "no JavaScript output (its source shows, escaped)"
    assert "My answer" in page, "the written answer shows, as text"


def test_keys_made_to_share_a_hash_never_reach_the_graders_unpickler(graded):
    """A 2.4 MB reply holding a dict of 200,000 ints k * (2**61 - 1): building it took the grader's C
    unpickler past its CPU limit (the whole submission went ungraded, after minutes). The kernel sends dicts
    as tuples, measured and hash-checked first; a frame that builds one is malformed, refused at once."""
    root, _, report = graded
    entry = by_student(report)["attack-colliding-keys"]
    assert cell(entry, "ch1", "test_double")["status"] == "kernel died"   # how: withheld (hidden checks ran before)
    assert cell(entry, "ch1", "test_add_one")["status"] == "passed"
    assert cell(entry, "ch2", "test_square")["status"] == "passed"
    stored = json.loads((root / "out" / "results" / LAB / "attack-colliding-keys.json").read_text())
    assert stored["elapsed_s"] < 120, "refused at once, not after the grader's CPU limit"


def test_a_tensor_whose_sizes_are_text_is_a_malformed_message(graded):
    """The tensor bound read a shape's sizes only when they were ints; the rebuild read text as ints: a
    30,000 x 30,000 float32 view of 4 bytes crossed the 256 MB bound and the check's comparison with it made
    900 MB in the grader. Every field of what the kernel sends is checked for its exact type first."""
    _, _, report = graded
    entry = by_student(report)["attack-tensor-sizes-as-text"]
    died = cell(entry, "ch1", "test_add_one")
    assert died["status"] == "kernel died" and "malformed tensor" in died["reason"], died
    assert cell(entry, "ch2", "test_square")["points"] == 2


def test_a_module_from_the_kernel_is_never_imported_by_the_grader(graded):
    _, _, report = graded
    entry = by_student(report)["attack-module-by-name"]
    assert cell(entry, "ch1", "test_double")["status"] in ("error", "failed")
    assert cell(entry, "ch1", "test_add_one")["status"] == "passed"


def test_the_due_time_marks_each_hand_in_by_its_claim_and_says_it_is_one(graded):
    """--due: the correct student claims 59 min before it, noisy 2 days 9 h after it, blank claims nothing.
    Every place that shows lateness says it rests on the student's own timestamp.txt."""
    from nbgrader.api import Gradebook

    from autograde.layout import COURSE_ID

    root, run, report = graded
    entries = by_student(report)
    assert entries["correct"]["hand_in"]["status"] == "on time by its claim"
    assert entries["noisy"]["hand_in"]["status"] == "late by its claim"
    assert entries["noisy"]["hand_in"]["late_by_s"] == (2 * 24 + 9) * 3600 + 31 * 60
    assert entries["blank"]["hand_in"] == {**entries["blank"]["hand_in"], "status": "no hand-in time", "late_by_s": None}
    assert "not a receipt" in entries["correct"]["hand_in"]["basis"]
    with open(root / "out" / "grades.csv", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert rows["noisy"]["duedate"] == "2026-01-12 23:59:00 UTC"
    assert rows["noisy"]["late_submission_penalty"] == "0"     # no --late-penalty: no penalty
    noisy_row = re.search(rf"^noisy +{LAB} +[\d.]+/[\d.]+ .*$", run.stdout, re.MULTILINE).group(0)   # the table row
    assert "late by 2 days 9 h (claimed)" in noisy_row
    assert "not a receipt" in run.stdout and f"{LAB} 2026-01-12T23:59:00+00:00, no late penalty" in run.stderr
    with Gradebook(f"sqlite:///{root / 'out' / 'gradebook.db'}", COURSE_ID) as gradebook:
        assert gradebook.find_submission(LAB, "noisy").total_seconds_late > 2 * 24 * 3600
        assert gradebook.find_submission(LAB, "correct").total_seconds_late == 0


def test_a_timestamp_that_is_not_one_is_refused_and_reported(graded):
    root, _, report = graded
    entry = by_student(report)["attack-forged-timestamp"]
    assert entry["timestamp"] is None
    assert any("timestamp.txt is not one timestamp" in problem for problem in entry["problems"])
    with open(root / "out" / "grades.csv", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert rows["attack-forged-timestamp"]["timestamp"] == ""
    assert "<script>" not in (root / "out" / "report.json").read_text()
