"""The grade a student gets: the autograder's points, the course staff's changes, the late penalty.

``final_grade`` combines one result file (``store.StoredResult``: what the autograder found, and
what the LMS said about the hand-in) with the ledger (``ledger.LedgerState``: people's cell scores,
a lab score set after a regrade request, a penalty, an extension, the due time and the late rule):

    cells      each test cell's points: a person's score for the cell (``cell`` event, plus its
               extra credit) replaces the autograder's
    raw_score  the cells' sum, or a person's score for the whole lab (``score`` event)
    score      raw_score - late penalty (``due.LateRule`` on the hand-in's lateness, its due time the
               student's extension or the lab's) - penalty (``penalty`` event), never below 0

A written answer (``results.AWAITING_TA``) has no points until a person gives it some: a TA's mark
(``course mark``, formgrader, ``course adjust --cell``) is a ``cell`` event like any other. Until
every answered written question of the lab has one (or a person set the lab's score), its points
``await a TA`` and the grade is not complete.

Every command that shows a grade uses this: the score table, report.json, grades.csv, the
gradebook, the feedback pages and ``course export``. A grade is ``complete`` when the autograder
finished the submission and no written answer awaits a TA; an incomplete one goes to an LMS as an
empty cell, never a zero (``course export --partial`` aside).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from autograde.due import DueError, Receipt, hand_in, parse_late_rule, parse_time
from autograde.ledger import Event, LedgerState
from autograde.results import AWAITING_TA, NEEDS_GPU
from autograde.store import StoredResult

__all__ = ["FinalGrade", "final_grade", "final_grades"]


@dataclass
class FinalGrade:
    """One student's grade for one lab, with what changed it and why."""

    student: str
    lab: str
    auto_score: float             # the autograder's points
    max_score: float              # the points possible (GPU-only checks skipped on a CPU left out)
    raw_score: float              # with the staff's cell scores and lab score
    late_penalty: float = 0.0
    penalty: float = 0.0
    score: float = 0.0
    complete: bool = True         # graded by the autograder, and no written answer awaits a TA
    autograded: bool = True       # the autograder finished (False: grading failed; grade it again)
    awaiting: dict[str, float] = field(default_factory=dict)   # "<notebook>/<grade_id>" -> points: written
    #                                                             answers no person has marked yet
    hand_in: dict | None = None   # due.hand_in's entry, or None without a due time
    adjustments: list[dict] = field(default_factory=list)   # what people changed, for report.json and feedback
    cells: dict[tuple[str, str], float] = field(default_factory=dict)   # (notebook, cell) -> points as graded now
    notes: list[str] = field(default_factory=list)

    @property
    def percent(self) -> float:
        return 100.0 * self.score / self.max_score if self.max_score else 0.0

    @property
    def awaiting_ta(self) -> float:
        """Points of the written answers that await a TA."""
        return sum(self.awaiting.values())

    @property
    def adjusted(self) -> bool:
        return bool(self.adjustments) or bool(self.late_penalty)

    def as_dict(self) -> dict:
        return {"auto_score": self.auto_score, "raw_score": self.raw_score, "late_penalty": self.late_penalty,
                "penalty": self.penalty, "score": self.score, "max_score": self.max_score,
                "percent": round(self.percent, 1), "complete": self.complete, "autograded": self.autograded,
                "awaiting_ta": self.awaiting_ta, "awaiting": self.awaiting, "adjustments": self.adjustments,
                "notes": self.notes}


def _adjustment(event: Event, what: str, before: float | None, after: float | None, **extra) -> dict:
    return {"kind": event.kind, "what": what, "from": before, "to": after, "why": event.why, "who": event.who,
            "at": event.at, "seq": event.seq, "comment": event.data.get("comment") or "", **extra}


