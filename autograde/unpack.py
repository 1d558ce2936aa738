"""Reading a zip that a student (or an LMS) handed in, safely: nothing is written until all of it is checked.

A zip is read whole, before anything is unpacked, and refused, with the reason, when an entry

- has an absolute path, a drive letter, a backslash or a ``..`` part (it would land outside the
  folder it is unpacked into);
- is a symbolic link, a device or anything but a plain file or folder;
- is larger than ``MAX_FILE_BYTES`` unpacked, or the zip adds up to more than ``MAX_TOTAL_BYTES``
  or ``MAX_ENTRIES`` entries (sizes are counted while unpacking too: the sizes a zip declares can lie);
- appears twice;

and a file that is not a zip, or a damaged or truncated one, is refused the same way. ``read_zip``
returns the entries a caller wants (``intake`` wants the notebooks and ``timestamp.txt`` of a
hand-in, or every file of an LMS's bulk download) as bytes, and the names of the others.
"""

from __future__ import annotations

import re
import stat
import zipfile
from pathlib import Path

__all__ = ["ARCHIVE_SUFFIXES", "MAX_ENTRIES", "MAX_FILE_BYTES", "MAX_TOTAL_BYTES", "UnpackError", "hand_in_entry",
           "read_zip"]

MAX_FILE_BYTES = 64 * 1024 * 1024       # one notebook (plots included) is a few MB at most
MAX_TOTAL_BYTES = 512 * 1024 * 1024
MAX_ENTRIES = 2000
# Archives a student might hand in that the grader does not open (a zip it does): named in the report.
ARCHIVE_SUFFIXES = (".rar", ".7z", ".tar", ".tgz", ".gz", ".bz2", ".xz", ".zst")


class UnpackError(ValueError):
    """A zip that is refused whole; the message names the zip and the entry."""


def hand_in_entry(name: str) -> bool:
    """Whether grading reads this entry of a hand-in zip: a notebook or ``timestamp.txt``, at most
    ``<student>/<lab>/`` deep, in no hidden or macOS resource folder."""
    parts = name.split("/")
    if len(parts) > 3 or any(part.startswith(".") or part == "__MACOSX" for part in parts):
        return False
    return parts[-1].endswith(".ipynb") or parts[-1] == "timestamp.txt"


def _noise(name: str) -> bool:
    """Entries every zip tool adds (macOS resource forks, Finder files): not worth a line in the report."""
    return name.startswith("__MACOSX/") or name.endswith(".DS_Store")


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


def read_zip(path: Path, wanted=hand_in_entry) -> tuple[dict[str, bytes], list[str]]:
    """{entry: bytes} of the entries ``wanted`` accepts, and the names of the others; UnpackError if refused."""
    label = path.name
    try:
        with zipfile.ZipFile(path) as archive:
            infos = _validate(archive, label)
            files, ignored = {}, []
            for info in infos:
                if info.is_dir():
                    continue
                if not wanted(info.filename):
                    if not _noise(info.filename):
                        ignored.append(info.filename)
                    continue
                files[info.filename] = _read_limited(archive, info, label)
    except zipfile.BadZipFile as error:
        raise UnpackError(f"{label}: not a zip file, or a damaged or truncated one ({error}): ask for it again") from None
    except (zipfile.LargeZipFile, NotImplementedError, RuntimeError, OSError, EOFError) as error:
        raise UnpackError(f"{label}: cannot be read ({type(error).__name__}: {error}): damaged or truncated? "
                          "ask for it again") from None
    return files, ignored
