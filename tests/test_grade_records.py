"""The parts of class-scale grading that need no grading run: result files, export, progress, workers.

Grading itself (Dask workers, a killed worker, resume, one student) is in test_class_grading.py.
"""

from __future__ import annotations

import csv
import io
import socket
import subprocess
import sys
import time

import pytest

from autograde.cluster import WorkerInfo, judge_workers, validate_address
from autograde.export import CANVAS_COLUMNS, canvas_csv, notebook_csv, read_roster
from autograde.final import final_grades
from autograde.ledger import LedgerState
from autograde.layout import GradingError
from autograde.progress import Progress
from autograde.results import NEEDS_GPU, CellResult, LabResult, NotebookResult
from autograde.snapshot import digest_files, take_snapshot
from autograde.store import ResultStore, StoredResult

LAB1, LAB2 = "lab01-text-to-tensors", "lab02-prefill-vs-decode"


def lab_result(student: str, lab: str, points: list[float], gpu_skipped: bool = False) -> LabResult:
    cells = [CellResult(f"test_{i}", p, 2.0, "passed" if p == 2 else "failed", None if p == 2 else "wrong")
             for i, p in enumerate(points)]
    if gpu_skipped:
        cells.append(CellResult("test_gpu", 0.0, 1.0, NEEDS_GPU, "skipped: needs a GPU"))
    return LabResult(student, lab, [NotebookResult("01_a", "graded", cells=cells[:1]),
                                    NotebookResult("02_b", "graded", cells=cells[1:])], timestamp="2026-01-05 10:00:00")


def stored(student, lab, points, complete=True, gpu_skipped=False) -> StoredResult:
    return StoredResult(lab_result(student, lab, points, gpu_skipped), {"submission": "x"}, complete=complete)


def test_a_result_file_holds_exactly_what_was_graded(tmp_path):
    store = ResultStore(tmp_path)
    original = stored("alice", LAB1, [2, 1, 0], gpu_skipped=True)
    path = store.save(original, feedback={"01_a": "<html>a</html>"}, autograded={"01_a": b"{}"})
    assert path == tmp_path / "results" / LAB1 / "alice.json"
    loaded = store.load(LAB1, "alice")
    assert loaded.result.as_dict() == original.result.as_dict()
    assert (loaded.result.score, loaded.result.max_score, loaded.result.skipped_points) == (3, 6, 1)
    assert (tmp_path / "feedback" / "alice" / LAB1 / "01_a.html").read_text() == "<html>a</html>"
    assert loaded.result.notebooks[0].feedback == f"feedback/alice/{LAB1}/01_a.html"
    # a regrade replaces the student's feedback folder whole: no page of the old grading is left
    store.save(stored("alice", LAB1, [2, 2, 2]), feedback={"02_b": "<html>b</html>"})
    assert sorted(p.name for p in (tmp_path / "feedback" / "alice" / LAB1).iterdir()) == ["02_b.html"]
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name or ".old-" in p.name], "temporary files left"


def test_an_unreadable_result_file_is_reported_not_fatal(tmp_path):
    store = ResultStore(tmp_path)
    store.save(stored("alice", LAB1, [2, 2, 2]))
    (tmp_path / "results" / LAB1 / "bob.json").write_text('{"format": 1, "student": "bo')
    results, unreadable = store.all()
    assert [r.result.student for r in results] == ["alice"]
    assert len(unreadable) == 1 and "bob.json" in unreadable[0]
    assert store.load(LAB1, "bob") is None


def test_a_snapshot_digest_changes_with_any_byte_and_name(tmp_path):
    folder = tmp_path / "alice" / LAB1
    folder.mkdir(parents=True)
    (folder / "01_a.ipynb").write_text("{}")
    (folder / "notes.txt").write_text("not graded")
    first = take_snapshot("alice", LAB1, folder)
    assert set(first.files) == {"01_a.ipynb"}
    (folder / "notes.txt").write_text("still not graded")
    assert take_snapshot("alice", LAB1, folder).digest == first.digest
    (folder / "01_a.ipynb").write_text("{ }")
    assert take_snapshot("alice", LAB1, folder).digest != first.digest
    assert digest_files({"a": b"bc"}) != digest_files({"ab": b"c"})


def canvas_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def canvas(results: list[StoredResult], roster=None, **options):
    return canvas_csv(results, final_grades(results, LedgerState()), roster, **options)


