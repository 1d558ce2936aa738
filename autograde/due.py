"""Due times, hand-in times, and how late each hand-in is: ``course grade --due``, ``--received``, ``--late-penalty``.

Three sources say when a lab was handed in, and the strongest one known is used:

1. **the LMS's receipt time** (``course grade --received FILE``: a CSV of the LMS's submission times,
   see ``read_receipts``): when the file arrived, the authority;
2. **the LMS's late flag**: Canvas names a late hand-in of its bulk download ``name_LATE_...``
   (``intake``). It says *late* against Canvas's own due time, not by how much;
3. **the student's claim**: the ``timestamp.txt`` the student's own ``course submit`` wrote. A claim,
   not a receipt: a forged one can make a late hand-in look on time, never the other way round.

Every place that shows lateness (the score table, report.json, grades.csv, the gradebook, the
export notes) says which source it rests on. ``read_timestamp`` reads the claim (checked, never
copied: it is whatever the student's folder holds). A student's due time is their extension if the ledger
holds one (``course adjust --extension``), else the lab's (``--due``). ``LateRule`` turns lateness
into points (``--late-penalty 10%/day,max=50%``); without a rule no penalty is taken.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

__all__ = ["CLAIM", "DueError", "DueTimes", "LateRule", "Receipt", "format_utc", "hand_in", "late_note",
           "parse_due", "parse_late_rule", "parse_time", "read_receipts", "read_timestamp", "read_timestamp_text"]

CLAIM = "timestamp.txt, written by the student's machine: a claim, not a receipt (check disputes against the LMS)"
LMS_FLAG = "the LMS's late flag in the download's name (late against the LMS's due time; by how much it does not say)"
FORMAT_HELP = ("WHEN or LAB=WHEN, WHEN an ISO 8601 time with its zone, such as 2026-12-01T23:59Z or "
               "2026-12-01T23:59-05:00 ('none' removes a due time recorded earlier)")
RULE_HELP = ("RATE/PERIOD[,max=CAP][,grace=DURATION]: RATE a percentage of the points possible (10%) or points (2), "
             "PERIOD day, hour, week or a duration (12h, 30min, 2d); every started period counts; e.g. "
             "10%/day,max=50%  or  5%/hour,grace=15min  or  2/day,max=10")


class DueError(ValueError):
    """A --due, --late-penalty or --received value that cannot be used (the message names the option)."""


def format_utc(moment: datetime) -> str:
    """nbgrader's timestamp format: ``2026-12-01 23:59:00.000000 UTC`` (``moment`` naive UTC)."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


_ISO_WITH_ZONE = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)\s?(Z|[+-]\d{2}:?\d{2})",
                            re.ASCII)
_ISO_WITHOUT_ZONE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?", re.ASCII)


def parse_time(text: str, option: str) -> datetime:
    """An ISO 8601 time with its zone, as naive UTC. A date alone, or a time with no zone, is refused:
    ``2026-12-01`` would be 00:00 UTC, hours before the evening deadline most courses mean."""
    text = text.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise DueError(f"{option}{text}: a date alone would be read as 00:00 UTC; give the time and its zone, e.g. "
                       f"{text}T23:59Z or {text}T23:59-05:00")
    match = _ISO_WITH_ZONE.fullmatch(text)
    if not match:
        hint = (" (it names no zone: add Z for UTC or your offset, e.g. -05:00)"
                if _ISO_WITHOUT_ZONE.fullmatch(text) else "")
        raise DueError(f"{option}{text!r} is not a time{hint}; expected {FORMAT_HELP}")
    day, clock, zone = match.groups()
    zone = "+00:00" if zone == "Z" else (zone if ":" in zone else f"{zone[:3]}:{zone[3:]}")
    try:
        parsed = datetime.fromisoformat(f"{day}T{clock}{zone}")
    except ValueError:
        raise DueError(f"{option}{text!r} is not a time; expected {FORMAT_HELP}") from None
    return parsed.astimezone(timezone.utc).replace(tzinfo=None)


@dataclass(frozen=True)
class DueTimes:
    """What ``--due`` gave: one due time for every lab (``default``) and per-lab ones; naive UTC.
    ``None`` for a lab in ``cleared`` (``--due LAB=none``): remove the time recorded earlier."""

    default: datetime | None = None
    by_lab: dict[str, datetime] = field(default_factory=dict)
    cleared: tuple[str, ...] = ()

    def for_lab(self, lab: str) -> datetime | None:
        return self.by_lab.get(lab, self.default)

    def __bool__(self) -> bool:
        return self.default is not None or bool(self.by_lab) or bool(self.cleared)


