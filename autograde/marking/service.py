"""What the marking page asks for, without HTTP: one lab's questions, the class's answers, marks.

``MarkingApp`` joins four things: the lab's written questions and rubrics (``autograde.knowledge``),
the answers in the graded notebooks (``answers.AnswerIndex``), the marks (a ``MarkStore``) and the
claims (a ``ClaimBoard``). It checks every mark against its question's rubric before it is stored:
each criterion may only get one of its levels (full, a partial credit, none), an adjustment outside
the rubric needs a comment, and the total stays between 0 and the question's points.

The marks are the ledger's (``ledger_marks.LedgerMarks``): what the TA saves is the score every
grade, export and feedback page of the course reads.

Answers are named by a key, an HMAC of the student id under a secret kept beside the marks, so the
page and its requests never need a student id. With ``anonymous=True`` the ids never leave the
server: answers are labelled "Answer 1", "Answer 2"... in an order set by their keys (stable across
restarts, unrelated to the alphabet), so a TA grades without knowing whose answer it is.

Two rules keep two TAs from colliding (``store``'s module docstring): a mark is saved only over the
version its TA saw, and not while another TA holds the answer's claim.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autograde.knowledge.questions import LabQuestions, WrittenQuestion
from autograde.marking.answers import ANSWERED, Answer, AnswerIndex
from autograde.marking.store import (MAX_COMMENT_CHARS, MAX_REASON_CHARS, ClaimBoard, ClaimConflict, Mark,
                                     MarkConflict, MarkStore)

GRADER_NAME = re.compile(r"^[\w][\w .@'-]{0,63}$")
ANSWER_KEY = re.compile(r"^[0-9a-f]{16}$")
DEFAULT_LEASE_S = 300
TOLERANCE = 1e-9


class MarkingError(Exception):
    """A request the marking page cannot honour: ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str, **details):
        super().__init__(message)
        self.status, self.message, self.details = status, message, details


