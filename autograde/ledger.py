"""The course staff's record of a class: every score, adjustment and regrade, with who, when and why.

``OUT/ledger.sqlite`` sits beside the autograder's result files (``store``) and is never rebuilt
from them: the result files say what the autograder found the last time it graded a submission;
the ledger says everything people (and the autograder's earlier runs) decided about it. It is an
append-only list of events. Nothing is updated or deleted (SQLite triggers refuse it): a changed
score is a new event, a cleared one is an event with ``cleared`` set, and the state of the class
is, for every key, the last event written for it (``LedgerState``).

An event's key is ``(kind, lab, student, notebook, cell)``; the kinds:

====================  =====================================================  ==========================
kind                  what it records                                        value / data
====================  =====================================================  ==========================
``graded``            the autograder graded (lab, student) (one per result)   score; max_score, tests,
                      : the history of regrades                               grader, complete, cells
``cell``              a person's points for one test or written-answer cell   points; comment, rubric,
                      (notebook, cell): replaces the autograder's points      extra_credit
``score``             a person's score for the whole lab (a regrade outcome)  points
``penalty``           points taken off (academic integrity, a late hand-in    points; percent (when
                      handled by hand); replaces an earlier penalty           given as a percentage)
``extension``         this student's own due time for the lab                 data.due (ISO 8601, UTC)
``due``               the lab's due time for the class (lab ``*``: all labs)  data.due
``late_rule``         the late-penalty rule (lab ``*``: all labs)             data.rule (``due.LateRule``)
``release``           the instructor released the lab's TA marks (lab ``*``:  (none: cleared=True
                      all labs): feedback shows each written answer's marks   withdraws it)
====================  =====================================================  ==========================

A TA's mark of a written answer (``course mark``) is a ``cell`` event whose data also holds the
rubric: ``criteria`` ({criterion id: points}), ``adjustment``, ``comment`` (for the student, once
released), ``rubric_hash`` and ``by: "course mark"``; ``who`` is the TA and ``why`` the reason for a
change. Until a ``release`` event for the lab, nothing of it reaches a feedback page.

Several people may write at once (two TAs grading, an instructor adjusting while ``course grade``
runs): every write is one SQLite transaction taken with ``BEGIN IMMEDIATE``, so writers queue
instead of losing each other's events, and a writer that grades from what it saw passes
``based_on`` (the ``seq`` of the last event it saw for that key, or ``None`` for none): if someone
wrote that key since, ``LedgerConflict`` names their event and nothing is written. SQLite (not a
JSON-lines file under a lock) because transactions, the append-only triggers and the queries come
with it, Python ships it, and formgrader's ``gradebook.db`` beside it is SQLite too. The rollback
journal (SQLite's default) is used, not WAL, which needs shared memory on one host: an ``OUT``
folder on a network disk shared by TAs stays safe where its file locks work.
"""

from __future__ import annotations

import getpass
import json
import math
import socket
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["ANY", "KINDS", "LEDGER_FILE", "Event", "Ledger", "LedgerConflict", "LedgerError", "LedgerState",
           "default_who"]

LEDGER_FILE = "ledger.sqlite"
SCHEMA_VERSION = 1
KINDS = ("graded", "cell", "score", "penalty", "extension", "due", "late_rule", "release")
ALL_LABS = "*"
WHY_CHARS = 2000          # a reason or a comment as the ledger keeps it
DATA_CHARS = 64 * 1024    # an event's data (a graded event lists every cell's points)
BUSY_TIMEOUT_S = 30.0     # how long a writer waits for another one's transaction


class LedgerError(ValueError):
    """An event the ledger refuses (unknown kind, a negative score, ...); the message names the field."""


class LedgerConflict(LedgerError):
    """Someone wrote the same key since the writer looked (``based_on``); ``newer`` is their event (None:
    the writer named an event the key does not have)."""

    def __init__(self, message: str, newer: "Event | None"):
        super().__init__(message)
        self.newer = newer


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY = _Any()   # ``based_on=ANY``: write whatever was written since (the default)


def default_who() -> str:
    """``user@host`` of this process: who wrote an event when the caller does not say."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (a container without passwd entry)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Event:
    """One line of the ledger (see the module docstring for the kinds)."""

    seq: int
    at: str            # when it was written, ISO 8601 UTC
    who: str
    kind: str
    lab: str
    student: str = ""
    notebook: str = ""
    cell: str = ""
    value: float | None = None
    data: dict = field(default_factory=dict)
    why: str = ""
    cleared: bool = False

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return self.kind, self.lab, self.student, self.notebook, self.cell

    def as_dict(self) -> dict:
        return {"seq": self.seq, "at": self.at, "who": self.who, "kind": self.kind, "lab": self.lab,
                "student": self.student, "notebook": self.notebook, "cell": self.cell, "value": self.value,
                "data": self.data, "why": self.why, "cleared": self.cleared}


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    at       TEXT NOT NULL,
    who      TEXT NOT NULL,
    kind     TEXT NOT NULL,
    lab      TEXT NOT NULL,
    student  TEXT NOT NULL DEFAULT '',
    notebook TEXT NOT NULL DEFAULT '',
    cell     TEXT NOT NULL DEFAULT '',
    value    REAL,
    data     TEXT NOT NULL DEFAULT '{}',
    why      TEXT NOT NULL DEFAULT '',
    cleared  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS events_by_key ON events (kind, lab, student, notebook, cell, seq);
CREATE TRIGGER IF NOT EXISTS events_are_never_updated BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: write a new event instead'); END;
CREATE TRIGGER IF NOT EXISTS events_are_never_deleted BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: write a clearing event instead'); END;
"""
_COLUMNS = "seq, at, who, kind, lab, student, notebook, cell, value, data, why, cleared"


