"""Grades out to the LMS: a Canvas gradebook import file, or a plain CSV with one row per notebook.

Both are built from the result files of an output folder (``OUT/results/<lab>/<student>.json``).

Canvas imports a CSV whose first columns are ``Student, ID, SIS User ID, SIS Login ID, Section``,
then one column per assignment; a second row, ``Points Possible``, gives each assignment's points.
Canvas finds each student by ID, SIS User ID or SIS Login ID, so those must be Canvas's own values:
pass the gradebook export from Canvas (``--roster``) and every student id (the submission folder's
name) is matched to the roster's SIS Login ID, SIS User ID or ID (or the part of an e-mail login
before the ``@``) and the row is filled in from there. Students not in the roster are left out of
the file and reported; without a roster, the student id goes in ``SIS Login ID``.

A submission whose grading failed (a worker died three times) gets an empty cell, never a zero,
and is reported: a failed grading is not a grade.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from autograde.layout import GradingError
from autograde.store import StoredResult

__all__ = ["CANVAS_COLUMNS", "Export", "RosterEntry", "canvas_csv", "notebook_csv", "read_roster"]

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
NOTEBOOK_COLUMNS = ["assignment", "notebook", "student_id", "score", "max_score", "skipped_points", "status"]


@dataclass(frozen=True)
class RosterEntry:
    name: str
    canvas_id: str
    sis_user_id: str
    sis_login_id: str
    section: str


@dataclass
class Export:
    text: str
    notes: list[str] = field(default_factory=list)   # unmatched students, failed gradings, differing maxima


def _number(value: float) -> str:
    return f"{value:g}"


def read_roster(path: Path) -> list[RosterEntry]:
    """The students of a Canvas gradebook export (its ``Points Possible`` and test-student rows skipped)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise GradingError(f"--roster {path}: cannot be read ({error.strerror})") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    header = set(rows[0]) if rows else set(csv.reader(io.StringIO(text)).__next__() if text.strip() else [])
    missing = [column for column in CANVAS_COLUMNS if column not in header]
    if missing:
        raise GradingError(f"--roster {path}: not a Canvas gradebook export (no column {', '.join(missing)}); "
                           "export it from Canvas: Grades > Export > Export Entire Gradebook")
    roster = []
    for row in rows:
        name = (row.get("Student") or "").strip()
        if not name or name == "Points Possible" or name.lower() == "student, test":
            continue
        roster.append(RosterEntry(name, (row.get("ID") or "").strip(), (row.get("SIS User ID") or "").strip(),
                                  (row.get("SIS Login ID") or "").strip(), (row.get("Section") or "").strip()))
    return roster


def _match(student: str, roster: list[RosterEntry]) -> RosterEntry | None:
    """The roster row of a student id: SIS Login ID, SIS User ID, ID, then an e-mail login's user part."""
    wanted = student.lower()
    for field_of in (lambda e: e.sis_login_id, lambda e: e.sis_user_id, lambda e: e.canvas_id,
                     lambda e: e.sis_login_id.split("@")[0] if "@" in e.sis_login_id else ""):
        found = [entry for entry in roster if field_of(entry) and field_of(entry).lower() == wanted]
        if len(found) == 1:
            return found[0]
    return None


def _points_possible(stored: list[StoredResult], lab: str, notes: list[str]) -> float:
    maxima = Counter(entry.result.max_score for entry in stored if entry.result.lab == lab and entry.complete)
    if not maxima:
        return 0.0
    if len(maxima) > 1:
        shown = ", ".join(f"{_number(value)} for {count}" for value, count in sorted(maxima.items()))
        notes.append(f"{lab}: max_score differs between students ({shown}; GPU-only cells skipped for some?); "
                     f"Points Possible is the largest")
    return max(maxima)


def canvas_csv(stored: list[StoredResult], roster: list[RosterEntry] | None = None) -> Export:
    """The Canvas gradebook import file for every lab in ``stored``."""
    notes: list[str] = []
    labs = sorted({entry.result.lab for entry in stored})
    scores: dict[str, dict[str, str]] = {}
    for entry in stored:
        result = entry.result
        if not entry.complete:
            notes.append(f"{result.student}/{result.lab}: grading failed, left empty (grade it again)")
            scores.setdefault(result.student, {})[result.lab] = ""
            continue
        scores.setdefault(result.student, {})[result.lab] = _number(result.score)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CANVAS_COLUMNS + labs)
    writer.writerow(["Points Possible", "", "", "", ""] + [_number(_points_possible(stored, lab, notes)) for lab in labs])
    if roster is None:
        for student in sorted(scores):
            writer.writerow([student, "", "", student, ""] + [scores[student].get(lab, "") for lab in labs])
        return Export(buffer.getvalue(), notes)
    matched: dict[str, RosterEntry] = {}
    for student in sorted(scores):
        entry = _match(student, roster)
        if entry is None:
            notes.append(f"{student}: not in the roster (no SIS Login ID, SIS User ID or ID equal to it); "
                         "left out of the file")
        else:
            matched[student] = entry
    for student, entry in sorted(matched.items(), key=lambda item: item[1].name.lower()):
        writer.writerow([entry.name, entry.canvas_id, entry.sis_user_id, entry.sis_login_id, entry.section]
                        + [scores[student].get(lab, "") for lab in labs])
    without = len(roster) - len(set(matched.values()))
    if without:
        notes.append(f"{without} student(s) of the roster have no graded submission (their cells are not in the file)")
    return Export(buffer.getvalue(), notes)


def notebook_csv(stored: list[StoredResult]) -> Export:
    """One row per student, lab and notebook: the score, the points available and the status."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=NOTEBOOK_COLUMNS, lineterminator="\n")
    writer.writeheader()
    notes = []
    for entry in sorted(stored, key=lambda e: (e.result.lab, e.result.student)):
        result = entry.result
        if not entry.complete:
            notes.append(f"{result.student}/{result.lab}: grading failed (status 'grading failed' in the file)")
        for notebook in result.notebooks:
            writer.writerow({"assignment": result.lab, "notebook": notebook.name, "student_id": result.student,
                             "score": _number(notebook.score), "max_score": _number(notebook.max_score),
                             "skipped_points": _number(notebook.skipped_points), "status": notebook.status})
    return Export(buffer.getvalue(), notes)