def parse_due(values: list[str] | None, known_labs: list[str]) -> DueTimes:
    """``--due`` values (each ``WHEN`` or ``LAB=WHEN``, repeatable) as due times."""
    default, by_lab, cleared = None, {}, []
    for value in values or []:
        lab, sep, when = value.partition("=")
        if sep and not lab[:1].isdigit():
            if lab not in known_labs:
                raise DueError(f"--due {value}: unknown lab {lab!r}; labs: {', '.join(known_labs) or 'none'}")
            if when.strip().lower() == "none":
                cleared.append(lab)
            else:
                by_lab[lab] = parse_time(when, f"--due {lab}=")
        elif default is not None or "*" in cleared:
            raise DueError(f"--due {value}: a due time for every lab was given twice; use LAB=WHEN for one lab")
        elif value.strip().lower() == "none":
            cleared.append("*")
        else:
            default = parse_time(value, "--due ")
    return DueTimes(default, by_lab, tuple(cleared))


# ---- the late-penalty rule -----------------------------------------------------------------------

_PERIODS = {"min": 60, "minute": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400, "w": 604800, "week": 604800}


def _duration(text: str, option: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)?\s*(min|minute|h|hour|d|day|w|week)s?", text.strip().lower())
    if not match:
        raise DueError(f"{option}: {text!r} is not a duration (a number and min, h, d or week, e.g. 15min, 12h)")
    seconds = float(match.group(1) or 1) * _PERIODS[match.group(2)]
    if seconds <= 0:
        raise DueError(f"{option}: {text!r}: a duration must be longer than 0")
    return seconds


def _amount(text: str, option: str) -> tuple[float, bool]:
    """``10%`` -> (10, True); ``2`` or ``2pt`` -> (2, False)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(%|pts?|points?)?", text.strip().lower())
    if not match:
        raise DueError(f"{option}: {text!r} is not an amount (a percentage such as 10% or points such as 2)")
    value, percent = float(match.group(1)), match.group(2) == "%"
    if percent and value > 100:
        raise DueError(f"{option}: {text!r}: at most 100%")
    return value, percent


@dataclass(frozen=True)
class LateRule:
    """Points taken off a late hand-in: ``rate`` per started ``period_s`` past the due time (and ``grace_s``),
    at most ``cap``; a rate or cap in percent is of the points possible (``max_score``)."""

    text: str
    rate: float
    rate_percent: bool
    period_s: float
    cap: float | None = None
    cap_percent: bool = True
    grace_s: float = 0.0

    def periods(self, late_by_s: float) -> int:
        if late_by_s <= self.grace_s:
            return 0
        return math.ceil((late_by_s - self.grace_s) / self.period_s - 1e-9)

    def penalty(self, late_by_s: float, max_score: float) -> float:
        """The points taken off for ``late_by_s`` seconds late, out of ``max_score`` possible."""
        points = self.periods(late_by_s) * (self.rate * max_score / 100 if self.rate_percent else self.rate)
        if self.cap is not None:
            points = min(points, self.cap * max_score / 100 if self.cap_percent else self.cap)
        return round(min(points, max_score), 4)


def parse_late_rule(text: str, option: str = "--late-penalty") -> LateRule:
    """``--late-penalty`` as a ``LateRule`` (``RULE_HELP`` gives the syntax); DueError names what is wrong."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or "/" not in parts[0]:
        raise DueError(f"{option} {text!r}: expected {RULE_HELP}")
    rate_text, _, period_text = parts[0].partition("/")
    rate, rate_percent = _amount(rate_text, option)
    if rate <= 0:
        raise DueError(f"{option} {text!r}: the rate must be more than 0")
    rule = dict(rate=rate, rate_percent=rate_percent, period_s=_duration(period_text, option))
    for part in parts[1:]:
        name, sep, value = part.partition("=")
        if name == "max" and sep:
            rule["cap"], rule["cap_percent"] = _amount(value, f"{option} max=")
        elif name == "grace" and sep:
            rule["grace_s"] = _duration(value, f"{option} grace=")
        else:
            raise DueError(f"{option} {text!r}: unknown part {part!r}; expected {RULE_HELP}")
    return LateRule(text.strip(), **rule)


