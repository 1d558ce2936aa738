"""What the learning platform (LMS) tells the grader: who uploaded a file, and who is in the class.

**Bulk-download names.** An LMS's "download all submissions" names each file after its uploader:

- Canvas: ``<name>[_LATE]_<user id>_<submission id>_<the student's file name>``, e.g.
  ``doejane_LATE_4821_99120_s1234567-20261201T231500Z.zip``: ``<name>`` is the student's sortable
  name, lower case with spaces and punctuation removed; ``_LATE`` marks a hand-in after Canvas's due
  time (the student's own Canvas due time: Canvas's overrides included); the user id is the ``ID``
  column of Canvas's gradebook export. Canvas adds ``-1``, ``-2`` to the file name of a resubmission.
- Moodle: ``<Full Name>_<participant id>_assignsubmission_file_<the student's file name>``.

``lms_name`` reads both (``None`` for any other name). The uploader, not a folder name the student
typed inside the zip, is who handed the file in (``intake``).

**The roster** is Canvas's gradebook export (Grades > Export > Export Entire Gradebook): columns
``Student, ID, SIS User ID, SIS Login ID, Section`` and one per assignment (``Lab 1 (12345)``, the
assignment's id in brackets). ``read_roster`` reads its students and its assignment columns;
``match_student`` finds a student id in it.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograde.layout import GradingError
from course_lib.handin.notebooks import SAFE_ID

__all__ = ["CANVAS_COLUMNS", "LmsName", "Roster", "RosterEntry", "lms_name", "match_student", "read_roster",
           "without_copy_number"]

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
_CANVAS = re.compile(r"^(?P<name>[a-z0-9]+)(?P<late>_LATE)?_(?P<uid>\d+)_(?P<submission>\d+)_(?P<file>.+)$")
_MOODLE = re.compile(r"^(?P<name>[^_/]+)_(?P<uid>\d+)_assignsubmission_(?:file|onlinetext)_(?P<file>.+)$")
_COPY_NUMBER = re.compile(r"(?: ?\(\d+\)|-\d{1,2})$")   # a browser's " (1)", Canvas's "-1" of a resubmission
_ASSIGNMENT_ID = re.compile(r"^(?P<title>.*?)\s*\((?P<id>\d+)\)$")


@dataclass(frozen=True)
class LmsName:
    """Who uploaded a file, as the LMS named it in its bulk download."""

    lms: str            # "Canvas" or "Moodle"
    name: str           # the uploader's name as the LMS wrote it (doejane)
    user_id: str        # the LMS's id of the uploader (Canvas: the gradebook's ID column)
    file: str           # the file name the student uploaded
    late: bool | None   # Canvas's _LATE flag (None: the LMS's names do not say)

    def local_id(self) -> str:
        """A student id for this uploader when no better one is known: ``doejane-4821``."""
        name = re.sub(r"[^A-Za-z0-9]", "", self.name).lower() or "student"
        return f"{name[:40]}-{self.user_id}"

    def describe(self) -> str:
        return f"{self.name} ({self.lms} user {self.user_id})"


def lms_name(file_name: str) -> LmsName | None:
    """The uploader named in a bulk-download file name (Canvas or Moodle), or None."""
    match = _CANVAS.match(file_name)
    if match:
        return LmsName("Canvas", match["name"], match["uid"], match["file"], bool(match["late"]))
    match = _MOODLE.match(file_name)
    if match:
        return LmsName("Moodle", match["name"], match["uid"], match["file"], None)
    return None


def without_copy_number(stem: str) -> str:
    """``s1-20260101T100000Z (1)`` -> ``s1-20260101T100000Z``; Canvas's ``-1`` of a resubmission too."""
    return _COPY_NUMBER.sub("", stem)


@dataclass(frozen=True)
class RosterEntry:
    name: str
    canvas_id: str
    sis_user_id: str
    sis_login_id: str
    section: str

    def ids(self) -> list[str]:
        """Every id this student may go by: SIS Login ID (and its part before an @), SIS User ID, ID."""
        ids = [self.sis_login_id, self.sis_user_id, self.canvas_id]
        if "@" in self.sis_login_id:
            ids.insert(1, self.sis_login_id.split("@")[0])
        return [value for value in ids if value]

    def student_id(self) -> str:
        """The id grading files this student under: the first of ``ids`` a folder name may be."""
        return next((value for value in self.ids() if SAFE_ID.match(value)), f"canvas-{self.canvas_id}")


@dataclass
class Roster:
    """The students of a Canvas gradebook export, and its assignment columns (``Lab 1 (12345)``)."""

    path: Path
    students: list[RosterEntry] = field(default_factory=list)
    assignments: list[str] = field(default_factory=list)

    def by_canvas_id(self, user_id: str) -> RosterEntry | None:
        return next((entry for entry in self.students if entry.canvas_id == user_id), None)


def read_roster(path: Path) -> Roster:
    """The students of a Canvas gradebook export (its ``Points Possible`` and test-student rows skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as error:
        raise GradingError(f"--roster {path}: cannot be read ({error.strerror})") from None
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    missing = [column for column in CANVAS_COLUMNS if column not in header]
    if missing:
        raise GradingError(f"--roster {path}: not a Canvas gradebook export (no column {', '.join(missing)}); "
                           "export it from Canvas: Grades > Export > Export Entire Gradebook")
    roster = Roster(Path(path), assignments=[column for column in header
                                             if column not in CANVAS_COLUMNS and _ASSIGNMENT_ID.match(column)])
    for row in csv.DictReader(io.StringIO(text)):
        name = (row.get("Student") or "").strip()
        if not name or name == "Points Possible" or name.lower() == "student, test":
            continue
        roster.students.append(RosterEntry(name, (row.get("ID") or "").strip(), (row.get("SIS User ID") or "").strip(),
                                           (row.get("SIS Login ID") or "").strip(), (row.get("Section") or "").strip()))
    return roster


def match_student(student: str, roster: Roster | list[RosterEntry]) -> RosterEntry | None:
    """The roster row of a student id: SIS Login ID, SIS User ID, ID, then an e-mail login's user part."""
    entries = roster.students if isinstance(roster, Roster) else roster
    wanted = student.lower()
    for field_of in (lambda e: e.sis_login_id, lambda e: e.sis_user_id, lambda e: e.canvas_id,
                     lambda e: e.sis_login_id.split("@")[0] if "@" in e.sis_login_id else ""):
        found = [entry for entry in entries if field_of(entry) and field_of(entry).lower() == wanted]
        if len(found) == 1:
            return found[0]
    return None


def assignment_column(roster: Roster | None, wanted: str) -> str | None:
    """The roster's column for an assignment named ``wanted``: its whole header (``Lab 1 (12345)``), its
    title (``Lab 1``) or its id (``12345``); None if none matches."""
    for column in roster.assignments if roster else []:
        match = _ASSIGNMENT_ID.match(column)
        if wanted in (column, match["title"], match["id"]):
            return column
    return None
