"""The marks of `course mark`, kept in the ledger (autograde.marking.ledger_marks), its claims
(autograde.marking.store) and the rules of autograde.marking.service: versions that refuse a stale
save, claims that keep two TAs off one answer, and a property test in which two TAs interleave at
random and no mark is ever lost or graded twice."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from autograde.ledger import Ledger
from autograde.marking.ledger_marks import LedgerMarks
from autograde.marking.service import MarkingApp, MarkingError
from autograde.marking.store import ClaimConflict, MarkConflict, SqliteClaims
from tests.marking_fixture import LAB, fixture_questions, write_class

LEASE = 300.0


class FakeClock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _save(store, student="s1", *, version, points=1.0, grader="ann", comment=""):
    return store.save_mark(LAB, student, "01_questions", "written_cache", points=points, criteria={"reuse": points},
                           comment=comment, grader=grader, expected_version=version)


# ------------------------------------------------------------------------------------- the store

def test_a_mark_is_a_cell_event_of_the_ledger_and_history_keeps_every_version(tmp_path):
    store = LedgerMarks(tmp_path)
    first = _save(store, version=0, points=1.0, comment="first")
    second = _save(store, version=first.version, points=2.0, grader="bob", comment="second")
    assert 0 < first.version < second.version
    assert [(m.points, m.grader, m.comment) for m in store.history(LAB, "s1", "01_questions", "written_cache")] \
        == [(1.0, "ann", "first"), (2.0, "bob", "second")]
    assert store.get_mark(LAB, "s1", "01_questions", "written_cache") == second
    assert store.get_marks(LAB) == [second]
    assert store.get_mark(LAB, "s2", "01_questions", "written_cache") is None
    (event,) = [e for e in Ledger(tmp_path).events(kind="cell") if e.seq == second.version]
    assert (event.lab, event.student, event.notebook, event.cell, event.value, event.who) == \
        (LAB, "s1", "01_questions", "written_cache", 2.0, "bob")
    assert event.data["criteria"] == {"reuse": 2.0} and event.data["comment"] == "second"
    assert event.data["by"] == "course mark"


def test_a_save_over_a_version_it_did_not_see_is_refused_with_the_current_mark(tmp_path):
    store = LedgerMarks(tmp_path)
    _save(store, version=0, points=2.0, grader="bob")
    with pytest.raises(MarkConflict) as conflict:
        _save(store, version=0, points=1.0, grader="ann")       # ann opened the answer before bob saved
    assert conflict.value.current.grader == "bob" and conflict.value.current.points == 2.0
    assert "bob saved a mark for this answer" in str(conflict.value)
    with pytest.raises(MarkConflict, match="no mark any more"):
        _save(store, "s9", version=3)
    assert [m.grader for m in store.history(LAB, "s1", "01_questions", "written_cache")] == ["bob"]


def test_a_score_written_by_someone_else_is_a_conflict_too_and_a_cleared_one_is_no_mark(tmp_path):
    """formgrader or `course adjust --cell` write the same key: a TA who saw the older mark is refused."""
    store, ledger = LedgerMarks(tmp_path), Ledger(tmp_path)
    mark = _save(store, version=0, points=2.0)
    ledger.record("cell", lab=LAB, student="s1", notebook="01_questions", cell="written_cache", value=3.0,
                  who="formgrader", why="manual score given in formgrader")
    with pytest.raises(MarkConflict, match="formgrader saved a mark"):
        _save(store, version=mark.version, points=1.0)
    ledger.record("cell", lab=LAB, student="s1", notebook="01_questions", cell="written_cache", cleared=True,
                  who="formgrader", why="manual score removed in formgrader")
    assert store.get_mark(LAB, "s1", "01_questions", "written_cache") is None
    assert _save(store, version=0, points=1.0).points == 1.0      # "no mark" seen: saved over the cleared event


def test_marks_survive_a_new_store_on_the_same_folder(tmp_path):
    _save(LedgerMarks(tmp_path), version=0, points=2.0)
    assert LedgerMarks(tmp_path).get_mark(LAB, "s1", "01_questions", "written_cache").points == 2.0


@pytest.mark.parametrize("bad, message", [
    (dict(points=-1.0), "points must be >= 0"),
    (dict(points=float("nan")), "finite"),
    (dict(criteria={"reuse": "2"}), "criteria must map"),
    (dict(grader=" "), "grader"),
    (dict(expected_version=-1), "expected_version"),
    (dict(comment="x" * 4001), "comment"),
])
def test_a_malformed_mark_is_refused(tmp_path, bad, message):
    arguments = dict(points=1.0, criteria={"reuse": 1.0}, comment="", grader="ann", expected_version=0, **{})
    arguments.update(bad)
    with pytest.raises(ValueError, match=message):
        LedgerMarks(tmp_path).save_mark(LAB, "s1", "01_questions", "written_cache", **arguments)
    assert Ledger(tmp_path).events() == []


def test_a_claim_keeps_other_tas_off_until_released_or_expired(tmp_path):
    clock = FakeClock()
    board = SqliteClaims(tmp_path / "claims.sqlite", clock=clock)
    claim = board.claim(LAB, "s1", "01_questions", "written_cache", "ann", 60)
    assert claim.expires_at == clock.now + 60
    with pytest.raises(ClaimConflict, match="ann is grading this answer") as conflict:
        board.claim(LAB, "s1", "01_questions", "written_cache", "bob", 60)
    assert conflict.value.claim.grader == "ann"
    board.release(LAB, "s1", "01_questions", "written_cache", "bob")          # not bob's: nothing happens
    assert board.holder(LAB, "s1", "01_questions", "written_cache").grader == "ann"
    clock.now += 30
    assert board.claim(LAB, "s1", "01_questions", "written_cache", "ann", 60).expires_at == clock.now + 60   # renewed
    clock.now += 61
    assert board.holder(LAB, "s1", "01_questions", "written_cache") is None and board.claims(LAB) == []
    assert board.claim(LAB, "s1", "01_questions", "written_cache", "bob", 60).grader == "bob"   # expired: free
    board.release(LAB, "s1", "01_questions", "written_cache", "bob")
    assert board.holder(LAB, "s1", "01_questions", "written_cache") is None


def test_two_tas_saving_at_once_from_two_connections_lose_nothing(tmp_path):
    """Real threads, each with its own store on the same ledger: read, save, and on a conflict read
    again, like the page does. Every save lands as exactly one version, in one unbroken chain."""
    saves_each = 25
    done = {"ann": 0, "bob": 0}
    errors = []

    def grade(grader: str):
        store = LedgerMarks(tmp_path)
        while done[grader] < saves_each:
            current = store.get_mark(LAB, "s1", "01_questions", "written_cache")
            try:
                _save(store, version=current.version if current else 0, grader=grader, comment=f"{grader} {done[grader]}")
                done[grader] += 1
            except MarkConflict:
                continue
            except Exception as error:   # noqa: BLE001 - the test reports anything else
                errors.append(error)
                return

    threads = [threading.Thread(target=grade, args=(name,)) for name in done]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    history = LedgerMarks(tmp_path).history(LAB, "s1", "01_questions", "written_cache")
    assert len(history) == 2 * saves_each
    assert [mark.version for mark in history] == sorted({mark.version for mark in history})
    assert sorted(mark.comment for mark in history) == sorted(f"{g} {i}" for g in done for i in range(saves_each))


# ------------------------------------------------------------------------------------- two TAs, any order

STUDENTS = ("s1", "s2")
QUESTIONS = ("01_questions/written_cache", "01_questions/written_batching")
GRADERS = ("ann", "bob")
POINTS = {"01_questions/written_cache": ({"reuse": 2.0, "cost": 1.0}, {"reuse": 1.0}, {}),
          "01_questions/written_batching": ({"weights": 1.0}, {"weights": 1.0, "memory_bound": 1.0}, {})}


class TwoTAs(RuleBasedStateMachine):
    """Two TAs open, claim, release and save marks on the same answers in any order while time passes.
    A model predicts every outcome; the store must agree, and its histories must match the model."""

    @initialize()
    def set_up(self):
        self.folder = Path(tempfile.mkdtemp(prefix="two-tas-"))
        questions = fixture_questions(self.folder / "questions")
        write_class(self.folder / "out", {student: {"written_cache": "An answer.", "written_batching": "Another."}
                                          for student in STUDENTS})
        self.clock = FakeClock()
        claims = SqliteClaims(self.folder / "claims.sqlite", clock=self.clock)
        self.app = MarkingApp(self.folder / "out", questions, LedgerMarks(self.folder / "out"), claims, b"k" * 32,
                              lease_s=LEASE, clock=self.clock)
        self.keys = {student: self.app.answer_key(student) for student in STUDENTS}
        self.seen = {}          # (grader, question, student) -> the version that TA last saw
        self.saves = {}         # (question, student) -> [(grader, points)] in the order they were accepted
        self.current = {}       # (question, student) -> the version of the last accepted save (0: none)
        self.holder = {}        # (question, student) -> (grader, expires_at)

    def _live_holder(self, answer):
        held = self.holder.get(answer)
        return held[0] if held and held[1] > self.clock.now else None

    @rule(grader=st.sampled_from(GRADERS), question=st.sampled_from(QUESTIONS), student=st.sampled_from(STUDENTS))
    def open_answer(self, grader, question, student):
        answer = (question, student)
        versions = {a["key"]: (a["mark"] or {}).get("version", 0) for a in self.app.answers(question)["answers"]}
        self.seen[(grader, *answer)] = versions[self.keys[student]]
        other = self._live_holder(answer)
        try:
            self.app.claim(question, self.keys[student], grader)
        except MarkingError as error:
            assert error.status == 409 and other not in (None, grader), error.message
            return
        assert other in (None, grader), f"{grader} claimed an answer {other} holds"
        self.holder[answer] = (grader, self.clock.now + LEASE)

    @rule(grader=st.sampled_from(GRADERS), question=st.sampled_from(QUESTIONS), student=st.sampled_from(STUDENTS))
    def leave_answer(self, grader, question, student):
        self.app.release(question, self.keys[student], grader)
        if self._live_holder((question, student)) == grader:
            del self.holder[(question, student)]

    @rule(seconds=st.sampled_from([1.0, 100.0, LEASE + 1]))
    def time_passes(self, seconds):
        self.clock.now += seconds

    @precondition(lambda self: self.seen)
    @rule(data=st.data())
    def save(self, data):
        grader, question, student = data.draw(st.sampled_from(sorted(self.seen)))
        criteria = data.draw(st.sampled_from(POINTS[question]))
        answer = (question, student)
        accepted = self.saves.setdefault(answer, [])
        other = self._live_holder(answer)
        try:
            result = self.app.save(question, self.keys[student], grader, criteria=criteria,
                                   expected_version=self.seen[(grader, *answer)])
        except MarkingError as error:
            assert error.status == 409, error.message
            stale = self.seen[(grader, *answer)] != self.current.get(answer, 0)
            assert other not in (None, grader) or stale, f"a good save by {grader} was refused: {error.message}"
            return
        assert other in (None, grader), f"{grader} saved over {other}'s claim: graded twice"
        assert self.seen[(grader, *answer)] == self.current.get(answer, 0), \
            f"{grader} saved over a mark they never saw: lost"
        accepted.append((grader, sum(criteria.values())))
        self.seen[(grader, *answer)] = self.current[answer] = result["mark"]["version"]

    @invariant()
    def every_accepted_save_is_one_version_in_order(self):
        if not hasattr(self, "app"):
            return
        for (question, student), accepted in self.saves.items():
            notebook, grade_id = question.split("/")
            history = self.app.marks.history(LAB, student, notebook, grade_id)
            assert [(m.grader, m.points) for m in history] == accepted
            assert [m.version for m in history][-1:] == ([self.current[(question, student)]] if accepted else [])

    @invariant()
    def at_most_one_ta_holds_an_answer(self):
        if not hasattr(self, "app"):
            return
        live = [(c.student, c.notebook, c.grade_id) for c in self.app.claims.claims(LAB)]
        assert len(live) == len(set(live))
        for claim in self.app.claims.claims(LAB):
            assert self._live_holder((f"{claim.notebook}/{claim.grade_id}", claim.student)) == claim.grader


TwoTAs.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])
test_two_tas_interleaved_never_lose_or_double_a_mark = TwoTAs.TestCase