def test_canvas_export_has_canvas_columns_and_points_possible():
    export = canvas([stored("alice", LAB1, [2, 2, 1]), stored("bob", LAB1, [0, 0, 0]),
                     stored("alice", LAB2, [2, 2, 2])])
    rows = canvas_rows(export.text)
    assert rows[0] == CANVAS_COLUMNS + [LAB1, LAB2]
    assert rows[1] == ["Points Possible", "", "", "", "", "6", "6"]
    assert rows[2] == ["alice", "", "", "alice", "", "5", "6"]
    assert rows[3] == ["bob", "", "", "bob", "", "0", ""], "no submission: an empty cell, not a zero"


def test_canvas_export_matches_the_roster_and_reports_the_rest(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("Student,ID,SIS User ID,SIS Login ID,Section,Lab 1 (1234)\n"
                      "    Points Possible,,,,,50\n"
                      '"Doe, Jane",101,S-001,jdoe@uni.edu,Sec A,\n'
                      '"Roe, Rick",102,bob,rroe,Sec B,\n'
                      '"Poe, Paula",103,S-003,ppoe,Sec B,\n'
                      '"Student, Test",999,,,,\n')
    export = canvas([stored("jdoe", LAB1, [2, 2, 2]), stored("bob", LAB1, [2, 0, 0]),
                     stored("mallory", LAB1, [2, 2, 2]), stored("ppoe", LAB1, [0, 0, 0], complete=False)],
                    read_roster(roster), assignments={LAB1: "Lab 1"})
    rows = canvas_rows(export.text)
    assert rows[0] == CANVAS_COLUMNS + ["Lab 1 (1234)"], "the instructor's own assignment, by its Canvas header"
    by_name = {row[0]: row for row in rows[2:]}
    assert by_name["Doe, Jane"] == ["Doe, Jane", "101", "S-001", "jdoe@uni.edu", "Sec A", "6"]   # e-mail login
    assert by_name["Roe, Rick"] == ["Roe, Rick", "102", "bob", "rroe", "Sec B", "2"]              # SIS User ID
    assert by_name["Poe, Paula"][-1] == "", "a failed grading is left empty, never a zero"
    assert "mallory" not in export.text and "Student, Test" not in export.text
    notes = " ".join(export.notes)
    assert "mallory: not in the roster" in notes and "ppoe" in notes and "did not finish" in notes
    with pytest.raises(GradingError, match="no such assignment in the roster"):
        canvas([stored("jdoe", LAB1, [2, 2, 2])], read_roster(roster), assignments={LAB1: "Lab 9"})


def test_a_file_that_is_not_a_canvas_export_is_a_clear_error(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("name,email\nJane,j@x\n")
    with pytest.raises(GradingError, match="not a Canvas gradebook export"):
        read_roster(roster)


def test_notebook_csv_has_one_row_per_notebook():
    results = [stored("alice", LAB1, [2, 1, 0], gpu_skipped=True)]
    export = notebook_csv(results, final_grades(results, LedgerState()))
    rows = list(csv.DictReader(io.StringIO(export.text)))
    assert [(r["notebook"], r["score"], r["max_score"], r["skipped_points"]) for r in rows] == [
        ("01_a", "2", "2", "0"), ("02_b", "1", "4", "1")]


def test_export_command_writes_the_file_and_names_bad_arguments(tmp_path):
    out = tmp_path / "grades"
    ResultStore(out).save(stored("alice", LAB1, [2, 2, 2]))

    def export(*args):
        return subprocess.run([sys.executable, "-m", "autograde.cli", "export", *args], capture_output=True,
                              text=True, timeout=120)

    done = export(str(out), "--format", "canvas", "--out", str(tmp_path / "canvas.csv"))
    assert done.returncode == 0, done.stderr
    assert canvas_rows((tmp_path / "canvas.csv").read_text())[2][-1] == "6"
    missing = export(str(tmp_path), "--format", "csv", "--out", str(tmp_path / "x.csv"))
    assert missing.returncode == 1 and "no results/ folder" in missing.stderr
    wrong_lab = export(str(out), "--format", "csv", "--lab", "lab09-x", "--out", str(tmp_path / "x.csv"))
    assert wrong_lab.returncode == 1 and "--lab lab09-x" in wrong_lab.stderr


def test_progress_prints_one_line_per_submission_when_not_a_terminal():
    stream = io.StringIO()
    progress = Progress(3, stream=stream)
    assert progress.bar is None, "a StringIO is not a terminal"
    progress.finished("alice", LAB1, "5/6 (83%)", elapsed=1.5, worker="tcp://10.0.0.7:4000")
    progress.finished("bob", LAB1, "grading failed: boom", failed=True)
    progress.finished("carol", LAB1, "6/6 (100%)")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith(f"[1/3] alice/{LAB1} 5/6 (83%) 1.5 s on tcp://10.0.0.7:4000; 0 failed so far; ETA ")
    assert lines[1].startswith(f"[2/3] bob/{LAB1} grading failed: boom; 1 failed so far; ETA ")
    assert lines[2] == f"[3/3] carol/{LAB1} 6/6 (100%); 1 failed so far"


def test_workers_without_the_course_or_with_other_code_are_named():
    details = {"tcp://a:1": {"host": "a"}, "tcp://b:1": {"host": "b"}, "tcp://c:1": {"host": "c", "resources": {"GPU": 1}}}
    good = {"fingerprint": "0.1.0+abc", "gpu": True, "isolation": "bubblewrap"}
    with pytest.raises(GradingError) as raised:
        judge_workers({"tcp://a:1": {"error": "ModuleNotFoundError: No module named 'course_lib'"},
                       "tcp://b:1": {**good, "fingerprint": "0.1.0+def"}, "tcp://c:1": good}, details, "0.1.0+abc")
    message = str(raised.value)
    assert "tcp://a:1: course_lib is not installed" in message
    assert "tcp://b:1: has course_lib 0.1.0+def, this grader has 0.1.0+abc" in message
    assert "tcp://c:1" not in message
    [worker] = judge_workers({"tcp://c:1": good}, details, "0.1.0+abc")
    assert worker == WorkerInfo("tcp://c:1", "c", {"GPU": 1}, True, "0.1.0+abc", "bubblewrap") and worker.gpu_resource


@pytest.mark.parametrize("address", ["foo", "tcp://host", "http://host:80", "tcp://host:99999", ""])
def test_a_malformed_cluster_address_names_the_option(address):
    with pytest.raises(GradingError, match="--cluster must be a scheduler address"):
        validate_address(address)


def test_an_unreachable_cluster_is_a_clear_error_within_seconds(tmp_path):
    from tests.grading_fixture import write_fixture_lab

    write_fixture_lab(tmp_path / "solutions")
    (tmp_path / "submissions" / "alice" / "lab00-fixture").mkdir(parents=True)
    (tmp_path / "submissions" / "alice" / "lab00-fixture" / "ch1.ipynb").write_text("{}")
    with socket.socket() as probe:   # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "autograde.cli", "grade", "submissions", "--solutions", "solutions",
                           "--out", "out", "--cluster", f"tcp://127.0.0.1:{port}", "--connect-timeout", "3"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"could not reach the Dask scheduler at tcp://127.0.0.1:{port} within 3 s" in done.stderr
    assert time.monotonic() - started < 60
    assert not (tmp_path / "out" / "gradebook.db").exists() and not (tmp_path / "out" / "grades.csv").exists()


# ---- what the dispatcher does with an answer (the worker's side is in test_class_grading.py) -------------

def dispatcher_for(tmp_path):
    """A dispatcher writing to tmp_path/out, for the fixture lab, with no cluster behind it."""
    from types import SimpleNamespace

    from autograde.dispatch import GradeRun, _Dispatcher
    from autograde.snapshot import lab_bundle
    from tests.grading_fixture import LAB, write_fixture_lab

    write_fixture_lab(tmp_path / "solutions")
    bundle = lab_bundle(tmp_path / "solutions", LAB)
    stream = io.StringIO()
    run = GradeRun(total=1)
    dispatcher = _Dispatcher(SimpleNamespace(client=None), ResultStore(tmp_path / "out"), {LAB: bundle}, set(), run,
                             Progress(1, stream=stream), timeout=10, fingerprint="f", known_labs=[LAB], hidden=[],
                             gpu_resource_route=False, local=True)
    return dispatcher, run, stream, LAB


def test_a_folder_that_changes_while_graded_is_reported_and_graded_again_on_resume(tmp_path):
    from autograde.dispatch import _unchanged
    from autograde.grade_lab import Submission

    dispatcher, run, stream, lab = dispatcher_for(tmp_path)
    folder = tmp_path / "submissions" / "alice" / lab
    folder.mkdir(parents=True)
    (folder / "ch1.ipynb").write_text('{"cells": []}')
    submission = Submission("alice", lab, folder)
    snapshot = take_snapshot("alice", lab, folder)
    (folder / "ch1.ipynb").write_text('{"cells": [], "changed": true}')   # the student saves again mid-grading
    answer = {"result": lab_result("alice", lab, [2, 2]).as_dict(), "feedback": {}, "autograded": {},
              "worker": "tcp://w:1", "gpu": False, "elapsed_s": 1.0, "fingerprint": "f"}
    dispatcher._record(submission, snapshot, answer)
    kept = dispatcher.store.load(lab, "alice")
    assert kept.complete and kept.key["submission"] == snapshot.digest
    assert any("changed while it was being graded" in problem for problem in kept.result.problems)
    assert "changed while it was being graded" in stream.getvalue()
    assert not _unchanged(kept, submission, dispatcher.bundles, "f", 10), "--resume must grade the new files"


def test_a_failed_grading_never_replaces_a_grade(tmp_path):
    from distributed import KilledWorker

    from autograde.dispatch import _describe
    from autograde.grade_lab import Submission

    dispatcher, run, stream, lab = dispatcher_for(tmp_path)
    reason = _describe(KilledWorker("grade-x", None, 2))
    assert "died 3 times" in reason
    # no earlier result: a "grading failed" record that --resume grades again
    dispatcher._record_failure(Submission("bob", lab, tmp_path), reason)
    failed = dispatcher.store.load(lab, "bob")
    assert not failed.complete and {nb.status for nb in failed.result.notebooks} == {"grading failed"}
    assert [nb.name for nb in failed.result.notebooks] == ["ch1", "ch2"]
    # an earlier complete result is kept, and the failure reported
    dispatcher.store.save(stored("carol", lab, [2, 2]))
    before = dispatcher.store.result_path(lab, "carol").read_bytes()
    dispatcher._record_failure(Submission("carol", lab, tmp_path), reason)
    assert dispatcher.store.result_path(lab, "carol").read_bytes() == before
    assert run.failed == 2 and any("carol" in p and "kept the earlier result" in p for p in run.problems)


def test_a_task_the_scheduler_drops_is_sent_again_then_reported_never_stopping_the_run(tmp_path):
    """A killed worker can take the last copy of a lab's sources with it: the scheduler then forgets
    the tasks that needed them, and ``distributed.wait`` raises. Those go out again (``MAX_SENDS`` in all)."""
    from autograde.dispatch import MAX_SENDS
    from autograde.grade_lab import Submission

    class Future:   # what the dispatcher asks of a Dask future here
        def __init__(self, cancelled: bool) -> None:
            self.cancelled = lambda: cancelled

    dispatcher, run, stream, lab = dispatcher_for(tmp_path)
    folder = tmp_path / "submissions" / "alice" / lab
    folder.mkdir(parents=True)
    (folder / "ch1.ipynb").write_text('{"cells": []}')
    submission, snapshot = Submission("alice", lab, folder), take_snapshot("alice", lab, folder)
    sent = []
    dispatcher.submit = lambda *args, **kwargs: sent.append(args[0].student)
    running = Future(False)
    dispatcher.in_flight = {Future(True): (submission, snapshot, False),
                            running: (Submission("bob", lab, folder), snapshot, False)}
    dispatcher.sends[("alice", lab)] = 1
    assert dispatcher.resend_dropped() == 1
    assert sent == ["alice"] and list(dispatcher.in_flight) == [running], "only the dropped task goes out again"
    assert "alice/" in stream.getvalue() and "sent again" in stream.getvalue()

    dispatcher.in_flight[Future(True)] = (submission, snapshot, False)
    dispatcher.sends[("alice", lab)] = MAX_SENDS
    assert dispatcher.resend_dropped() == 1 and sent == ["alice"], "no more sends after MAX_SENDS"
    assert run.failed == 1 and any("dropped its task" in problem for problem in run.problems)
    assert dispatcher.store.load(lab, "alice").complete is False
