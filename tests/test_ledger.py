"""The ledger (``autograde.ledger``) and the grade it gives (``autograde.final``): append-only, safe with
several writers, and whatever the order of overrides and regrades, the last word wins and nothing is lost."""

from __future__ import annotations

import multiprocessing
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autograde.final import final_grade
from autograde.ledger import Ledger, LedgerConflict, LedgerError
from autograde.results import FAILED, PASSED, CellResult, LabResult, NotebookResult
from autograde.store import StoredResult

LAB, STUDENT = "lab01-text-to-tensors", "s1234567"
CELLS = [("01_a", "test_one", 2.0), ("01_a", "test_two", 3.0), ("02_b", "test_three", 5.0)]


def graded(points: list[float]) -> StoredResult:
    notebooks: dict[str, NotebookResult] = {}
    for (notebook, cell, maximum), got in zip(CELLS, points):
        notebooks.setdefault(notebook, NotebookResult(notebook, "graded")).cells.append(
            CellResult(cell, got, maximum, PASSED if got == maximum else FAILED))
    return StoredResult(LabResult(STUDENT, LAB, list(notebooks.values())), {"lab_sources": "v1"}, complete=True)


def test_the_ledger_refuses_to_change_or_delete_an_event(tmp_path):
    ledger = Ledger(tmp_path)
    event = ledger.record("score", lab=LAB, student=STUDENT, value=7, why="regrade request", who="ta-1")
    assert (event.seq, event.who, event.value) == (1, "ta-1", 7.0)
    with sqlite3.connect(ledger.path) as connection:
        for statement in ("UPDATE events SET value = 10", "DELETE FROM events"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                connection.execute(statement)
    assert [e.value for e in ledger.events()] == [7.0]


@pytest.mark.parametrize("event, words", [
    (dict(kind="grade", lab=LAB, student=STUDENT, value=1), "kind 'grade'"),
    (dict(kind="score", lab=LAB, student=STUDENT, value=-1), "never negative"),
    (dict(kind="score", lab=LAB, student=STUDENT, value=float("nan")), "a finite number"),
    (dict(kind="score", lab=LAB, value=1), "needs a student"),
    (dict(kind="cell", lab=LAB, student=STUDENT, value=1), "needs a notebook and a cell"),
    (dict(kind="score", lab=LAB, student=STUDENT), "needs a value"),
    (dict(kind="extension", lab=LAB, student=STUDENT), "data\\['due'\\]"),
    (dict(kind="due", lab=LAB, student=STUDENT, data={"due": "x"}), "for the class"),
    (dict(kind="score", lab=LAB, student="a\x00b", value=1), "no control characters"),
])
def test_an_event_that_makes_no_sense_is_refused_naming_the_field(tmp_path, event, words):
    with pytest.raises(LedgerError, match=words):
        Ledger(tmp_path).record(**event)
    assert Ledger(tmp_path).events() == []


def test_a_writer_that_looked_before_another_wrote_is_told_and_writes_nothing(tmp_path):
    """Two TAs open the same cell; the first saves; the second's save names the first's change."""
    first, second = Ledger(tmp_path), Ledger(tmp_path)
    seen = first.state().cell_scores(LAB, STUDENT).get(("01_a", "test_one"))
    assert seen is None
    first.record("cell", lab=LAB, student=STUDENT, notebook="01_a", cell="test_one", value=2, who="ta-1",
                 why="full marks", based_on=None)
    with pytest.raises(LedgerConflict, match="changed since you looked.*ta-1 wrote event 1"):
        second.record("cell", lab=LAB, student=STUDENT, notebook="01_a", cell="test_one", value=0, who="ta-2",
                      why="no marks", based_on=None)
    assert [e.who for e in second.events()] == ["ta-1"]
    second.record("cell", lab=LAB, student=STUDENT, notebook="01_a", cell="test_one", value=1, who="ta-2",
                  why="after reading ta-1's", based_on=1)
    assert second.state().cell_scores(LAB, STUDENT)[("01_a", "test_one")].value == 1


def _write_many(folder: str, who: str, count: int) -> None:
    ledger = Ledger(Path(folder))
    for index in range(count):
        ledger.record("cell", lab=LAB, student=f"s{index % 7}", notebook="01_a", cell="test_one", value=index % 3,
                      who=who, why=f"{who} #{index}")


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_many, args=(str(tmp_path), who, 40)) for who in ("ta-1", "ta-2")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
        assert writer.exitcode == 0
    events = Ledger(tmp_path).events()
    assert len(events) == 80 and len({e.seq for e in events}) == 80
    assert sorted(e.why for e in events) == sorted(f"{who} #{i}" for who in ("ta-1", "ta-2") for i in range(40))


# An operation on one student's lab: a regrade (new autograder points), a cell override, a lab score
# override, or clearing one of those overrides.
points = st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=3, max_size=3)
operation = st.one_of(
    st.tuples(st.just("regrade"), points),
    st.tuples(st.just("cell"), st.integers(0, 2), st.sampled_from([0.0, 0.5, 1.0, 2.0])),
    st.tuples(st.just("score"), st.sampled_from([0.0, 3.5, 10.0])),
    st.tuples(st.just("clear cell"), st.integers(0, 2)),
    st.tuples(st.just("clear score")),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=12))
def test_whatever_the_order_of_overrides_and_regrades_the_last_word_wins_and_history_keeps_all(operations):
    from autograde.dispatch import record_grading

    memory = "/dev/shm" if Path("/dev/shm").is_dir() else None   # no disk syncs: the logic is under test
    with tempfile.TemporaryDirectory(dir=memory) as folder:
        ledger = Ledger(Path(folder))
        stored = graded([0.0, 0.0, 0.0])
        record_grading(ledger, stored)
        cells: dict[int, float] = {}       # what the model expects: the last override of each cell
        score: float | None = None         # and of the lab score
        for op in operations:
            if op[0] == "regrade":
                stored = graded(op[1])
                record_grading(ledger, stored)
            elif op[0] == "cell":
                notebook, cell, _ = CELLS[op[1]]
                ledger.record("cell", lab=LAB, student=STUDENT, notebook=notebook, cell=cell, value=op[2], why="ta")
                cells[op[1]] = op[2]
            elif op[0] == "score":
                ledger.record("score", lab=LAB, student=STUDENT, value=op[1], why="regrade request")
                score = op[1]
            elif op[0] == "clear cell":
                notebook, cell, _ = CELLS[op[1]]
                ledger.record("cell", lab=LAB, student=STUDENT, notebook=notebook, cell=cell, cleared=True, why="undo")
                cells.pop(op[1], None)
            else:
                ledger.record("score", lab=LAB, student=STUDENT, cleared=True, why="undo")
                score = None
        final = final_grade(stored, ledger.state())
        autograder = [cell.points for notebook in stored.result.notebooks for cell in notebook.cells]
        expected_raw = sum(cells.get(index, autograder[index]) for index in range(len(CELLS)))
        assert final.raw_score == pytest.approx(score if score is not None else expected_raw)
        assert final.score == final.raw_score and final.auto_score == sum(autograder)
        history = ledger.events()
        assert len(history) == len(operations) + 1, "every grading and every change is kept"
        assert len(ledger.state().gradings(LAB, STUDENT)) == 1 + sum(op[0] == "regrade" for op in operations)
