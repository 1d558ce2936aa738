"""Grades out to the LMS: a Canvas gradebook import file, a plain CSV with one row per notebook, or a wide CSV.

All are built from an output folder's result files (``OUT/results/<lab>/<student>.json``) with its
ledger applied (``final``): the staff's cell scores, a lab score set after a regrade, penalties and
the late penalty. What formgrader changed in ``OUT/gradebook.db`` is read into the ledger first.

Canvas imports a CSV whose first columns are ``Student, ID, SIS User ID, SIS Login ID, Section``,
then one column per assignment; a second row, ``Points Possible``, gives each assignment's points.
Canvas finds each student by ID, SIS User ID or SIS Login ID, and fills the assignment whose column
header it knows: ``Lab 1 (12345)``, the assignment's id in brackets. A header it does not know
becomes a *new* assignment, so each lab's column is named after the instructor's own assignment
(``--assignment LAB=NAME``: the name, or its id, as in the roster's header; without it the lab's
folder name, which Canvas adds as a new column). With the roster (Canvas's gradebook export,
``--roster``, or the one ``course grade --roster`` kept in OUT) every student id is matched to the
roster's SIS Login ID, SIS User ID or ID (or the part of an e-mail login before the ``@``); a
hand-in from an LMS download carries the uploader's Canvas ID, which matches without a roster too.

A grading that did not finish (a worker died three times) gets an empty cell, never a zero, and is
reported: Canvas keeps what it had. So does a lab whose written answers still await a TA (``final``:
``awaiting``): its score without them is not the student's grade, and Canvas reads an empty cell as
"not graded yet". ``partial=True`` (``course export --partial``) writes those scores anyway, each one
listed in the notes as partial; the notes always say, per lab, how many answers await a TA. So does a roster student who handed in nothing, unless
``--missing zero``. A lab graded on more than one version of its tests is reported too.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from autograde.final import FinalGrade
from autograde.layout import GradingError
from autograde.lms import CANVAS_COLUMNS, Roster, RosterEntry, assignment_column, match_student, read_roster
from autograde.store import StoredResult

__all__ = ["CANVAS_COLUMNS", "Export", "RosterEntry", "canvas_csv", "notebook_csv", "read_roster", "wide_csv"]

NOTEBOOK_COLUMNS = ["assignment", "notebook", "student_id", "score", "max_score", "skipped_points", "status",
                    "awaiting_ta"]


@dataclass
class Export:
    text: str
    notes: list[str] = field(default_factory=list)   # unmatched students, failed gradings, differing maxima


def _number(value: float) -> str:
    return f"{value:g}"


def _points_possible(finals: list[FinalGrade], lab: str, notes: list[str]) -> float:
    maxima = Counter(final.max_score for final in finals if final.lab == lab and final.autograded)
    if not maxima:
        return 0.0
    if len(maxima) > 1:
        shown = ", ".join(f"{_number(value)} for {count}" for value, count in sorted(maxima.items()))
        notes.append(f"{lab}: max_score differs between students ({shown}; GPU-only cells skipped for some?); "
                     f"Points Possible is the largest")
    return max(maxima)


def awaiting_notes(finals: list[FinalGrade], *, partial: bool) -> list[str]:
    """Per lab: how many written answers (of how many students) await a TA, and what the file holds for them."""
    notes = []
    for lab in sorted({final.lab for final in finals}):
        pending = [final for final in finals if final.lab == lab and final.autograded and final.awaiting]
        if not pending:
            continue
        answers = sum(len(final.awaiting) for final in pending)
        what = ("their scores WITHOUT those answers are in the file (--partial): the LMS will show them as grades"
                if partial else "their cells are left empty (Canvas: not graded yet); --partial writes the "
                "scores without those answers")
        notes.append(f"{lab}: {answers} written answer{'s' if answers > 1 else ''} of {len(pending)} student"
                     f"{'s' if len(pending) > 1 else ''} {'await' if answers > 1 else 'awaits'} a TA "
                     f"(course mark OUT --lab {lab}); {what}")
    return notes


def _cells(stored: list[StoredResult], finals: list[FinalGrade], notes: list[str], *,
           partial: bool = False) -> dict[str, dict[str, str]]:
    """{student: {lab: the score as the LMS gets it}}: empty for a grading that did not finish, and for
    written answers awaiting a TA unless ``partial``."""
    scores: dict[str, dict[str, str]] = {}
    notes += awaiting_notes(finals, partial=partial)
    for entry, final in zip(stored, finals):
        if not final.autograded:
            notes.append(f"{final.student}/{final.lab}: grading did not finish, left empty (grade it again)")
            scores.setdefault(final.student, {})[final.lab] = ""
            continue
        if final.awaiting and not partial:
            scores.setdefault(final.student, {})[final.lab] = ""
            continue
        if final.awaiting:
            notes.append(f"PARTIAL: {final.student}/{final.lab}: {final.score:g} without {final.awaiting_ta:g} points "
                         "of written answers that await a TA")
        scores.setdefault(final.student, {})[final.lab] = _number(final.score)
        renamed = [nb.handed_in_as for nb in entry.result.notebooks if nb.handed_in_as]
        if renamed:
            notes.append(f"{final.student}/{final.lab}: graded from renamed notebooks ({', '.join(renamed)}); check them")
        if final.late_penalty:
            notes.append(f"{final.student}/{final.lab}: late penalty -{final.late_penalty:g} ({final.hand_in['status']}, "
                         f"{final.hand_in['rule']}): included")
        conflicts = [flag for flag in (entry.hand_in or {}).get("flags", []) if flag.startswith("conflict")]
        if conflicts:
            notes.append(f"{final.student}/{final.lab}: {conflicts[0]}")
    return scores


def column_names(labs: list[str], assignments: dict[str, str] | None, roster: Roster | None) -> dict[str, str]:
    """{lab: the Canvas column header}: ``--assignment LAB=NAME`` matched to the roster's header (by its whole
    header, its title or its id); GradingError when a name matches none of the roster's assignments."""
    names = {}
    for lab in labs:
        wanted = (assignments or {}).get(lab)
        if wanted is None:
            names[lab] = lab
            continue
        column = assignment_column(roster, wanted)
        if column is None and roster is not None and roster.assignments:
            raise GradingError(f"--assignment {lab}={wanted}: no such assignment in the roster {roster.path.name}; its "
                               f"assignments: {', '.join(roster.assignments)}")
        names[lab] = column or (f"{lab} ({wanted})" if wanted.isdigit() else wanted)
    return names