@dataclass
class MarkingApp:
    out_dir: Path
    questions: LabQuestions
    marks: MarkStore
    claims: ClaimBoard
    secret: bytes
    anonymous: bool = False
    lease_s: float = DEFAULT_LEASE_S
    default_grader: str = ""
    clock: Callable[[], float] = field(default=time.time)   # the claims' clock (the store's)

    def __post_init__(self):
        self.out_dir = Path(self.out_dir)
        self.index = AnswerIndex(self.out_dir, self.lab)

    @property
    def lab(self) -> str:
        return self.questions.lab

    # ---------------------------------------------------------------------------- reading

    def summary(self) -> dict:
        """The lab, its questions with rubrics and progress, and the page's settings."""
        students = self.index.students()
        marks = self._marks_by_answer()
        return {
            "lab": self.lab, "anonymous": self.anonymous, "lease_s": self.lease_s,
            "default_grader": self.default_grader, "students": len(students),
            "questions": [dict(_question_view(question), progress=self._progress(question, students, marks))
                          for question in self.questions.questions],
        }

    def answers(self, question_key: str) -> dict:
        """Every answer to one question, in grading order, with its mark and claim."""
        question = self._question(question_key)
        marks = self._marks_by_answer()
        holders = {(c.student, c.notebook, c.grade_id): c for c in self.claims.claims(self.lab)}
        now = self.clock()
        views = []
        for position, (key, student) in enumerate(self._ordered_students(), 1):
            answer = self.index.answer(student, question.notebook, question.grade_id)
            mark = marks.get((student, question.notebook, question.grade_id))
            claim = holders.get((student, question.notebook, question.grade_id))
            view = {
                "key": key, "label": f"Answer {position}" if self.anonymous else student,
                "status": answer.status, "text": answer.text, "truncated_chars": answer.truncated_chars,
                "cell_type": answer.cell_type, "attachments": answer.attachments, "problem": answer.problem,
                "mark": _mark_view(mark) if mark else None,
                "rubric_changed": bool(mark and mark.rubric_hash and mark.rubric_hash != question.rubric_hash),
                "claim": {"grader": claim.grader, "expires_in": max(0.0, claim.expires_at - now)} if claim else None,
            }
            if not self.anonymous:
                view["student"] = student
            views.append(view)
        return {"question": question.key, "answers": views}

    def history(self, question_key: str, answer_key: str) -> list[dict]:
        question = self._question(question_key)
        student = self._student(answer_key)
        return [_mark_view(mark) for mark in self.marks.history(self.lab, student, question.notebook, question.grade_id)]

    # ---------------------------------------------------------------------------- changing

    def claim(self, question_key: str, answer_key: str, grader: str) -> dict:
        question, student, grader = self._question(question_key), self._student(answer_key), _grader(grader)
        try:
            claim = self.claims.claim(self.lab, student, question.notebook, question.grade_id, grader, self.lease_s)
        except ClaimConflict as conflict:
            raise MarkingError(409, str(conflict), claim=self._claim_view(conflict.claim)) from None
        return {"claim": self._claim_view(claim)}

    def release(self, question_key: str, answer_key: str, grader: str) -> dict:
        question, student, grader = self._question(question_key), self._student(answer_key), _grader(grader)
        self.claims.release(self.lab, student, question.notebook, question.grade_id, grader)
        return {"released": True}

    def save(self, question_key: str, answer_key: str, grader: str, *, criteria, adjustment=0.0, comment="",
             expected_version, reason: str = "") -> dict:
        """Check a mark against the rubric and store it over ``expected_version``."""
        question, student, grader = self._question(question_key), self._student(answer_key), _grader(grader)
        given = _criteria(question, criteria)
        adjustment = _number(adjustment, "adjustment")
        comment = _text(comment, "comment", MAX_COMMENT_CHARS)
        reason = _text(reason, "reason", MAX_REASON_CHARS)
        if abs(adjustment) > question.points + TOLERANCE:
            raise MarkingError(400, f"an adjustment of {adjustment:g} is more than the question's {question.points:g} points")
        if adjustment and not comment.strip():
            raise MarkingError(400, "an adjustment outside the rubric needs a comment that says why")
        points = round(sum(given.values()) + adjustment, 9)
        if not -TOLERANCE <= points <= question.points + TOLERANCE:
            raise MarkingError(400, f"the total would be {points:g} points; it must be between 0 and {question.points:g}")
        holder = self.claims.holder(self.lab, student, question.notebook, question.grade_id)
        if holder and holder.grader != grader:
            raise MarkingError(409, f"not saved: {holder.grader} is grading this answer now; "
                                    "take the next one (n) or wait until they leave it", claim=self._claim_view(holder))
        if isinstance(expected_version, bool) or not isinstance(expected_version, int) or expected_version < 0:
            raise MarkingError(400, "expected_version must be the version of the mark you saw (0 if none)")
        try:
            mark = self.marks.save_mark(self.lab, student, question.notebook, question.grade_id,
                                        points=max(points, 0.0), criteria=given, comment=comment, grader=grader,
                                        expected_version=expected_version, adjustment=adjustment, reason=reason,
                                        rubric_hash=question.rubric_hash)
        except MarkConflict as conflict:
            raise MarkingError(409, str(conflict),
                               current=_mark_view(conflict.current) if conflict.current else None) from None
        except ValueError as error:   # the record refused it (a control character in the reason, ...)
            raise MarkingError(400, f"not saved: {error}") from None
        return {"mark": _mark_view(mark)}

    # ---------------------------------------------------------------------------- helpers

    def _claim_view(self, claim) -> dict:
        return {"grader": claim.grader, "expires_in": max(0.0, claim.expires_at - self.clock())}

    def answer_key(self, student: str) -> str:
        return hmac.new(self.secret, f"{self.lab}/{student}".encode(), hashlib.sha256).hexdigest()[:16]

    def _ordered_students(self) -> list[tuple[str, str]]:
        pairs = [(self.answer_key(student), student) for student in self.index.students()]
        return sorted(pairs) if self.anonymous else sorted(pairs, key=lambda pair: pair[1])

    def _student(self, answer_key) -> str:
        if not isinstance(answer_key, str) or not ANSWER_KEY.match(answer_key):
            raise MarkingError(400, "answer must be an answer key from this page")
        for key, student in self._ordered_students():
            if hmac.compare_digest(key, answer_key):
                return student
        raise MarkingError(404, "no such answer in this lab (was the output folder regraded without it?)")

    def _question(self, question_key) -> WrittenQuestion:
        try:
            return self.questions.question(str(question_key))
        except KeyError as error:
            raise MarkingError(404, str(error.args[0])) from None

    def _marks_by_answer(self) -> dict[tuple[str, str, str], Mark]:
        return {(m.student, m.notebook, m.grade_id): m for m in self.marks.get_marks(self.lab)}

    def _progress(self, question: WrittenQuestion, students: list[str], marks) -> dict:
        counts = {"answered": 0, "graded": 0, "awaiting": 0, "blank": 0, "missing": 0, "unreadable": 0}
        for student in students:
            answer: Answer = self.index.answer(student, question.notebook, question.grade_id)
            marked = (student, question.notebook, question.grade_id) in marks
            counts[answer.status] += 1
            counts["graded"] += marked
            counts["awaiting"] += answer.status == ANSWERED and not marked
        counts["total"] = len(students)
        return counts


