"""``course grade`` on zips: hand-ins made by ``course submit --zip``, unpacked safely first.

SUBMISSIONS may be a zip, or a folder holding zips (and, or, ``<student>/`` folders). Every zip is
read before anything is written, and refused whole, with the reason, when an entry

- has an absolute path, a drive letter, a backslash or a ``..`` part (it would land outside the
  folder it is unpacked into);
- is a symbolic link, a device or anything but a plain file or folder;
- is larger than ``MAX_FILE_BYTES`` unpacked, or the zip adds up to more than ``MAX_TOTAL_BYTES``
  or ``MAX_ENTRIES`` entries (sizes are counted while unpacking too: the sizes a zip declares can lie);
- appears twice;
- in a folder of zips, belongs to a student the zip's name does not name (``course submit`` names a
  zip ``<student>-<UTC time>.zip``; a learning platform may add its own prefix, a browser a copy
  number): a student's zip cannot hand in, or replace, another student's lab. (The platform's record
  of who uploaded which file stays the proof of identity: compare it with the names in report.json.)

Of an accepted zip only what grading reads is unpacked: ``<student>/<lab>/*.ipynb`` and
``<student>/<lab>/timestamp.txt``; anything else is listed as ignored. When two zips hold the same
student's lab, the later hand-in wins (its ``timestamp.txt``, else the time in its name, else the
zip's file time) and the other is reported. The result is one folder in the usual layout.
"""

from __future__ import annotations

import re
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MAX_ENTRIES", "MAX_FILE_BYTES", "MAX_TOTAL_BYTES", "UnpackError", "Unpacked", "has_zips",
           "unpack_submissions"]

MAX_FILE_BYTES = 64 * 1024 * 1024       # one notebook (plots included) is a few MB at most
MAX_TOTAL_BYTES = 512 * 1024 * 1024
MAX_ENTRIES = 2000
_GRADED = re.compile(r"^[^/]+/[^/]+/(?:[^/]+\.ipynb|timestamp\.txt)$")
_TIME_IN_NAME = re.compile(r"(\d{8}T\d{6}Z)")


class UnpackError(ValueError):
    """A zip that is refused whole; the message names the zip and the entry."""


@dataclass
class Unpacked:
    """The folder to grade, and what to tell the instructor about the zips."""

    folder: Path
    zips: int = 0
    notes: list[str] = field(default_factory=list)      # ignored entries, replaced hand-ins
    refused: list[str] = field(default_factory=list)    # zips not unpacked, and why


def has_zips(submissions: Path) -> bool:
    """Whether ``course grade`` must unpack first: SUBMISSIONS is a zip or holds one."""
    submissions = Path(submissions)
    if submissions.is_file():
        return True
    return submissions.is_dir() and any(path.suffix.lower() == ".zip" and path.is_file()
                                        for path in submissions.iterdir())