def _event(row: tuple) -> Event:
    seq, at, who, kind, lab, student, notebook, cell, value, data, why, cleared = row
    return Event(seq, at, who, kind, lab, student, notebook, cell, value, json.loads(data or "{}"), why, bool(cleared))


def _check_text(name: str, text: str, limit: int = 200) -> str:
    if not isinstance(text, str):
        raise LedgerError(f"{name} must be text, got {type(text).__name__}")
    if len(text) > limit or any(ord(c) < 32 and c not in "\n\t" for c in text):
        raise LedgerError(f"{name} {text[:60]!r}: at most {limit} characters, no control characters")
    return text


def _validate(kind: str, lab: str, student: str, notebook: str, cell: str, value, data: dict, cleared: bool) -> None:
    if kind not in KINDS:
        raise LedgerError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    if not lab:
        raise LedgerError("lab: required (a lab's folder name, or '*' for every lab)")
    for name, text in (("lab", lab), ("student", student), ("notebook", notebook), ("cell", cell)):
        _check_text(name, text)
    if kind in ("graded", "cell", "score", "penalty", "extension") and not student:
        raise LedgerError(f"a {kind} event needs a student")
    if kind in ("due", "late_rule", "release") and student:
        raise LedgerError(f"a {kind} event is for the class (student ''); a student's own due time is an extension")
    if kind == "cell" and not (notebook and cell):
        raise LedgerError("a cell event needs a notebook and a cell (its grade_id)")
    if kind != "cell" and (notebook or cell):
        raise LedgerError(f"a {kind} event has no notebook or cell")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise LedgerError(f"value {value!r}: a finite number")
        if value < 0:
            raise LedgerError(f"value {value!r}: points are never negative (a penalty is the points taken off)")
    if not cleared and kind in ("cell", "score", "penalty", "graded") and value is None:
        raise LedgerError(f"a {kind} event needs a value (or cleared=True to remove the earlier one)")
    if not cleared and kind in ("extension", "due") and not isinstance(data.get("due"), str):
        raise LedgerError(f"a {kind} event needs data['due'], an ISO 8601 time")
    if not cleared and kind == "late_rule" and not isinstance(data.get("rule"), str):
        raise LedgerError("a late_rule event needs data['rule']")


