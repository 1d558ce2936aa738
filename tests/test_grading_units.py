"""Small pure-Python parts of the grading pipeline, tested without running a notebook."""

from __future__ import annotations

import os
from pathlib import Path

from autograde.demos import DemoStudent
from autograde.final import final_grades
from autograde.ledger import LedgerState
from autograde.report import score_table
from autograde.results import FAILED, MISSING, PASSED, CellResult, LabResult, NotebookResult
from autograde.solve import _cell_problem
from autograde.store import StoredResult


def graded(results: list[LabResult], state: LedgerState | None = None):
    """(stored results, their final grades) of ``results``, as the class files see them."""
    stored = [StoredResult(result, {}, complete=True) for result in results]
    return stored, final_grades(stored, state or LedgerState())


def test_solve_reports_an_error_before_stderr():
    outputs = [{"output_type": "stream", "name": "stderr", "text": "UserWarning: x\n"},
               {"output_type": "error", "ename": "ValueError", "evalue": "bad shape\nmore"}]
    assert _cell_problem(outputs) == "ValueError: bad shape"


def test_solve_fails_a_cell_that_writes_to_stderr():
    outputs = [{"output_type": "stream", "name": "stdout", "text": "fine\n"},
               {"output_type": "stream", "name": "stderr", "text": "\n  100%|####| 3/3\n"}]
    assert _cell_problem(outputs) == "wrote to stderr:   100%|####| 3/3"


def test_solve_accepts_stdout_only():
    assert _cell_problem([{"output_type": "stream", "name": "stdout", "text": "ok\n"}]) is None


def test_score_table_summarizes_notebooks_not_handed_in():
    handed_in = NotebookResult("01_a", "graded", cells=[CellResult("t1", 2, 2, PASSED), CellResult("t2", 0, 1, FAILED)])
    missing = [NotebookResult(f"0{i}_b", "missing", cells=[CellResult("t", 0, 3, MISSING)]) for i in (2, 3)]
    table = score_table(*graded([LabResult("ada", "lab01", [handed_in, *missing])]))
    assert "handed in 1 of 3 notebooks, failed" in table
    assert "2/9" in table


def test_a_demo_student_hands_in_the_notebooks_its_expected_names():
    partial = DemoStudent("buggy-x", "", expected={"02_b": 3})
    assert partial.hands_in("02_b") and not partial.hands_in("01_a")
    everything = DemoStudent("correct", "")
    assert everything.hands_in("01_a") and everything.hands_in("02_b")


