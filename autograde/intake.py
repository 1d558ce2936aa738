"""Intake: every file and folder of SUBMISSIONS accounted for, and each hand-in given to its own student.

``take_in`` reads SUBMISSIONS as an instructor gets it (a folder of ``<student>/<lab>/`` folders, the
zips of ``course submit --zip``, an LMS's bulk download of them, or a mix) and lays the hand-ins out
in one folder to grade, ``<student>/<lab>/<notebook>.ipynb``. Every entry of SUBMISSIONS becomes one
``Source``: to grade (and as whom), not graded (and why), or ignored (and why). Nothing is dropped
without a line in the score table and report.json.

What each entry may be:

- ``<student>/`` holding ``<lab>/`` folders: as they are. Notebooks straight in the student's folder,
  or in a folder that is no lab's name, go to the lab whose chapters they are (flagged);
- a zip: read whole first (``unpack.read_zip``: paths, links, sizes; a damaged one is "not graded:
  damaged or truncated"). It may hold ``<student>/<lab>/``, ``<lab>/`` or the notebooks alone;
- a notebook on its own: graded when an LMS's name says whose it is (``lms.lms_name``) and its name
  or cells say which chapter it is, else "not graded" with the reason;
- an LMS's bulk download given as one zip of files (Canvas's ``submissions.zip``): its files are
  those entries; another archive (``.rar``, ``.7z``...) or any other file: named, with the reason.

**Whose hand-in is it.** An LMS-named file was handed in by its uploader. With ``--roster`` the
uploader's row (by Canvas user ID) names the student; a folder inside the zip that names someone
else is a *conflict*: graded as the uploader's, flagged. Without a roster the folder's name is used
unless uploaders disagree about it (two students who both typed the README's ``s1234567``): then
each is graded as ``<lmsname>-<user id>`` and flagged. A zip with no LMS name hands in only for the
student its own name names: ``<student>-<UTC time>.zip`` as ``course submit --zip`` writes it (a
browser's copy number aside); ``mallory-bob-<time>.zip`` holding ``bob/`` is refused, since nothing
says bob handed it in.

When one student's lab arrives twice, the later hand-in is graded (its LMS receipt time, else its
``timestamp.txt``, else the time in its name, else the file's time) and the other is listed as
replaced. With a roster, the students who handed in nothing and the hand-ins that match no student
are listed too.
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from autograde.due import Receipt, format_utc, read_timestamp_text
from autograde.layout import LAB_NAME, SAFE_ID, GradingError
from autograde.lms import LmsName, Roster, lms_name, match_student, without_copy_number
from autograde.unpack import ARCHIVE_SUFFIXES, UnpackError, read_zip

__all__ = ["GRADED", "IGNORED", "NOT_GRADED", "HandIn", "Intake", "Source", "course_chapters", "match_chapter",
           "take_in"]

TO_GRADE, GRADED, NOT_GRADED, IGNORED = "to grade", "graded", "not graded", "ignored"
_TIME_IN_NAME = re.compile(r"-(\d{8}T\d{6}Z)$")
_RENAMED = re.compile(r"(?i)(?:[ _-]?copy\d*|[ _-]?\(\d+\)|-\d{1,2}|[ _-]v\d+|[ _-]final|[ _-]old)+$")
BULK_FOLDER = ".downloads"   # inside the unpacked folder: the files of a bulk download given as one zip
STAGING_FOLDER = ".staging"  # inside it too: the files of every zip's hand-ins until the later ones are chosen

# {lab: {chapter (notebook stem): the grade ids of its test and answer cells}}
Chapters = dict[str, dict[str, frozenset]]


@dataclass
class Source:
    """One file or folder of SUBMISSIONS, and what became of it (one line of the report)."""

    entry: str
    kind: str                                   # "student folder", "zip", "notebook", "archive", "file", ...
    outcome: str = TO_GRADE
    reason: str = ""
    hand_ins: list[str] = field(default_factory=list)   # "student/lab" it hands in
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"entry": self.entry, "kind": self.kind, "outcome": self.outcome, "reason": self.reason,
                "hand_ins": self.hand_ins, "notes": self.notes}


@dataclass
class HandIn:
    """One student's hand-in of one lab, as intake found it."""

    student: str
    lab: str
    source: Source
    files: dict[str, Path]                      # name in the lab folder -> the file to copy there
    claimed: str | None = None                  # the student id the hand-in names itself (its folder)
    lms: LmsName | None = None
    receipt: Receipt | None = None
    when: str = ""                              # sortable hand-in time: which of two is the later
    flags: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.student}/{self.lab}"

    def meta(self) -> dict:
        """What the result file keeps of the hand-in (``StoredResult.hand_in``)."""
        return {"entry": self.source.entry, "claimed": self.claimed,
                "lms": self.lms.lms if self.lms else None, "lms_user": self.lms.user_id if self.lms else None,
                "lms_name": self.lms.name if self.lms else None, "lms_late": self.lms.late if self.lms else None,
                "received": format_utc(self.receipt.received) if self.receipt else None,
                "received_from": self.receipt.source if self.receipt else None, "flags": list(self.flags)}