class Ledger:
    """The ledger of one output folder: ``Ledger(OUT)`` (created on first write)."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / LEDGER_FILE

    def exists(self) -> bool:
        return self.path.is_file()

    @contextmanager
    def _connection(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        if not write and not self.path.is_file():
            connection = sqlite3.connect(":memory:")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            connection.executescript(_SCHEMA)
            version = connection.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if version is None and write:
                connection.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif version is not None and int(version[0]) != SCHEMA_VERSION:
                raise LedgerError(f"{self.path}: ledger schema {version[0]}, this course reads {SCHEMA_VERSION}")
            yield connection
        finally:
            connection.close()

    # ---- writing ------------------------------------------------------------------------------

    def record(self, kind: str, *, lab: str, student: str = "", notebook: str = "", cell: str = "",
               value: float | None = None, data: dict | None = None, why: str = "", who: str | None = None,
               cleared: bool = False, based_on=ANY) -> Event:
        """Append one event; returns it with its ``seq``. See ``record_many`` for ``based_on``."""
        return self.record_many([dict(kind=kind, lab=lab, student=student, notebook=notebook, cell=cell, value=value,
                                      data=data, why=why, who=who, cleared=cleared, based_on=based_on)])[0]

    def record_many(self, events: Iterable[dict]) -> list[Event]:
        """Append several events in one transaction (all or none), each a dict of ``record``'s arguments.

        ``based_on``: the ``seq`` of the last event the writer saw for the event's key (``None``: it saw
        none). If the key's last event is another, ``LedgerConflict`` is raised and nothing is written.
        """
        prepared = []
        for item in events:
            item = dict(item)
            data = dict(item.get("data") or {})
            value = item.get("value")
            value = float(value) if isinstance(value, int) and not isinstance(value, bool) else value
            kind, lab = item["kind"], item["lab"]
            student, notebook, cell = item.get("student", ""), item.get("notebook", ""), item.get("cell", "")
            cleared = bool(item.get("cleared", False))
            _validate(kind, lab, student, notebook, cell, value, data, cleared)
            encoded = json.dumps(data, sort_keys=True, ensure_ascii=False)
            if len(encoded) > DATA_CHARS:
                raise LedgerError(f"data: {len(encoded):,} characters (at most {DATA_CHARS:,})")
            why = _check_text("why", item.get("why") or "", WHY_CHARS)
            who = _check_text("who", item.get("who") or default_who())
            prepared.append(((kind, lab, student, notebook, cell), value, encoded, why, who, cleared,
                             item.get("based_on", ANY)))
        written = []
        with self._connection(write=True) as connection:
            connection.execute("BEGIN IMMEDIATE")
            try:
                for key, value, encoded, why, who, cleared, based_on in prepared:
                    if based_on is not ANY:
                        latest = self._latest(connection, key)
                        if (latest.seq if latest else None) != based_on:
                            connection.execute("ROLLBACK")
                            seen = "nothing" if based_on is None else f"event {based_on}"
                            now = "it has no event" if latest is None else \
                                f"{latest.who} wrote event {latest.seq} at {latest.at}" \
                                f"{': ' + latest.why if latest.why else ''}"
                            raise LedgerConflict(
                                f"{'/'.join(part for part in key[1:] if part)} ({key[0]}): changed since you looked "
                                f"(you saw {seen}; {now})", latest)
                    at = _now()
                    cursor = connection.execute(
                        "INSERT INTO events (at, who, kind, lab, student, notebook, cell, value, data, why, cleared) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (at, who, *key, value, encoded, why, int(cleared)))
                    written.append(Event(cursor.lastrowid, at, who, *key, value, json.loads(encoded), why, cleared))
                connection.execute("COMMIT")
            except LedgerConflict:
                raise
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        return written

    @staticmethod
    def _latest(connection: sqlite3.Connection, key: tuple) -> Event | None:
        row = connection.execute(f"SELECT {_COLUMNS} FROM events WHERE kind = ? AND lab = ? AND student = ? AND "
                                 "notebook = ? AND cell = ? ORDER BY seq DESC LIMIT 1", key).fetchone()
        return _event(row) if row else None

    # ---- reading ------------------------------------------------------------------------------

    def events(self, *, lab: str | None = None, student: str | None = None, kind: str | None = None) -> list[Event]:
        """Every event (the history), oldest first; filtered by lab, student, kind when given."""
        clauses, arguments = [], []
        for column, wanted in (("lab", lab), ("student", student), ("kind", kind)):
            if wanted is not None:
                clauses.append(f"{column} = ?")
                arguments.append(wanted)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._connection(write=False) as connection:
            rows = connection.execute(f"SELECT {_COLUMNS} FROM events{where} ORDER BY seq", arguments).fetchall()
        return [_event(row) for row in rows]

    def state(self) -> "LedgerState":
        """The class as the ledger has it now: the last event of every key (cleared keys left out)."""
        return LedgerState.from_events(self.events())


@dataclass
class LedgerState:
    """The last event of every key, and the full history for what asks for it (regrades)."""

    latest: dict[tuple, Event] = field(default_factory=dict)
    history: list[Event] = field(default_factory=list)

    @classmethod
    def from_events(cls, events: list[Event]) -> "LedgerState":
        latest: dict[tuple, Event] = {}
        for event in events:
            latest[event.key] = event
        return cls({key: event for key, event in latest.items() if not event.cleared}, list(events))

    def _get(self, kind: str, lab: str, student: str = "", notebook: str = "", cell: str = "") -> Event | None:
        return self.latest.get((kind, lab, student, notebook, cell))

    def cell_scores(self, lab: str, student: str) -> dict[tuple[str, str], Event]:
        """{(notebook, cell): the person's score event} of one student's lab."""
        return {(key[3], key[4]): event for key, event in self.latest.items()
                if key[0] == "cell" and key[1] == lab and key[2] == student}

    def lab_score(self, lab: str, student: str) -> Event | None:
        return self._get("score", lab, student)

    def penalty(self, lab: str, student: str) -> Event | None:
        return self._get("penalty", lab, student)

    def extension(self, lab: str, student: str) -> Event | None:
        return self._get("extension", lab, student)

    def due(self, lab: str) -> Event | None:
        """The lab's due-time event for the class, else the one for every lab."""
        return self._get("due", lab) or self._get("due", ALL_LABS)

    def late_rule(self, lab: str) -> Event | None:
        return self._get("late_rule", lab) or self._get("late_rule", ALL_LABS)

    def released(self, lab: str) -> Event | None:
        """The ``release`` event in force for the TA marks of ``lab``, or None: not released."""
        return self._get("release", lab) or self._get("release", ALL_LABS)

    def gradings(self, lab: str, student: str) -> list[Event]:
        """Every ``graded`` event of one student's lab, oldest first (the regrade history)."""
        return [event for event in self.history
                if event.kind == "graded" and event.lab == lab and event.student == student]
