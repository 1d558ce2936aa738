"""TA marks kept in the course's one record of scores: the ledger (``OUT/ledger.sqlite``).

``LedgerMarks`` is the ``MarkStore`` of ``course mark``: a saved mark is a ``cell`` event of the
ledger, keyed (lab, student, notebook, the answer cell's grade_id), with the points as its value and
the rubric in its data (``criteria``, ``adjustment``, ``comment``, ``rubric_hash``, ``by``); the TA is
its ``who`` and the reason for a change its ``why``. So a TA's mark is what every other part of the
course reads: ``final`` applies it like any person's cell score, the score table, report.json,
grades.csv, formgrader's gradebook, ``course export`` and (once released) the feedback show it, and
no regrade erases it (regrading writes result files, never the ledger).

A mark's ``version`` is the ``seq`` of its event. A save names the version its TA saw (0: no mark)
and becomes the ledger's ``based_on``: if anyone wrote a score for that answer since (another TA,
formgrader, ``course adjust``), nothing is written and ``MarkConflict`` carries the score there now.
A cleared score (formgrader's "back to the autograder's") reads as no mark.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from autograde.ledger import Event, Ledger, LedgerConflict
from autograde.marking.store import Mark, MarkConflict, check_mark, conflict_message

__all__ = ["LedgerMarks", "MARKED_BY"]

MARKED_BY = "course mark"


def _mark(event: Event) -> Mark:
    data = event.data or {}
    criteria = data.get("criteria") if isinstance(data.get("criteria"), dict) else {}
    try:
        saved_at = datetime.fromisoformat(event.at).timestamp()
    except ValueError:
        saved_at = 0.0
    return Mark(event.lab, event.student, event.notebook, event.cell,
                float(event.value or 0) + float(data.get("extra_credit") or 0),
                {str(key): float(value) for key, value in criteria.items() if isinstance(value, (int, float))},
                float(data.get("adjustment") or 0), str(data.get("comment") or ""), event.who, event.seq, saved_at,
                event.why, str(data.get("rubric_hash") or ""))


class LedgerMarks:
    """``MarkStore`` over ``Ledger(out_dir)`` (see the module docstring)."""

    def __init__(self, out_dir: Path):
        self.ledger = Ledger(out_dir)

    def _events(self, lab: str, student: str | None = None) -> list[Event]:
        return self.ledger.events(lab=lab, student=student, kind="cell")

    def get_marks(self, lab: str) -> list[Mark]:
        latest: dict[tuple, Event] = {}
        for event in self._events(lab):
            latest[(event.student, event.notebook, event.cell)] = event
        return [_mark(event) for key, event in sorted(latest.items()) if not event.cleared]

    def get_mark(self, lab: str, student: str, notebook: str, grade_id: str) -> Mark | None:
        event = self._latest(lab, student, notebook, grade_id)
        return _mark(event) if event is not None and not event.cleared else None

    def history(self, lab: str, student: str, notebook: str, grade_id: str) -> list[Mark]:
        return [_mark(event) for event in self._events(lab, student)
                if (event.notebook, event.cell) == (notebook, grade_id) and not event.cleared]

    def _latest(self, lab: str, student: str, notebook: str, grade_id: str) -> Event | None:
        found = [event for event in self._events(lab, student) if (event.notebook, event.cell) == (notebook, grade_id)]
        return found[-1] if found else None

    def save_mark(self, lab: str, student: str, notebook: str, grade_id: str, *, points: float,
                  criteria: dict[str, float], comment: str, grader: str, expected_version: int,
                  adjustment: float = 0.0, reason: str = "", rubric_hash: str = "") -> Mark:
        check_mark(points, criteria, comment, grader, expected_version, adjustment, reason)
        based_on = expected_version or None
        if based_on is None:    # "no mark" is also what a cleared score looks like: based on that event
            latest = self._latest(lab, student, notebook, grade_id)
            if latest is not None and latest.cleared:
                based_on = latest.seq
        data = {"criteria": {key: float(value) for key, value in criteria.items()}, "adjustment": float(adjustment),
                "comment": comment, "rubric_hash": rubric_hash, "by": MARKED_BY}
        try:
            event = self.ledger.record("cell", lab=lab, student=student, notebook=notebook, cell=grade_id,
                                       value=float(points), data=data, why=reason, who=grader, based_on=based_on)
        except LedgerConflict as conflict:
            current = None if conflict.newer is None or conflict.newer.cleared else _mark(conflict.newer)
            raise MarkConflict(conflict_message(current, expected_version), current) from None
        return _mark(event)