# ---- LMS receipt times ---------------------------------------------------------------------------

STUDENT_COLUMNS = ("ID", "user_id", "SIS User ID", "SIS Login ID", "Login ID", "SID", "Email", "Email address",
                   "student", "student_id", "Identifier")
TIME_COLUMNS = ("submitted_at", "Submitted", "Submission Time", "submission_time", "timestamp",
                "Last modified (submission)")


@dataclass(frozen=True)
class Receipt:
    """When the LMS received one student's hand-in of a lab."""

    received: datetime       # naive UTC
    source: str              # "the LMS export received.csv"


def _lms_time(text: str) -> datetime:
    """An LMS's time: ISO 8601 with a zone (Canvas's API), or ``2026-12-01 23:59:00 -0800`` (Gradescope)."""
    text = text.strip()
    return parse_time(text, "")


def read_receipts(path: Path, lab: str | None = None) -> dict[str, Receipt]:
    """{identifier: Receipt} of an LMS export: one row per hand-in, a student column (``STUDENT_COLUMNS``:
    any that is filled identifies the row) and a time column (``TIME_COLUMNS``) with a zone. Each
    identifier the row names (a Canvas user ID, an SIS id, an e-mail, a student id) maps to its time."""
    option = f"--received {lab + '=' if lab else ''}{path}"
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as error:
        raise DueError(f"{option}: cannot be read ({error.strerror})") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    header = list(rows[0]) if rows else []
    students = [column for column in STUDENT_COLUMNS if column in header]
    times = [column for column in TIME_COLUMNS if column in header]
    if not students or not times:
        raise DueError(f"{option}: needs a student column ({', '.join(STUDENT_COLUMNS)}) and a time column "
                       f"({', '.join(TIME_COLUMNS)}); its columns: {', '.join(header) or 'none'}")
    receipts: dict[str, Receipt] = {}
    for number, row in enumerate(rows, 2):
        when = (row.get(times[0]) or "").strip()
        if not when:
            continue   # no submission
        try:
            received = _lms_time(when)
        except DueError:
            raise DueError(f"{option}, line {number}: {times[0]} {when!r} is not a time with a zone "
                           "(e.g. 2026-12-01T22:59:00Z)") from None
        for column in students:
            identifier = (row.get(column) or "").strip()
            if identifier:
                receipts[identifier.lower()] = Receipt(received, f"the LMS export {Path(path).name}")
    return receipts


# ---- the student's claim: timestamp.txt --------------------------------------------------------

TIMESTAMP_MAX_BYTES = 200
FUTURE_SLACK_S = 600
# What `course submit` and nbgrader write ("2026-01-12 23:00:00.000000 UTC"), and ISO 8601 with a zone:
# digits in their places, ASCII only. dateutil, which nbgrader's parse_utc uses, also reads "12" as the
# 12th of the month the grader runs in, "Jan" as today's day in January and "UTC+14" as 14 hours west.
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
                        r"( ?UTC|Z|[+-][0-9]{2}:?[0-9]{2})?", re.ASCII)


def _parse_claim(text: str):
    """A timestamp in the form ``_TIMESTAMP`` allows, as a naive UTC datetime (no zone: UTC, as nbgrader)."""
    if not _TIMESTAMP.fullmatch(text):
        raise ValueError(text)
    parsed = datetime.fromisoformat(re.sub(r" ?UTC$|Z$", "+00:00", text))
    return parsed.astimezone(timezone.utc).replace(tzinfo=None) if parsed.tzinfo is not None else parsed


def read_timestamp(path: Path) -> tuple[str, str | None]:
    """The hand-in time of ``timestamp.txt`` in nbgrader's format, and a problem to report (or None).

    The file is whatever the student's folder holds, so it is parsed and checked, never copied:
    anything but one date (text that is not a date, several lines, more than a line's bytes), or a
    date later than now or before 2000, records no hand-in time and the report says why. A valid
    date is recorded as the student's claim (``due``: the LMS's receipt time, when known, wins).
    """
    try:
        raw = path.read_bytes()[:TIMESTAMP_MAX_BYTES + 1]
    except OSError:
        return "", "timestamp.txt is not readable text: no hand-in time recorded"
    return read_timestamp_text(raw)


