"""What a TA's mark is, where marks and claims are kept, and who is grading what right now.

Two interfaces, kept apart because they promise different things and live in different places:

- ``MarkStore``: the record of marks (``ledger_marks.LedgerMarks``: the course's ledger). A mark is one answer's points, the rubric criteria that gave
  them, a comment for the student, who saved it and when. Every save names the version it replaces
  (``expected_version``: 0 for the first mark), and a save based on anything but the current version
  is refused with ``MarkConflict``, which carries the mark that is there now: no mark is ever lost
  to a TA who saved over it without seeing it. Every version stays in ``history``.
- ``ClaimBoard``: short leases ("Alice is grading this answer, for 5 more minutes"), so two TAs do
  not grade the same answer twice. A claim held by someone else refuses another TA's claim with
  ``ClaimConflict``; it ends when released or when its lease runs out (a TA who closed the laptop
  does not lock an answer for good).

``SqliteClaims`` keeps the claims in their own SQLite file (``OUT/marking/claims.sqlite``): they are
the marking page's business only, short-lived, and nothing else of the course reads them. It is safe
for several threads and processes on one machine: every change runs in an ``IMMEDIATE`` transaction,
which takes the database's write lock before it reads, so the check and the write happen as one step.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

MAX_COMMENT_CHARS = 4_000
MAX_REASON_CHARS = 1_000


@dataclass(frozen=True)
class Mark:
    lab: str
    student: str
    notebook: str
    grade_id: str
    points: float
    criteria: dict[str, float] = field(default_factory=dict)   # criterion id -> points given
    adjustment: float = 0.0       # points outside the rubric (+ or -), explained in the comment
    comment: str = ""             # for the student, once grades are released
    grader: str = ""
    version: int = 0              # names this version: the seq of its ledger event (0: no mark); grows with every change
    saved_at: float = 0.0         # seconds since the epoch
    reason: str = ""              # why a mark changed (for the instructor, not the student)
    rubric_hash: str = ""         # the rubric the mark was given with (WrittenQuestion.rubric_hash)

    def as_dict(self) -> dict:
        return {"lab": self.lab, "student": self.student, "notebook": self.notebook, "grade_id": self.grade_id,
                "points": self.points, "criteria": dict(self.criteria), "adjustment": self.adjustment,
                "comment": self.comment, "grader": self.grader, "version": self.version,
                "saved_at": self.saved_at, "reason": self.reason, "rubric_hash": self.rubric_hash}


@dataclass(frozen=True)
class Claim:
    lab: str
    student: str
    notebook: str
    grade_id: str
    grader: str
    expires_at: float


class MarkConflict(Exception):
    """A save based on a version that is no longer the current one; ``current`` is the mark now."""

    def __init__(self, message: str, current: Mark | None):
        super().__init__(message)
        self.current = current


class ClaimConflict(Exception):
    """The answer is claimed by another TA; ``claim`` says who, and until when."""

    def __init__(self, message: str, claim: Claim):
        super().__init__(message)
        self.claim = claim


class MarkStore(Protocol):
    def get_marks(self, lab: str) -> list[Mark]:
        """The current mark of every answer of ``lab`` that has one."""

    def get_mark(self, lab: str, student: str, notebook: str, grade_id: str) -> Mark | None:
        """One answer's current mark, or None."""

    def save_mark(self, lab: str, student: str, notebook: str, grade_id: str, *, points: float,
                  criteria: dict[str, float], comment: str, grader: str, expected_version: int,
                  adjustment: float = 0.0, reason: str = "", rubric_hash: str = "") -> Mark:
        """Store a new version of one answer's mark; MarkConflict unless ``expected_version`` is the
        current version (0: there is no mark yet). Returns the mark as saved."""

    def history(self, lab: str, student: str, notebook: str, grade_id: str) -> list[Mark]:
        """Every version of one answer's mark, oldest first."""


class ClaimBoard(Protocol):
    def claim(self, lab: str, student: str, notebook: str, grade_id: str, grader: str, ttl_s: float) -> Claim:
        """Claim (or renew) an answer for ``ttl_s`` seconds; ClaimConflict while another TA holds it."""

    def release(self, lab: str, student: str, notebook: str, grade_id: str, grader: str) -> None:
        """Give up a claim (a claim held by another TA is left alone)."""

    def holder(self, lab: str, student: str, notebook: str, grade_id: str) -> Claim | None:
        """The live claim on an answer, if any."""

    def claims(self, lab: str) -> list[Claim]:
        """Every live claim of ``lab``."""


SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    lab TEXT NOT NULL, student TEXT NOT NULL, notebook TEXT NOT NULL, grade_id TEXT NOT NULL,
    grader TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (lab, student, notebook, grade_id)
);
"""


class SqliteClaims:
    """``ClaimBoard`` in one SQLite file (see the module docstring).

    ``clock`` gives the time in seconds (tests pass a fake one to make leases expire)."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connection() as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.executescript(SCHEMA)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        # One connection per operation: sqlite3 connections must not cross threads, and opening one
        # costs well under a millisecond. isolation_level=None: transactions are spelled out below.
        connection = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            yield connection
        finally:
            connection.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A transaction that holds the write lock from its first read to its commit."""
        with self._connection() as connection:
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    # ---------------------------------------------------------------------------- claims

    def claim(self, lab: str, student: str, notebook: str, grade_id: str, grader: str, ttl_s: float) -> Claim:
        if not grader:
            raise ValueError("grader must name the TA")
        if not (isinstance(ttl_s, (int, float)) and 0 < ttl_s <= 24 * 3600):
            raise ValueError(f"ttl_s must be between 0 and 86400 seconds, got {ttl_s!r}")
        with self._write() as connection:
            now = self.clock()
            held = self._live(connection, lab, student, notebook, grade_id, now)
            if held and held.grader != grader:
                raise ClaimConflict(f"{held.grader} is grading this answer (for {_duration(held.expires_at - now)} "
                                    "more unless they finish or leave it)", held)
            claim = Claim(lab, student, notebook, grade_id, grader, now + ttl_s)
            connection.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?, ?)",
                               (lab, student, notebook, grade_id, grader, claim.expires_at))
        return claim

    def release(self, lab: str, student: str, notebook: str, grade_id: str, grader: str) -> None:
        with self._write() as connection:
            connection.execute("DELETE FROM claims WHERE lab = ? AND student = ? AND notebook = ? AND grade_id = ? "
                               "AND grader = ?", (lab, student, notebook, grade_id, grader))

    def holder(self, lab: str, student: str, notebook: str, grade_id: str) -> Claim | None:
        with self._connection() as connection:
            return self._live(connection, lab, student, notebook, grade_id, self.clock())

    def claims(self, lab: str) -> list[Claim]:
        with self._connection() as connection:
            rows = connection.execute("SELECT * FROM claims WHERE lab = ? AND expires_at > ?",
                                      (lab, self.clock())).fetchall()
        return [Claim(*row) for row in rows]

    @staticmethod
    def _live(connection, lab, student, notebook, grade_id, now) -> Claim | None:
        row = connection.execute("SELECT * FROM claims WHERE lab = ? AND student = ? AND notebook = ? AND "
                                 "grade_id = ? AND expires_at > ?", (lab, student, notebook, grade_id, now)).fetchone()
        return Claim(*row) if row else None


def check_mark(points, criteria, comment, grader, expected_version, adjustment, reason) -> None:
    """The shape of a mark; what a question allows (its criteria and maximum) is checked by the caller."""
    for name, value in (("points", points), ("adjustment", adjustment)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if points < 0:
        raise ValueError(f"points must be >= 0, got {points}")
    if not isinstance(criteria, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for k, v in criteria.items()):
        raise ValueError("criteria must map criterion ids to numbers")
    if not isinstance(grader, str) or not grader.strip():
        raise ValueError("grader must name the TA")
    if isinstance(expected_version, bool) or not isinstance(expected_version, int) or expected_version < 0:
        raise ValueError(f"expected_version must be an int >= 0, got {expected_version!r}")
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT_CHARS:
        raise ValueError(f"comment must be text of at most {MAX_COMMENT_CHARS} characters")
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise ValueError(f"reason must be text of at most {MAX_REASON_CHARS} characters")


def conflict_message(current: Mark | None, expected_version: int) -> str:
    if current is None:
        return (f"not saved: this answer has no mark any more (you expected version {expected_version}); "
                "reload it and mark it again")
    when = time.strftime("%H:%M:%S", time.localtime(current.saved_at))
    return (f"not saved: {current.grader} saved a mark for this answer at {when} ({current.points:g} points) "
            "after you opened it. Their mark is shown now; change it if you still disagree")


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"