def _deadline(state: LedgerState, lab: str, student: str) -> tuple[datetime | None, str]:
    extension = state.extension(lab, student)
    if extension is not None:
        return parse_time(extension.data["due"], ""), f"an extension ({extension.why or 'no reason given'})"
    due = state.due(lab)
    if due is not None:
        return parse_time(due.data["due"], ""), "the lab's due time"
    return None, ""


def _receipt(meta: dict) -> Receipt | None:
    if not meta.get("received"):
        return None
    try:
        return Receipt(parse_time(meta["received"].replace(" UTC", "Z"), ""), meta.get("received_from") or "the LMS")
    except DueError:
        return None


def final_grade(stored: StoredResult, state: LedgerState) -> FinalGrade:
    """One result with the ledger applied (see the module docstring)."""
    result = stored.result
    grade = FinalGrade(result.student, result.lab, result.score, result.max_score, result.score,
                       complete=stored.complete, autograded=stored.complete)
    staff_cells = state.cell_scores(result.lab, result.student)
    applied = set()
    for notebook in result.notebooks:
        for cell in notebook.cells:
            key = (notebook.name, cell.grade_id)
            points = cell.points
            event = staff_cells.get(key)
            if event is not None:
                applied.add(key)
                points = float(event.value) + float(event.data.get("extra_credit") or 0)
                if cell.status == NEEDS_GPU:
                    grade.max_score += cell.max_points   # graded by a person: it counts after all
                extra = {"written": True, "criteria": event.data.get("criteria") or {},
                         "rubric_hash": event.data.get("rubric_hash") or ""} if cell.written else {}
                grade.adjustments.append(_adjustment(event, f"{notebook.name}/{cell.grade_id}", cell.points, points,
                                                     max_points=cell.max_points, **extra))
            elif cell.status == AWAITING_TA:
                grade.awaiting[f"{notebook.name}/{cell.grade_id}"] = cell.max_points
            grade.cells[key] = points
    for key, event in staff_cells.items():
        if key not in applied:
            grade.notes.append(f"a staff score for {key[0]}/{key[1]} (event {event.seq}) names a cell this result does "
                               "not have: not applied")
    grade.raw_score = round(sum(grade.cells.values()), 4)
    lab_score = state.lab_score(result.lab, result.student)
    if lab_score is not None:
        grade.adjustments.append(_adjustment(lab_score, "the lab's score", grade.raw_score, float(lab_score.value)))
        grade.raw_score = float(lab_score.value)
        grade.awaiting = {}     # a person decided the whole lab
    grade.complete = grade.autograded and not grade.awaiting
    try:
        deadline, basis = _deadline(state, result.lab, result.student)
        rule_event = state.late_rule(result.lab)
        rule = parse_late_rule(rule_event.data["rule"]) if rule_event is not None else None
    except DueError as error:   # written by hand into the ledger: say so rather than fail the class
        deadline, basis, rule = None, "", None
        grade.notes.append(f"the ledger's due time or late rule cannot be read: {error}")
    meta = stored.hand_in or {}
    grade.hand_in = hand_in(deadline=deadline, deadline_basis=basis, claim=result.timestamp, receipt=_receipt(meta),
                            lms_late=meta.get("lms_late"), rule=rule, max_score=grade.max_score)
    extension = state.extension(result.lab, result.student)
    if extension is not None:
        grade.adjustments.append(_adjustment(extension, "due time", None, None, due=extension.data["due"]))
    if grade.hand_in is not None:
        grade.late_penalty = float(grade.hand_in["late_penalty"])
    penalty = state.penalty(result.lab, result.student)
    if penalty is not None:
        percent = penalty.data.get("percent")
        grade.penalty = round(grade.max_score * float(percent) / 100, 4) if percent is not None else float(penalty.value)
        grade.adjustments.append(_adjustment(penalty, "penalty", None, -grade.penalty))
    grade.score = round(max(0.0, grade.raw_score - grade.late_penalty - grade.penalty), 4)
    return grade


def final_grades(stored: list[StoredResult], state: LedgerState) -> list[FinalGrade]:
    return [final_grade(entry, state) for entry in stored]