def _question_view(question: WrittenQuestion) -> dict:
    return {
        "key": question.key, "notebook": question.notebook, "grade_id": question.grade_id,
        "points": question.points, "prompt": question.prompt, "model_answer": question.model_answer,
        "notes": question.notes, "rubric_hash": question.rubric_hash,
        "criteria": [{"id": c.id, "points": c.points, "text": c.text, "levels": list(c.levels()),
                      "partial": [{"points": p.points, "when": p.when} for p in c.partial]}
                     for c in question.criteria],
    }


def _mark_view(mark: Mark) -> dict:
    view = mark.as_dict()
    for private in ("lab", "student", "notebook", "grade_id"):
        view.pop(private)
    return view


def _criteria(question: WrittenQuestion, criteria) -> dict[str, float]:
    """Each criterion's points, checked against its levels; criteria left out get 0."""
    if not isinstance(criteria, dict):
        raise MarkingError(400, "criteria must map criterion ids to points")
    unknown = sorted(set(criteria) - {c.id for c in question.criteria})
    if unknown:
        raise MarkingError(400, f"no criterion {', '.join(map(str, unknown))} in this question's rubric "
                                "(the rubric may have changed: reload the page)")
    given = {}
    for criterion in question.criteria:
        value = _number(criteria.get(criterion.id, 0.0), f"criterion {criterion.id}")
        level = next((level for level in criterion.levels() if abs(level - value) <= TOLERANCE), None)
        if level is None:
            allowed = ", ".join(f"{level:g}" for level in criterion.levels())
            raise MarkingError(400, f"criterion {criterion.id} gives {allowed} points, not {value:g}")
        given[criterion.id] = level
    return given


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MarkingError(400, f"{name} must be a number")
    return float(value)


def _text(value, name: str, limit: int) -> str:
    if not isinstance(value, str):
        raise MarkingError(400, f"{name} must be text")
    if len(value) > limit:
        raise MarkingError(400, f"{name} is longer than {limit} characters")
    return value


def _grader(name) -> str:
    if not isinstance(name, str) or not GRADER_NAME.match(name.strip()):
        raise MarkingError(400, "say who you are: a name of 1 to 64 letters, digits, spaces or . @ ' -")
    return name.strip()
