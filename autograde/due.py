"""Due times, and how late each hand-in is: what ``course grade --due`` adds to the class's files.

A hand-in's time is its ``timestamp.txt``, which the student's own machine wrote (``course submit``):
a claim, not a receipt, since the course never sees the upload. Only the LMS knows when a file
arrived. So every lateness here is "by its claim", and the report, the table and the gradebook say
so: a forged claim can make a late hand-in look on time, but never silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from autograde.results import LabResult

__all__ = ["CLAIM", "DueError", "DueTimes", "hand_in", "late_note", "parse_due"]

CLAIM = "timestamp.txt, written by the student's machine: a claim, not a receipt (check disputes against the LMS)"
FORMAT_HELP = "WHEN or LAB=WHEN, WHEN an ISO 8601 time such as 2026-12-01T23:59 (UTC unless it names a zone)"


class DueError(ValueError):
    """A --due value that is not a time (the message names the option and what it accepts)."""


@dataclass(frozen=True)
class DueTimes:
    """One due time for every lab (``default``), and per-lab ones that override it; naive UTC."""

    default: datetime | None = None
    by_lab: dict[str, datetime] = field(default_factory=dict)

    def for_lab(self, lab: str) -> datetime | None:
        return self.by_lab.get(lab, self.default)

    def __bool__(self) -> bool:
        return self.default is not None or bool(self.by_lab)


def _parse_time(text: str, option: str) -> datetime:
    """ISO 8601 only (dateutil, which nbgrader uses, would read "friday" as the next Friday)."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise DueError(f"{option}: {text!r} is not a time; expected {FORMAT_HELP}") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(timezone.utc).replace(tzinfo=None)
    return parsed


def parse_due(values: list[str] | None, known_labs: list[str]) -> DueTimes:
    """``--due`` values (each ``WHEN`` or ``LAB=WHEN``, repeatable) as due times."""
    default, by_lab = None, {}
    for value in values or []:
        lab, sep, when = value.partition("=")
        if sep and not lab[:1].isdigit():
            if lab not in known_labs:
                raise DueError(f"--due {value}: unknown lab {lab!r}; labs: {', '.join(known_labs) or 'none'}")
            by_lab[lab] = _parse_time(when, f"--due {lab}=")
        elif default is not None:
            raise DueError(f"--due {value}: a due time for every lab was given twice; use LAB=WHEN for one lab")
        else:
            default = _parse_time(value, "--due")
    return DueTimes(default, by_lab)


def hand_in(result: LabResult, due: DueTimes) -> dict | None:
    """``{"due", "handed_in", "late_by_s", "status", "basis"}`` for one lab's hand-in, or None without a due time."""
    from nbgrader.utils import parse_utc

    deadline = due.for_lab(result.lab)
    if deadline is None:
        return None
    entry = {"due": deadline.isoformat(sep=" ") + " UTC", "handed_in": result.timestamp or None,
             "late_by_s": None, "status": "no hand-in time", "basis": CLAIM}
    if result.timestamp:
        late_by = (parse_utc(result.timestamp) - deadline).total_seconds()
        entry.update(late_by_s=max(0.0, round(late_by, 3)),
                     status="late by its claim" if late_by > 0 else "on time by its claim")
    return entry


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{max(minutes, 1)} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours // 24} days {hours % 24} h"


def late_note(result: LabResult, due: DueTimes) -> str | None:
    """The score table's word on lateness: "late by 2 h 05 min (claimed)", "no hand-in time", or None."""
    entry = hand_in(result, due)
    if entry is None or entry["status"] == "on time by its claim":
        return None
    if entry["status"] == "no hand-in time":
        return "no hand-in time (lateness unknown)"
    return f"late by {_duration(entry['late_by_s'])} (claimed)"