def test_kernels_graded_side_by_side_get_their_share_of_threads(monkeypatch):
    from autograde.layout import kernel_environment

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert kernel_environment(1)["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in kernel_environment()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the instructor's own setting wins
    assert kernel_environment(1)["OMP_NUM_THREADS"] == "3"


def test_summary_line_lists_few_results_and_summarizes_many():
    from autograde.report import one_line_summary

    def result(student, lab, score):
        return LabResult(student, lab, [NotebookResult("01_a", "graded", cells=[CellResult("t", score, 4, PASSED)])])

    few = [result("correct", "lab01", 4), result("blank", "lab01", 0)]
    assert one_line_summary(graded(few)[1]) == "blank 0% · correct 100%"
    many = [result(f"s{i}", "lab01", i % 5) for i in range(10)]
    assert one_line_summary(graded(many)[1]) == "lab01: 10 graded, median 50%, 2 with full marks, 2 with zero"


def test_a_new_worker_removes_the_folders_of_killed_workers_only(tmp_path):
    import subprocess
    import sys

    from autograde.worker import _remove_folders_of_dead_workers

    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(finished.stdout)   # exited: no process has this id (unless reused within the test)
    dead = tmp_path / f"course-worker-{dead_pid}-abc_12"
    (dead / "private" / "solutions").mkdir(parents=True)
    alive = tmp_path / f"course-worker-{os.getpid()}-xyz"
    alive.mkdir()
    other = tmp_path / "course-worker-notes"
    other.mkdir()
    assert _remove_folders_of_dead_workers(tmp_path) == [dead]
    assert not dead.exists(), "a killed worker's folder (the lab's hidden tests) must not stay on the machine"
    assert alive.is_dir() and other.is_dir(), "a running worker's folder and unrelated folders stay"


def _fresh_python(code: str) -> str:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_asking_for_a_gpu_imports_torch_only_where_a_gpu_driver_is():
    """The grader, its workers and course check ask; without a driver the answer needs no torch."""
    import glob

    from course_lib.handin.notebooks import _GPU_DRIVER_FILES

    driver = any(glob.glob(pattern) for pattern in _GPU_DRIVER_FILES)
    said = _fresh_python("import sys\nfrom course_lib.handin.notebooks import gpu_available\n"
                         "print(gpu_available(), 'torch' in sys.modules)")
    if driver:
        import torch

        assert said == f"{torch.cuda.is_available()} True"
    else:
        assert said == "False False", said


def test_reading_notebooks_does_not_build_the_iri_grammar():
    """jsonschema's optional IRI grammar (seconds per process) stays out of every grading process."""
    said = _fresh_python("import sys, autograde.grade_lab, course_lib.handin.check, nbformat\n"
                         "nbformat.validate(nbformat.v4.new_notebook())\n"
                         "print(sys.modules.get('rfc3987_syntax'))")
    assert said == "None"


def test_a_grader_crash_names_its_exception_in_the_reason():
    """nbgrader logs a preprocessor's crash as a traceback whose lines carry no ERROR tag: the reason a
    student and the instructor read must still say what went wrong, not only "see the traceback"."""
    from autograde.nbgrader_job import _summary

    log = ("[ERROR] Traceback (most recent call last):\n  File \"execute.py\", line 3, in run\n"
           "    AttributeError: 'KernelLimits' object has no attribute 'files'\n\n"
           "[ERROR] There was an error processing assignment\n")
    summary = _summary({"success": True, "log": log})
    assert not summary["success"]
    assert "AttributeError: 'KernelLimits' object has no attribute 'files'" in summary["error"]


def test_withheld_errors_keep_only_the_graders_words():
    from autograde.withhold import CHECK_FAILED, STUDENT_RAISED, withhold_cell_outputs, withhold_error
    from course_lib.runner.limits import KernelLimits
    from course_lib.runner.watchdog import limit_message

    limits = KernelLimits()
    memory = limit_message("memory", limits)
    cases = {
        ("Leak", "secret 41"): ("Error", STUDENT_RAISED),
        ("KernelDied", "forged by the kernel: 41"): ("Error", STUDENT_RAISED),
        ("CheckFailed", "expected 4, got 41"): ("CheckFailed", CHECK_FAILED),
        ("AssertionError", "41"): ("CheckFailed", CHECK_FAILED),
        ("NotImplementedError", ""): ("NotImplementedError", ""),
        ("NotImplementedError", "41"): ("Error", STUDENT_RAISED),
        ("MemoryError", f"{memory}: 41 bytes"): ("Error", memory),
        ("MemoryError", "Unable to allocate 41 GiB"): ("Error", memory),     # named here, then withheld
    }
    for (ename, evalue), expected in cases.items():
        shown = withhold_error({"output_type": "error", "ename": ename, "evalue": evalue, "traceback": ["41"]}, limits)
        assert (shown["ename"], shown["evalue"]) == expected, (ename, evalue)
        assert shown["traceback"] == [f"{expected[0]}: {expected[1]}" if expected[1] else expected[0]]
    trusted = {"output_type": "error", "ename": "KernelDied", "evalue": "the kernel died", "traceback": []}
    assert withhold_error(trusted, limits, trusted=True) == trusted

    kernel_outputs = [{"output_type": "stream", "name": "stdout", "text": "41\n"},
                      {"output_type": "display_data", "data": {"text/plain": "41"}, "metadata": {}},
                      {"output_type": "error", "ename": "CellTimeoutError", "evalue": "forged 41", "traceback": []}]
    shown = withhold_cell_outputs(kernel_outputs, limits, timed_out=False, timeout=30)
    assert "41" not in str(shown) and [o["output_type"] for o in shown] == ["stream"]
    shown = withhold_cell_outputs(kernel_outputs, limits, timed_out=True, timeout=30)
    assert "41" not in str(shown) and shown[-1]["ename"] == "CellTimeoutError" and "30 s" in shown[-1]["evalue"]
    # Printing or raising, or not, is a bit the answer chooses: every answer cell shows the same note.
    quiet = withhold_cell_outputs([], limits, timed_out=False, timeout=30)
    raised = withhold_cell_outputs([{"output_type": "error", "ename": "NotImplementedError", "evalue": "",
                                     "traceback": []}], limits, timed_out=False, timeout=30)
    assert quiet == raised == withhold_cell_outputs(kernel_outputs[:1], limits, timed_out=False, timeout=30)


def test_a_withheld_death_keeps_only_the_limit_that_caused_it():
    """The grader's sentence about a dead kernel holds what the answer chose: os._exit(41), the signal it
    sent itself, a message it forged on the channel, how much it held past a limit."""
    from autograde.withhold import KERNEL_STOPPED, KERNEL_STOPPED_LATE, withhold_death
    from course_lib.runner.limits import KernelLimits
    from course_lib.runner.watchdog import limit_message

    limits = KernelLimits()
    died = {
        "the kernel died while running this cell (exited with code 41: os._exit, a crash)": KERNEL_STOPPED,
        "the kernel died while running this cell (killed by signal 41: os._exit)": KERNEL_STOPPED,
        "the kernel sent a malformed message (reply to request 'SECRET 41' while waiting for 7) and was stopped":
            KERNEL_STOPPED,
        f"{limit_message('memory', limits)} (the kernel's processes held 4.1 GB)":
            f"{limit_message('memory', limits)}: the kernel was stopped while running this cell; the cells after "
            "it were not run",
        "the cell ran past its 30 s limit and the kernel did not stop when interrupted, so it was stopped "
        "(process limit of 512 reached: 541 processes and threads)":   # the limit stays, the count goes
            f"{limit_message('processes', limits)}: {KERNEL_STOPPED_LATE}",
    }
    files = limit_message("files", limits)
    died[f"{files}"] = f"{files}: the kernel was stopped while running this cell; the cells after it were not run"
    # The shape of that sentence, with the hidden inputs where the count goes (what a forged KernelDied
    # carried out before the grader kept its own record of deaths), is none of the grader's limits.
    died["limit of SECRET 41 files in the scratch folder reached"] = KERNEL_STOPPED
    for reason, expected in died.items():
        shown = withhold_death(reason, limits)
        assert shown == expected and "41" not in shown, reason


def test_due_times_parse_per_lab_and_refuse_what_is_not_a_time():
    from datetime import datetime

    import pytest

    from autograde.due import DueError, parse_due

    due = parse_due(["2026-12-01T23:59Z", "lab02=2026-12-08T12:00+01:00"], ["lab01", "lab02"])
    assert due.for_lab("lab01") == datetime(2026, 12, 1, 23, 59)
    assert due.for_lab("lab02") == datetime(2026, 12, 8, 11, 0)      # its zone, in UTC
    assert not parse_due(None, ["lab01"])
    for values, words in ((["friday"], "--due 'friday' is not a time"),
                          (["lab09=2026-12-01T23:59Z"], "unknown lab 'lab09'"),
                          (["2026-12-01T23:59Z", "2026-12-02T23:59Z"], "given twice"),
                          (["2026-12-01"], "--due 2026-12-01: a date alone would be read as 00:00 UTC"),
                          (["2026-12-01T23:59"], "it names no zone")):
        with pytest.raises(DueError, match=words):
            parse_due(values, ["lab01", "lab02"])


def _class_due(due: str, rule: str | None = None) -> LedgerState:
    from autograde.ledger import Event

    events = [Event(1, "t", "me", "due", "*", data={"due": due})]
    if rule:
        events.append(Event(2, "t", "me", "late_rule", "*", data={"rule": rule}))
    return LedgerState.from_events(events)


def test_lateness_is_the_claims_and_the_table_says_so():
    from autograde.due import late_note

    state = _class_due("2026-12-01T12:00:00+00:00")
    late = LabResult("ada", "lab01", timestamp="2026-12-01 14:05:00.000000 UTC")
    on_time = LabResult("bob", "lab01", timestamp="2026-12-01 11:00:00.000000 UTC")
    unknown = LabResult("cy", "lab01")
    stored, finals = graded([late, on_time, unknown], state)
    notes = [late_note(final.hand_in) for final in finals]
    assert notes == ["late by 2 h 05 min (claimed)", None, "no hand-in time (lateness unknown)"]
    assert late_note(graded([late])[1][0].hand_in) is None, "no due time: no lateness"
    table = score_table(stored, finals)
    assert "late by 2 h 05 min (claimed)" in table and "lateness unknown" in table


def test_a_late_penalty_counts_started_periods_up_to_its_cap_and_refuses_what_it_cannot_read():
    import pytest

    from autograde.due import DueError, parse_late_rule

    rule = parse_late_rule("10%/day,max=25%,grace=15min")
    assert [rule.penalty(seconds, 40) for seconds in (600, 16 * 60, 86400, 86400 + 16 * 60, 30 * 86400)] == \
        [0, 4, 4, 8, 10]
    assert parse_late_rule("2/h").penalty(3 * 3600 + 1, 10) == 8 and parse_late_rule("2/h").penalty(99 * 3600, 10) == 10
    for text, words in (("10%", "expected RATE/PERIOD"), ("10%/fortnight", "not a duration"),
                        ("150%/day", "at most 100%"), ("10%/day,cap=5", "unknown part 'cap=5'"),
                        ("0/day", "more than 0")):
        with pytest.raises(DueError, match=words):
            parse_late_rule(text)


def test_the_lms_receipt_beats_the_claim_and_an_extension_beats_the_due_time():
    from autograde.ledger import Event

    claim_on_time = LabResult("ada", "lab01", [NotebookResult("01_a", "graded", cells=[CellResult("t", 10, 10, PASSED)])],
                              timestamp="2026-12-01 11:00:00.000000 UTC")
    received_late = StoredResult(claim_on_time, {}, True, hand_in={"received": "2026-12-02 13:00:00.000000 UTC",
                                                                   "received_from": "the LMS export r.csv"})
    state = _class_due("2026-12-01T12:00:00+00:00", "10%/day")
    [final] = final_grades([received_late], state)
    assert final.hand_in["status"] == "late by the LMS's receipt" and final.late_penalty == 2 and final.score == 8
    extended = LedgerState.from_events(state.history + [
        Event(3, "t", "me", "extension", "lab01", "ada", data={"due": "2026-12-03T12:00:00+00:00"}, why="medical")])
    [final] = final_grades([received_late], extended)
    assert final.hand_in["status"] == "on time by the LMS's receipt" and final.score == 10
    assert "extension" in final.hand_in["due_basis"]
    flagged = StoredResult(claim_on_time, {}, True, hand_in={"lms": "Canvas", "lms_late": True})
    [final] = final_grades([flagged], state)
    assert final.hand_in["status"] == "late by the LMS's flag" and final.hand_in["late_by_s"] is None
    assert final.late_penalty == 0, "late by how much is unknown: no penalty is guessed"


_LOG_PLOT = """
import io, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
figure, axis = plt.subplots()
axis.plot([1, 10, 100], [1e-3, 1e-1, 1e1])
axis.set_yscale("log")
figure.savefig(io.BytesIO(), format="png")
"""


def test_notebook_kernels_ignore_a_font_list_left_by_another_matplotlib(tmp_path, monkeypatch):
    """A shared ~/.cache/matplotlib written by a deleted install lists no bundled fonts; kernels use their own."""
    import subprocess
    import sys

    import matplotlib.font_manager as font_manager

    from autograde.layout import kernel_environment

    shared = tmp_path / "xdg-cache" / "matplotlib"
    shared.mkdir(parents=True)
    poisoned = font_manager.FontManager()
    poisoned.ttflist = [font for font in poisoned.ttflist if "mpl-data" not in font.fname]
    font_manager.json_dump(poisoned, shared / f"fontlist-v{font_manager.FontManager.__version__}.json")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "course-cache"))
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)

    environment = kernel_environment()
    assert environment["MPLCONFIGDIR"].startswith(str(tmp_path / "course-cache"))
    ours = subprocess.run([sys.executable, "-c", _LOG_PLOT], env=environment, capture_output=True, text=True,
                          timeout=120)
    assert ours.returncode == 0 and "findfont" not in ours.stderr, ours.stderr
    # The same plot reading the shared folder warns: the poisoned list is a real hazard.
    shared_environment = {name: value for name, value in environment.items() if name != "MPLCONFIGDIR"}
    theirs = subprocess.run([sys.executable, "-c", _LOG_PLOT], env=shared_environment, capture_output=True,
                            text=True, timeout=120)
    assert "findfont" in theirs.stderr, "the poisoned font list did not poison: this test shows nothing"


def test_a_students_error_never_bears_the_name_of_a_graders_verdict():
    """The report reads a test cell's status from its error's name (KernelDied: the kernel died, CheckFailed: a
    check failed...). The grader writes those names itself; a student's class named like one says whose it is."""
    from autograde.execute import _students_outputs
    from autograde.results import VERDICT_NAMES, student_error_name

    for name in VERDICT_NAMES:
        assert student_error_name(name) == f"{name} (raised by your code)"
    assert student_error_name("ValueError") == "ValueError"
    outputs = _students_outputs([{"output_type": "error", "ename": "KernelDied", "evalue": "limit of 41 files",
                                  "traceback": []},
                                 {"output_type": "stream", "name": "stdout", "text": "KernelDied\n"}])
    assert outputs[0]["ename"] == "KernelDied (raised by your code)" and outputs[1]["text"] == "KernelDied\n"
