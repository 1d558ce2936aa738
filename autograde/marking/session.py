"""A marking session for one lab of a ``course grade`` output folder: the files it keeps, the app.

Next to the grades, ``OUT/marking/`` holds the marks (``marks.sqlite``, every version of every mark,
and the live claims) and the secret that turns student ids into the page's answer keys
(``answer-keys.secret``, readable by its owner only). Stopping ``course mark`` loses nothing: every
mark is written when it is saved, and starting it again opens the same marks (resumable).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from autograde.knowledge.questions import KNOWLEDGE_DIR, LabQuestions, load_lab
from autograde.marking.service import DEFAULT_LEASE_S, MarkingApp
from autograde.marking.store import SqliteMarks

SECRET_BYTES = 32


def marking_dir(out_dir: Path) -> Path:
    return Path(out_dir) / "marking"


def answer_key_secret(folder: Path) -> bytes:
    """The session's secret, made once (atomically, mode 0600) and read back on every later start."""
    path = Path(folder) / "answer-keys.secret"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        data = path.read_bytes()
        if len(data) < SECRET_BYTES:
            raise ValueError(f"{path} is damaged (shorter than {SECRET_BYTES} bytes): delete it to make a new one; "
                             "answer keys of open pages change") from None
        return data
    with os.fdopen(descriptor, "wb") as handle:
        data = secrets.token_bytes(SECRET_BYTES)
        handle.write(data)
    return data


def open_session(out_dir: Path, lab: str, *, anonymous: bool = False, questions: LabQuestions | None = None,
                 questions_dir: Path = KNOWLEDGE_DIR, store_path: Path | None = None,
                 lease_s: float = DEFAULT_LEASE_S, default_grader: str = "") -> MarkingApp:
    """The marking app for ``lab`` in ``out_dir``, with its marks store and secret."""
    out_dir = Path(out_dir)
    questions = questions if questions is not None else load_lab(lab, questions_dir)
    store = SqliteMarks(store_path or marking_dir(out_dir) / "marks.sqlite")
    return MarkingApp(out_dir, questions, store, store, answer_key_secret(marking_dir(out_dir)),
                      anonymous=anonymous, lease_s=lease_s, default_grader=default_grader, clock=store.clock)