def _entry_problem(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    if "\\" in name or name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "an absolute path or a backslash"
    parts = name.rstrip("/").split("/")
    if any(part == ".." for part in parts):
        return "a '..' part (it would be written outside the folder)"
    if any(part in ("", ".") for part in parts):
        return "an empty or '.' part in its path"
    if "\x00" in name:
        return "a NUL character in its name"
    mode = info.external_attr >> 16   # Unix mode bits, when the zip was made on Unix
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "a type that is not a plain file or folder (a device, a pipe)"
    if info.file_size > MAX_FILE_BYTES:
        return f"{info.file_size:,} bytes unpacked (at most {MAX_FILE_BYTES:,} per file)"
    return None


def _validate(archive: zipfile.ZipFile, label: str) -> list[zipfile.ZipInfo]:
    infos = archive.infolist()
    if len(infos) > MAX_ENTRIES:
        raise UnpackError(f"{label}: {len(infos)} entries (at most {MAX_ENTRIES})")
    seen: set[str] = set()
    total = 0
    for info in infos:
        problem = _entry_problem(info)
        if problem:
            raise UnpackError(f"{label}: refused: entry {info.filename!r} has {problem}")
        key = info.filename.rstrip("/")
        if key in seen:
            raise UnpackError(f"{label}: refused: entry {info.filename!r} appears twice")
        seen.add(key)
        total += info.file_size
    if total > MAX_TOTAL_BYTES:
        raise UnpackError(f"{label}: refused: {total:,} bytes unpacked (at most {MAX_TOTAL_BYTES:,})")
    return infos


def _read_limited(archive: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> bytes:
    """The entry's bytes, never more than it declared (a zip that lies about sizes is refused)."""
    with archive.open(info) as stream:
        data = stream.read(min(info.file_size, MAX_FILE_BYTES) + 1)
    if len(data) > info.file_size:
        raise UnpackError(f"{label}: refused: entry {info.filename!r} unpacks to more than the size it declares")
    return data


def _read_zip(path: Path) -> tuple[dict[str, bytes], list[str]]:
    """{student/lab/file: bytes} of what grading reads, and the ignored entries; UnpackError if refused."""
    label = path.name
    try:
        with zipfile.ZipFile(path) as archive:
            infos = _validate(archive, label)
            files, ignored = {}, []
            for info in infos:
                if info.is_dir():
                    continue
                if not _GRADED.match(info.filename) or info.filename.split("/")[0].startswith("."):
                    if not info.filename.startswith("__MACOSX/") and not info.filename.endswith(".DS_Store"):
                        ignored.append(info.filename)
                    continue
                files[info.filename] = _read_limited(archive, info, label)
    except zipfile.BadZipFile as error:
        raise UnpackError(f"{label}: not a zip file ({error})") from None
    except (zipfile.LargeZipFile, NotImplementedError, RuntimeError, OSError) as error:
        raise UnpackError(f"{label}: cannot be read ({error})") from None
    if not files:
        raise UnpackError(f"{label}: holds no <student>/<lab>/<notebook>.ipynb (make it with "
                          "`course submit --zip`)" + (f"; it holds {', '.join(ignored[:5])}" if ignored else ""))
    return files, ignored


def _check_owner(files: dict[str, bytes], zip_path: Path) -> None:
    """Refuse a zip (one of a folder's) holding the folder of a student its file name does not name."""
    name = zip_path.name[:-len(zip_path.suffix)] if zip_path.suffix else zip_path.name
    for student in sorted({entry.split("/", 1)[0] for entry in files}):
        if not re.search(rf"(?<![A-Za-z0-9]){re.escape(student)}(?![A-Za-z0-9])", name):
            raise UnpackError(f"{zip_path.name}: refused: it holds the folder {student + '/'!r}, a student its name "
                              f"does not name (a zip hands in the labs of the student it is named for: "
                              f"`course submit --zip` writes {student}-<time>.zip)")


def _hand_in_time(files: dict[str, bytes], lab_prefix: str, zip_path: Path) -> str:
    """A sortable time of one lab's hand-in: its timestamp.txt, the time in the zip's name, the zip's mtime."""
    from datetime import datetime, timezone

    stamp = files.get(f"{lab_prefix}/timestamp.txt")
    if stamp:
        try:
            from nbgrader.utils import parse_utc

            return parse_utc(stamp.decode("utf-8").strip()).strftime("%Y%m%dT%H%M%S.%f")
        except Exception:
            pass
    match = _TIME_IN_NAME.search(zip_path.name)
    if match:
        return match.group(1)[:-1] + ".000000"
    return datetime.fromtimestamp(zip_path.stat().st_mtime, timezone.utc).strftime("%Y%m%dT%H%M%S.%f")


def unpack_submissions(submissions: Path, target: Path) -> Unpacked:
    """Unpack the zip(s) in ``submissions`` (a zip, or a folder with zips) into ``target`` (emptied first).

    Student folders found next to the zips are copied in as they are. Raises UnpackError when
    SUBMISSIONS is a single zip that is refused; in a folder, a refused zip is reported and skipped.
    """
    submissions, target = Path(submissions), Path(target)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    result = Unpacked(target)
    if submissions.is_file():
        zips, folders = [submissions], []
    else:
        entries = sorted(p for p in submissions.iterdir() if not p.name.startswith("."))
        zips = [p for p in entries if p.is_file() and p.suffix.lower() == ".zip"]
        folders = [p for p in entries if p.is_dir() and not p.is_symlink()]
    chosen: dict[str, tuple[str, Path, dict[str, bytes]]] = {}   # student/lab -> (time, zip, files)
    for path in zips:
        try:
            files, ignored = _read_zip(path)
            if not submissions.is_file():   # one zip given on its own may hold a whole class
                _check_owner(files, path)
        except UnpackError as error:
            if submissions.is_file():
                raise
            result.refused.append(str(error))
            continue
        result.zips += 1
        if ignored:
            shown = ", ".join(ignored[:5]) + (f" and {len(ignored) - 5} more" if len(ignored) > 5 else "")
            result.notes.append(f"{path.name}: ignored {shown} (grading reads <student>/<lab>/*.ipynb and "
                                "timestamp.txt)")
        for lab_prefix in sorted({name.rsplit("/", 1)[0] for name in files}):
            lab_files = {name: data for name, data in files.items() if name.startswith(lab_prefix + "/")}
            when = _hand_in_time(files, lab_prefix, path)
            earlier = chosen.get(lab_prefix)
            if earlier is not None:
                older, newer = sorted([earlier[:2], (when, path)], key=lambda item: item[0])
                result.notes.append(f"{lab_prefix}: handed in twice ({older[1].name}, {newer[1].name}); "
                                    f"graded the later one, {newer[1].name}")
                if earlier[0] >= when:
                    continue
            chosen[lab_prefix] = (when, path, lab_files)
    for folder in folders:
        for lab_dir in sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()):
            key = f"{folder.name}/{lab_dir.name}"
            if key in chosen:
                result.notes.append(f"{key}: both a folder and {chosen[key][1].name}; graded the zip")
                continue
            shutil.copytree(lab_dir, target / key, symlinks=True,
                            ignore=shutil.ignore_patterns(".*", "__pycache__"))
    for _, _, lab_files in chosen.values():
        for name, data in lab_files.items():
            path = target / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return result
