"""The ``--out`` folder of ``course grade``: one run writes it at a time, and it holds one class.

Two runs writing one folder would each rebuild the class's files from what they saw, the last one
winning. ``claim`` takes an exclusive lock on ``OUT/.course-grade.lock`` (``fcntl.flock``: the
system drops it when the run ends, however it ends, so a killed run never leaves a stale lock) and
writes into it who holds it; a second run is refused with the first one's process id, host and
start time. ``course adjust`` asks ``held_by`` before it rebuilds the class's files.

A folder of results is one class: the SUBMISSIONS folders graded into it are listed in
``OUT/class.json``. Grading a SUBMISSIONS not listed there into it (another course's downloads, a
second section) without ``--resume`` is refused; with ``--resume`` the new hand-ins join the class
(a later lab's downloads, a late student's folder).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path

from autograde.layout import GradingError

__all__ = ["LOCK_FILE", "check_same_class", "claim", "held_by", "record_source"]

LOCK_FILE = ".course-grade.lock"
CLASS_FILE = "class.json"


def _describe(holder: dict) -> str:
    return (f"process {holder.get('pid', '?')} on {holder.get('host', '?')}, started {holder.get('started', '?')}"
            + (f": {holder['command']}" if holder.get("command") else ""))


def held_by(out_dir: Path) -> dict | None:
    """Who holds ``out_dir``'s lock now (their record), or None when no run holds it."""
    path = Path(out_dir) / LOCK_FILE
    if not path.is_file():
        return None
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            try:
                return json.loads(handle.read() or "{}")
            except ValueError:
                return {}
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


@contextlib.contextmanager
def claim(out_dir: Path, command: str = ""):
    """Hold ``out_dir`` for this run (a context manager); GradingError naming the other run if one holds it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    handle = open(out_dir / LOCK_FILE, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            try:
                holder = json.loads(handle.read() or "{}")
            except ValueError:
                holder = {}
            raise GradingError(f"--out {out_dir} is being written by another `course grade` ({_describe(holder)}); "
                               "wait for it to finish (two runs into one folder would overwrite each other's class "
                               "files), or grade into another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                 "command": command or " ".join(sys.argv)[:300]}))
        handle.flush()
        yield
    finally:
        handle.close()   # closing drops the lock


def _record(out_dir: Path) -> dict:
    try:
        return json.loads((Path(out_dir) / CLASS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def check_same_class(out_dir: Path, submissions: Path, *, resume: bool) -> None:
    """Refuse to grade ``submissions`` into an ``out_dir`` that holds another class's results, unless ``resume``."""
    out_dir = Path(out_dir)
    if resume or not any((out_dir / "results").glob("*/*.json")):
        return
    sources = _record(out_dir).get("sources") or []
    if not sources or str(Path(submissions).resolve()) in sources:
        return
    raise GradingError(f"--out {out_dir} already holds the grades of another SUBMISSIONS ({', '.join(sources[:3])}); "
                       f"grading {submissions} into it would mix two classes. Pass --resume to add these hand-ins to "
                       "that class (a later lab's downloads, a late student), or choose another --out")


def record_source(out_dir: Path, submissions: Path) -> None:
    """Add ``submissions`` to the SUBMISSIONS folders graded into ``out_dir`` (``class.json``)."""
    from autograde.store import atomic_write_bytes

    record = _record(out_dir)
    sources = list(record.get("sources") or [])
    path = str(Path(submissions).resolve())
    if path not in sources:
        sources.append(path)
    atomic_write_bytes(Path(out_dir) / CLASS_FILE, json.dumps({**record, "sources": sources}, indent=1).encode())