@dataclass
class Intake:
    """The folder to grade, every source with its outcome, and the hand-ins chosen."""

    folder: Path
    sources: list[Source] = field(default_factory=list)
    hand_ins: dict[str, HandIn] = field(default_factory=dict)   # "student/lab" -> the one graded
    roster_missing: dict[str, list[str]] = field(default_factory=dict)   # lab -> roster students with no hand-in
    roster_unknown: list[str] = field(default_factory=list)     # hand-ins whose student is not in the roster

    def as_dict(self) -> dict:
        return {"sources": [source.as_dict() for source in self.sources],
                "roster": {"handed_in_nothing": self.roster_missing, "not_in_roster": self.roster_unknown}}


# ---- chapters: which lab and chapter a notebook is ----------------------------------------------


def course_chapters(solutions_dir: Path, labs: list[str]) -> Chapters:
    """Every lab's chapters and the grade ids of their cells (a renamed notebook keeps its cells' ids)."""
    chapters: Chapters = {}
    for lab in labs:
        chapters[lab] = {}
        for path in sorted((solutions_dir / lab).glob("*.ipynb")):
            notebook = nbformat.read(path, as_version=4)
            chapters[lab][path.stem] = frozenset(
                cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells
                if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"))
    return chapters


def _grade_ids(data: bytes | Path | None) -> set[str]:
    """The grade ids a notebook's cells carry (empty if it cannot be read)."""
    try:
        raw = data.read_bytes() if isinstance(data, Path) else data
        notebook = json.loads(raw or b"{}")
        return {cell["metadata"]["nbgrader"]["grade_id"] for cell in notebook.get("cells", [])
                if isinstance(cell, dict) and isinstance(cell.get("metadata", {}).get("nbgrader"), dict)
                and isinstance(cell["metadata"]["nbgrader"].get("grade_id"), str)}
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return set()


def match_chapter(stem: str, chapters: dict[str, frozenset], data: bytes | Path | None = None,
                  *, by_number: bool = False) -> tuple[str | None, str]:
    """The chapter a notebook named ``stem`` is, and how it was matched ("exact", "renamed", "its cells").

    A renamed notebook (``01_tokenization-Copy1``, ``01_Tokenization (1)``) matches by its name with the
    copy marks taken out, or by a close spelling; failing that, by the grade ids of its cells; with
    ``by_number``, by the chapter number it starts with. (None, "") when nothing matches one chapter.
    """
    if stem in chapters:
        return stem, "exact"
    normalized = _RENAMED.sub("", stem.strip()).lower().replace(" ", "_")
    lowered = {chapter.lower(): chapter for chapter in chapters}
    if normalized in lowered:
        return lowered[normalized], "renamed"
    close = difflib.get_close_matches(normalized, list(lowered), n=2, cutoff=0.85)
    if len(close) == 1:
        return lowered[close[0]], "renamed"
    ids = _grade_ids(data) if data is not None else set()
    if ids:
        overlap = sorted(((len(ids & known), chapter) for chapter, known in chapters.items()), reverse=True)
        if overlap and overlap[0][0] > 0 and (len(overlap) == 1 or overlap[1][0] < overlap[0][0]):
            return overlap[0][1], "its cells"
    number = re.match(r"(\d+)[ _-]", normalized)
    if by_number and number:
        same = [chapter for chapter in chapters if chapter.startswith(number.group(1) + "_")]
        if len(same) == 1:
            return same[0], "renamed"
    return None, ""


def _lab_of(notebooks: dict[str, bytes | Path], chapters: Chapters) -> str | None:
    """The one lab every notebook of ``notebooks`` is a chapter of (by name or cells), or None."""
    labs = set()
    for name, data in notebooks.items():
        found = {lab for lab, lab_chapters in chapters.items() if match_chapter(Path(name).stem, lab_chapters, data)[0]}
        if len(found) != 1:
            return None
        labs |= found
    return labs.pop() if len(labs) == 1 else None


# ---- reading SUBMISSIONS -------------------------------------------------------------------------


def _mtime(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime("%Y%m%dT%H%M%S.%f")


def _stamp_time(data: bytes | Path | None) -> str | None:
    if data is None:
        return None
    stamp, _ = read_timestamp_text(data.read_bytes() if isinstance(data, Path) else data)
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f UTC").strftime("%Y%m%dT%H%M%S.%f") if stamp else None


def _name_student(stem: str) -> list[str]:
    """The students a hand-in file's own name may name: ``<student>-<UTC time>``, with or without a copy number."""
    names = []
    for candidate in dict.fromkeys([stem, without_copy_number(stem)]):
        timed = _TIME_IN_NAME.search(candidate)
        names.append(candidate[:timed.start()] if timed else candidate)
    return [name for name in dict.fromkeys(names) if SAFE_ID.match(name)]


class _Reader:
    """Walks SUBMISSIONS and collects candidate hand-ins (identities are settled afterwards)."""

    def __init__(self, chapters: Chapters, staging: Path):
        self.chapters = chapters
        self.staging = staging   # a zip's files wait here on disk, not in memory, until one hand-in is chosen
        self.sources: list[Source] = []
        self.candidates: list[HandIn] = []

    def source(self, entry: str, kind: str) -> Source:
        source = Source(entry, kind)
        self.sources.append(source)
        return source

    def read_folder(self, folder: Path, prefix: str = "") -> None:
        for path in sorted(folder.iterdir(), key=lambda p: p.name):
            entry = prefix + path.name
            if path.name == BULK_FOLDER and not prefix:
                continue
            if path.is_symlink():
                self.refuse(self.source(entry, "link"), NOT_GRADED, "a link: grading follows no links")
            elif path.name.startswith(".") or path.name == "__MACOSX":
                self.refuse(self.source(entry, "hidden"), IGNORED, "a hidden file or folder")
            elif path.is_dir():
                self.read_student_folder(path, entry)
            elif path.suffix.lower() == ".zip":
                self.read_zip(path, entry)
            elif path.suffix.lower() == ".ipynb":
                self.read_loose_notebook(path, entry)
            elif path.name.lower().endswith(ARCHIVE_SUFFIXES):
                kind = path.name.rsplit(".", 1)[-1].lower()
                self.refuse(self.source(entry, "archive"), NOT_GRADED,
                            f"a .{kind} archive: only zips are read (ask for the zip `course submit --zip` writes, "
                            "or unpack it into <student>/<lab>/ yourself)")
            else:
                self.refuse(self.source(entry, "file"), IGNORED,
                            "not a hand-in (grading reads <student>/ folders, zips and notebooks)")

    @staticmethod
    def refuse(source: Source, outcome: str, reason: str) -> None:
        source.outcome, source.reason = outcome, reason

    def read_student_folder(self, folder: Path, entry: str) -> None:
        source = self.source(entry, "student folder")
        if not SAFE_ID.match(folder.name):
            self.refuse(source, NOT_GRADED, "not a student id (student ids use letters, digits, . _ @ + -)")
            return
        groups: dict[str, dict[str, Path]] = {}     # a folder inside (or "" for the student's own) -> its files
        for path in sorted(folder.iterdir(), key=lambda p: p.name):
            if path.name.startswith(".") or path.is_symlink():
                continue
            if path.is_dir():
                groups[path.name] = {file.name: file for file in sorted(path.iterdir())
                                     if file.is_file() and not file.is_symlink()
                                     and (file.suffix == ".ipynb" or file.name == "timestamp.txt")}
                others = [file.name for file in path.iterdir() if file.name not in groups[path.name]
                          and not file.name.startswith(".")]
                if others:
                    source.notes.append(f"ignored {path.name}/{', '.join(sorted(others)[:5])} (grading reads "
                                        "notebooks and timestamp.txt)")
            elif path.suffix == ".ipynb" or path.name == "timestamp.txt":
                groups.setdefault("", {})[path.name] = path
            else:
                source.notes.append(f"ignored {path.name}")
        for inner, files in groups.items():
            self.add_group(source, files, inner or None, claimed=folder.name, lms=None, when_default=_mtime(folder))
        if not any(candidate.source is source for candidate in self.candidates) and source.outcome == TO_GRADE:
            self.refuse(source, NOT_GRADED, "holds no lab folder with notebooks (expected "
                                            f"{folder.name}/<lab>/<notebook>.ipynb)")

    def add_group(self, source: Source, files: dict, lab_folder: str | None, *, claimed: str | None,
                  lms: LmsName | None, when_default: str) -> None:
        """One lab's files (``lab_folder`` the folder they were in, if any) as a candidate hand-in."""
        notebooks = {name: data for name, data in files.items() if name.endswith(".ipynb")}
        if not notebooks:
            if lab_folder:
                source.notes.append(f"{lab_folder}/: no notebooks inside; ignored")
            return
        lab, flags = lab_folder, []
        if lab not in self.chapters:
            lab = _lab_of(notebooks, self.chapters)
            where = f"the folder {lab_folder}/" if lab_folder else "no lab folder"
            if lab is None:
                hint = "" if lab_folder is None or LAB_NAME.match(lab_folder) else \
                    " (lab folders are named like lab01-text-to-tensors)"
                source.notes.append(f"{where}{hint}: {', '.join(sorted(notebooks)[:5])} match no lab's chapters; "
                                    f"not graded (labs: {', '.join(self.chapters) or 'none'})")
                return
            flags.append(f"placed: its notebooks were in {where}, not in {lab}/: graded as {lab} (they are its "
                         "chapters)")
        when = _stamp_time(files.get("timestamp.txt")) or when_default
        self.candidates.append(HandIn("", lab, source, self._on_disk(files), claimed, lms, None, when, flags))

    def _on_disk(self, files: dict[str, bytes | Path]) -> dict[str, Path]:
        folder = self.staging / str(len(self.candidates))
        kept = {}
        for name, data in files.items():
            if isinstance(data, bytes):
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).write_bytes(data)
                data = folder / name
            kept[name] = data
        return kept

    def read_zip(self, path: Path, entry: str) -> None:
        source = self.source(entry, "zip")
        lms = lms_name(path.name)
        try:
            files, ignored = read_zip(path)
        except UnpackError as error:
            self.refuse(source, NOT_GRADED, str(error).removeprefix(f"{path.name}: "))
            return
        if ignored:
            shown = ", ".join(ignored[:5]) + (f" and {len(ignored) - 5} more" if len(ignored) > 5 else "")
            source.notes.append(f"ignored {shown} (grading reads <student>/<lab>/*.ipynb and timestamp.txt)")
        if not any(name.endswith(".ipynb") for name in files):
            self.refuse(source, NOT_GRADED, "holds no notebook (make it with `course submit --zip`)")
            return
        by_student: dict[str | None, dict[str | None, dict[str, bytes]]] = {}
        for name, data in files.items():
            parts = name.split("/")
            student = parts[0] if len(parts) == 3 else None
            lab = parts[-2] if len(parts) >= 2 else None
            by_student.setdefault(student, {}).setdefault(lab, {})[parts[-1]] = data
        file_name = lms.file if lms else path.name
        stem = file_name[:-len(".zip")] if file_name.lower().endswith(".zip") else file_name
        named = _name_student(stem)
        when = (_TIME_IN_NAME.search(without_copy_number(stem)) or _TIME_IN_NAME.search(stem))
        when_default = when.group(1)[:-1] + ".000000" if when else _mtime(path)
        if lms is None:
            strangers = [student for student in by_student if student is not None and student not in named]
            if strangers:
                self.refuse(source, NOT_GRADED,
                            f"it holds the folder {strangers[0] + '/'!r}, a student its name does not name (a zip hands "
                            f"in only for its own student: `course submit --zip` names it {strangers[0]}-<time>.zip; "
                            "an LMS's download names the uploader)")
                return
            if None in by_student and not named:
                self.refuse(source, NOT_GRADED, "its notebooks are in no student folder and its name names no "
                                                "student (`course submit --zip` writes <student>-<time>.zip)")
                return
        for student, labs in by_student.items():
            claimed = student if student is not None else (named[-1] if lms is None else None)
            for lab_folder, lab_files in labs.items():
                self.add_group(source, lab_files, lab_folder, claimed=claimed, lms=lms, when_default=when_default)
        if not any(candidate.source is source for candidate in self.candidates) and source.outcome == TO_GRADE:
            self.refuse(source, NOT_GRADED, "none of its notebooks is a chapter of a lab: " + "; ".join(source.notes))

    def read_loose_notebook(self, path: Path, entry: str) -> None:
        source = self.source(entry, "notebook")
        lms = lms_name(path.name)
        if lms is None:
            self.refuse(source, NOT_GRADED, "a notebook on its own, and its name says no student's (hand in the zip "
                                            "of `course submit --zip`, or put it in <student>/<lab>/)")
            return
        name = lms.file if lms.file.endswith(".ipynb") else f"{lms.file}.ipynb"
        self.add_group(source, {name: path}, None, claimed=None, lms=lms, when_default=_mtime(path))
        if not any(candidate.source is source for candidate in self.candidates):
            self.refuse(source, NOT_GRADED, "; ".join(source.notes) or "not a chapter of any lab")
            source.notes.clear()


# ---- whose hand-in is it -----------------------------------------------------------------------


def _settle_identities(candidates: list[HandIn], roster: Roster | None) -> None:
    """Give every candidate its student (see the module docstring, "Whose hand-in is it")."""
    claims: dict[str, set[str]] = {}   # a folder name -> the LMS users whose uploads hold it
    for candidate in candidates:
        if candidate.lms and candidate.claimed:
            claims.setdefault(candidate.claimed, set()).add(candidate.lms.user_id)
    for candidate in candidates:
        lms, claimed = candidate.lms, candidate.claimed
        if lms is None:
            candidate.student = claimed or ""
            continue
        entry = roster.by_canvas_id(lms.user_id) if roster is not None and lms.lms == "Canvas" else None
        if entry is not None:
            if claimed and claimed.lower() in {value.lower() for value in entry.ids()}:
                candidate.student = claimed
            else:
                candidate.student = entry.student_id()
                if claimed:
                    candidate.flags.append(
                        f"conflict: the zip holds the folder {claimed}/, but {lms.lms} says {entry.name} "
                        f"({entry.student_id()}) uploaded it: graded as {entry.name}'s; check with the student")
            continue
        contested = claimed is not None and len(claims.get(claimed, ())) > 1
        if claimed and not contested and SAFE_ID.match(claimed):
            candidate.student = claimed
        else:
            candidate.student = lms.local_id()
            if contested:
                others = len(claims[claimed]) - 1
                candidate.flags.append(
                    f"conflict: {others} other upload{'s' if others > 1 else ''} also hold{'' if others > 1 else 's'} "
                    f"the folder {claimed}/: graded as the uploader's own, {candidate.student} "
                    f"({lms.describe()}); --roster names each by the LMS's ids")
        if roster is not None:
            candidate.flags.append(f"{lms.lms} user {lms.user_id} ({lms.name}) is not in the roster")


def _receipt_for(candidate: HandIn, receipts: dict[str, dict[str, Receipt]], roster: Roster | None) -> Receipt | None:
    table = {**receipts.get("*", {}), **receipts.get(candidate.lab, {})}
    names = [candidate.student, candidate.claimed or ""]
    if candidate.lms:
        names.append(candidate.lms.user_id)
    entry = match_student(candidate.student, roster) if roster else None
    if entry is not None:
        names += entry.ids()
    return next((table[name.lower()] for name in names if name and name.lower() in table), None)


def _choose(candidates: list[HandIn]) -> dict[str, HandIn]:
    """The hand-in graded for each student and lab: the later one; the other's source says it was replaced."""
    chosen: dict[str, HandIn] = {}
    for candidate in sorted(candidates, key=lambda c: (c.key, c.when, c.source.entry)):
        earlier = chosen.get(candidate.key)
        if earlier is not None:
            note = (f"{earlier.key}: handed in twice ({earlier.source.entry}, {candidate.source.entry}); graded the later "
                    f"one, {candidate.source.entry}")
            earlier.source.notes.append(note)
            earlier.source.hand_ins.remove(earlier.key)
            if not earlier.source.hand_ins:
                earlier.source.outcome = NOT_GRADED
                earlier.source.reason = f"replaced by a later hand-in of {earlier.key} ({candidate.source.entry})"
            candidate.source.notes.append(note)
        candidate.source.hand_ins.append(candidate.key)
        chosen[candidate.key] = candidate
    return chosen


def _write(hand_in: HandIn, target: Path) -> None:
    folder = target / hand_in.student / hand_in.lab
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in hand_in.files.items():
        shutil.copyfile(path, folder / name)


def _expand_bulk_download(archive: Path, target: Path) -> Path | None:
    """A zip whose entries are all top-level files (an LMS's bulk download): its files, unpacked (checked
    as a hand-in is) into ``target/BULK_FOLDER``; None for a zip that holds folders (one class's hand-ins)."""
    files, _ = read_zip(archive, wanted=lambda name: not name.startswith("__MACOSX/"))
    if not files or any("/" in name for name in files):
        return None
    folder = target / BULK_FOLDER
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def take_in(submissions: Path, target: Path, chapters: Chapters, *, roster: Roster | None = None,
            receipts: dict[str, dict[str, Receipt]] | None = None) -> Intake:
    """Read SUBMISSIONS and write the hand-ins to ``target/<student>/<lab>/`` (``target`` emptied first).

    ``chapters``: ``course_chapters`` of the known labs; ``receipts``: {lab or "*": {identifier: Receipt}}
    (``due.read_receipts``). Raises GradingError when SUBMISSIONS is neither a folder nor a zip, or a
    single zip given on its own is refused.
    """
    submissions, target = Path(submissions), Path(target)
    if not submissions.exists():
        raise GradingError(f"SUBMISSIONS {submissions} does not exist")
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    reader = _Reader(chapters, target / STAGING_FOLDER)
    if submissions.is_dir():
        reader.read_folder(submissions)
    elif submissions.suffix.lower() == ".zip":
        try:
            bulk = _expand_bulk_download(submissions, target)
        except UnpackError as error:
            raise GradingError(str(error)) from None
        if bulk is not None:
            reader.read_folder(bulk)
        else:
            _read_class_zip(reader, submissions)
    else:
        raise GradingError(f"SUBMISSIONS {submissions} is neither a folder nor a zip")
    _settle_identities(reader.candidates, roster)
    for candidate in reader.candidates:
        candidate.receipt = _receipt_for(candidate, receipts or {}, roster)
        if candidate.receipt is not None:
            candidate.when = candidate.receipt.received.strftime("%Y%m%dT%H%M%S.%f")
    intake = Intake(target, reader.sources, _choose(reader.candidates))
    for hand_in in intake.hand_ins.values():
        _write(hand_in, target)
    shutil.rmtree(target / STAGING_FOLDER, ignore_errors=True)
    for source in reader.sources:
        flags = [flag for hand_in in intake.hand_ins.values() if hand_in.source is source for flag in hand_in.flags]
        source.notes.extend(flag for flag in flags if flag not in source.notes)
    if roster is not None:
        _check_roster(intake, roster)
    return intake


def _read_class_zip(reader: _Reader, archive: Path) -> None:
    """One zip holding a whole class (``<student>/<lab>/``): each student folder inside is a source."""
    try:
        files, ignored = read_zip(archive)
    except UnpackError as error:
        raise GradingError(str(error)) from None
    by_student: dict[str, dict[str, dict[str, bytes]]] = {}
    for name, data in files.items():
        parts = name.split("/")
        if len(parts) != 3:
            ignored.append(name)
            continue
        by_student.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = data
    for student, labs in sorted(by_student.items()):
        source = reader.source(f"{archive.name}:{student}/", "student folder")
        if not SAFE_ID.match(student):
            reader.refuse(source, NOT_GRADED, "not a student id (student ids use letters, digits, . _ @ + -)")
            continue
        for lab_folder, lab_files in labs.items():
            reader.add_group(source, lab_files, lab_folder, claimed=student, lms=None, when_default=_mtime(archive))
        if not source.hand_ins and not any(c.source is source for c in reader.candidates):
            reader.refuse(source, NOT_GRADED, "; ".join(source.notes) or "no lab folder with notebooks")
    if ignored:
        source = reader.source(f"{archive.name}: other entries", "entries")
        reader.refuse(source, IGNORED, f"{', '.join(ignored[:5])}{' ...' if len(ignored) > 5 else ''} (grading reads "
                                       "<student>/<lab>/*.ipynb and timestamp.txt)")


def _check_roster(intake: Intake, roster: Roster) -> None:
    """Who of the roster handed in nothing, per lab handed in; which hand-ins match no roster student."""
    labs = sorted({hand_in.lab for hand_in in intake.hand_ins.values()})
    matched: dict[str, set[str]] = {lab: set() for lab in labs}
    for hand_in in intake.hand_ins.values():
        entry = match_student(hand_in.student, roster)
        if entry is None:
            if hand_in.key not in intake.roster_unknown:
                intake.roster_unknown.append(hand_in.key)
                if not any("not in the roster" in flag for flag in hand_in.flags):
                    hand_in.flags.append(f"{hand_in.student} matches no student of the roster")
                    hand_in.source.notes.append(hand_in.flags[-1])
        else:
            matched[hand_in.lab].add(entry.canvas_id or entry.name)
    for lab in labs:
        missing = [entry.student_id() for entry in roster.students if (entry.canvas_id or entry.name) not in matched[lab]]
        if missing:
            intake.roster_missing[lab] = missing