def canvas_csv(stored: list[StoredResult], finals: list[FinalGrade], roster: Roster | list[RosterEntry] | None = None,
               *, assignments: dict[str, str] | None = None, missing_as_zero: bool = False,
               partial: bool = False) -> Export:
    """The Canvas gradebook import file for every lab in ``stored`` (``finals``: their ``final_grade``)."""
    if isinstance(roster, list):
        roster = Roster(Path("roster.csv"), roster)
    notes: list[str] = []
    labs = sorted({entry.result.lab for entry in stored})
    headers = column_names(labs, assignments, roster)
    for lab in labs:
        if headers[lab] == lab:
            notes.append(f"{lab}: the column is named {lab!r}, which Canvas imports as a new assignment; "
                         f"--assignment {lab}=NAME fills your own (its name or id, as in Canvas's gradebook)")
    scores = _cells(stored, finals, notes, partial=partial)
    lms_ids = {entry.result.student: (entry.hand_in or {}).get("lms_user") for entry in stored
               if (entry.hand_in or {}).get("lms") == "Canvas"}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CANVAS_COLUMNS + [headers[lab] for lab in labs])
    writer.writerow(["Points Possible", "", "", "", ""] + [_number(_points_possible(finals, lab, notes)) for lab in labs])
    if roster is None:
        for student in sorted(scores):
            writer.writerow([student, lms_ids.get(student) or "", "", student, ""]
                            + [scores[student].get(lab, "") for lab in labs])
        return Export(buffer.getvalue(), notes)
    matched: dict[str, RosterEntry] = {}
    for student in sorted(scores):
        entry = match_student(student, roster) or (roster.by_canvas_id(lms_ids[student]) if lms_ids.get(student) else None)
        if entry is None:
            notes.append(f"{student}: not in the roster (no SIS Login ID, SIS User ID or ID equal to it); "
                         "left out of the file")
        else:
            matched[student] = entry
    by_entry = {entry: student for student, entry in matched.items()}
    for entry in sorted(roster.students, key=lambda e: e.name.lower()):
        student = by_entry.get(entry)
        cells = [scores[student].get(lab, "") if student else "" for lab in labs]
        if student is None and missing_as_zero:
            cells = ["0"] * len(labs)
        writer.writerow([entry.name, entry.canvas_id, entry.sis_user_id, entry.sis_login_id, entry.section] + cells)
    without = [entry.student_id() for entry in roster.students if entry not in by_entry]
    if without:
        notes.append(f"{len(without)} student(s) of the roster have no graded hand-in: "
                     f"{', '.join(without[:15])}{' ...' if len(without) > 15 else ''} "
                     + ("(0 in the file: --missing zero)" if missing_as_zero else
                        "(empty in the file: Canvas keeps what it has; --missing zero gives them 0)"))
    return Export(buffer.getvalue(), notes)


def notebook_csv(stored: list[StoredResult], finals: list[FinalGrade] | None = None) -> Export:
    """One row per student, lab and notebook: the autograder's score (with the staff's cell scores), the
    points available and the status. The lab-level changes (a lab score, penalties) are in the wide CSV."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=NOTEBOOK_COLUMNS, lineterminator="\n")
    writer.writeheader()
    notes = []
    pairs = list(zip(stored, finals or [None] * len(stored)))
    for entry, final in sorted(pairs, key=lambda pair: (pair[0].result.lab, pair[0].result.student)):
        result = entry.result
        if not entry.complete:
            notes.append(f"{result.student}/{result.lab}: grading failed (status 'grading failed' in the file)")
        for notebook in result.notebooks:
            score = sum(final.cells.get((notebook.name, cell.grade_id), cell.points) for cell in notebook.cells) \
                if final is not None else notebook.score
            pending = sum(points for key, points in (final.awaiting if final is not None else {}).items()
                          if key.split("/", 1)[0] == notebook.name) if final is not None else notebook.awaiting_ta
            writer.writerow({"assignment": result.lab, "notebook": notebook.name, "student_id": result.student,
                             "score": _number(score), "max_score": _number(notebook.max_score),
                             "skipped_points": _number(notebook.skipped_points), "status": notebook.status,
                             "awaiting_ta": _number(pending)})
    if finals is not None:
        notes += awaiting_notes(finals, partial=True)
    return Export(buffer.getvalue(), notes)


def wide_csv(stored: list[StoredResult], finals: list[FinalGrade], *, partial: bool = False) -> Export:
    """One row per student, one column per lab (the final score; empty when grading did not finish or written
    answers await a TA, unless ``partial``): what Moodle's and Gradescope's CSV grade imports map column by column."""
    notes: list[str] = []
    labs = sorted({entry.result.lab for entry in stored})
    scores = _cells(stored, finals, notes, partial=partial)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["student_id", *labs])
    for student in sorted(scores):
        writer.writerow([student, *(scores[student].get(lab, "") for lab in labs)])
    return Export(buffer.getvalue(), notes)