def read_timestamp_text(raw: bytes) -> tuple[str, str | None]:
    """``read_timestamp`` of the file's bytes."""
    raw = raw[:TIMESTAMP_MAX_BYTES + 1]
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return "", "timestamp.txt is not readable text: no hand-in time recorded"
    lines = text.splitlines()
    shown = repr(lines[0][:40]) if lines else "''"
    if len(raw) > TIMESTAMP_MAX_BYTES or len(lines) != 1:
        return "", (f"timestamp.txt is not one timestamp ({len(lines)} lines, the first {shown}): no hand-in time "
                    "recorded")
    try:
        claimed = _parse_claim(text)
    except ValueError:
        return "", f"timestamp.txt is not a timestamp ({shown}): no hand-in time recorded"
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    if claimed > now + timedelta(seconds=FUTURE_SLACK_S) or claimed.year < 2000:
        return "", (f"timestamp.txt says {claimed.isoformat(sep=' ')} UTC, which is not a possible hand-in time: "
                    "no hand-in time recorded")
    return claimed.strftime("%Y-%m-%d %H:%M:%S.%f UTC"), None


# ---- how late a hand-in is -----------------------------------------------------------------------


def _claimed(timestamp: str) -> datetime | None:
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(timestamp) if timestamp else None
    except Exception:
        return None


def hand_in(*, deadline: datetime | None, deadline_basis: str, claim: str, receipt: Receipt | None,
            lms_late: bool | None, rule: LateRule | None, max_score: float) -> dict | None:
    """How late one hand-in is, and its late penalty; None without a due time.

    ``{"due", "due_basis", "handed_in", "basis", "late_by_s", "status", "late_penalty", "rule", "lms_late"}``:
    ``status`` names the source ("late by the LMS's receipt", "on time by its claim", "late by the
    LMS's flag", "no hand-in time"); ``late_by_s`` is None when the amount is unknown, and then no
    penalty is taken (the note says so).
    """
    if deadline is None:
        return None
    entry = {"due": format_utc(deadline).replace(".000000", ""), "due_basis": deadline_basis, "handed_in": None,
             "basis": None, "late_by_s": None, "status": "no hand-in time", "late_penalty": 0.0,
             "rule": rule.text if rule else None, "lms_late": lms_late}
    claimed = _claimed(claim)
    if receipt is not None:
        late_by = (receipt.received - deadline).total_seconds()
        entry.update(handed_in=format_utc(receipt.received), basis=f"the LMS's receipt time ({receipt.source})",
                     status="late by the LMS's receipt" if late_by > 0 else "on time by the LMS's receipt")
    elif lms_late is not None:
        entry.update(basis=LMS_FLAG, handed_in=claim or None)
        if not lms_late:
            late_by = 0.0
            entry["status"] = "on time by the LMS's flag"
        elif claimed is not None and claimed > deadline:
            late_by = (claimed - deadline).total_seconds()
            entry.update(status="late by the LMS's flag", basis=f"{LMS_FLAG}; by how much: {CLAIM}")
        else:
            late_by = None
            entry["status"] = "late by the LMS's flag"
    elif claimed is not None:
        late_by = (claimed - deadline).total_seconds()
        entry.update(handed_in=claim, basis=CLAIM,
                     status="late by its claim" if late_by > 0 else "on time by its claim")
    else:
        return entry
    if late_by is not None:
        entry["late_by_s"] = max(0.0, round(late_by, 3))
        if rule is not None and late_by > 0:
            entry["late_penalty"] = rule.penalty(late_by, max_score)
    return entry


def duration_text(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{max(minutes, 1)} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours // 24} days {hours % 24} h"


_SOURCE_WORD = {"late by the LMS's receipt": "LMS receipt", "late by its claim": "claimed",
                "late by the LMS's flag": "LMS flag"}


def late_note(entry: dict | None) -> str | None:
    """The score table's word on one hand-in's lateness: "late by 2 h 05 min (claimed), -10%", or None."""
    if entry is None or entry["status"].startswith("on time"):
        return None
    if entry["status"] == "no hand-in time":
        return "no hand-in time (lateness unknown)"
    source = _SOURCE_WORD.get(entry["status"], entry["status"])
    if entry["late_by_s"] is None:
        return f"late ({source}; by how much unknown: no late penalty computed)"
    penalty = f", -{entry['late_penalty']:g} late penalty" if entry["late_penalty"] else ""
    return f"late by {duration_text(entry['late_by_s'])} ({source}){penalty}"
