"""A marking session for one lab of a ``course grade`` output folder: the files it keeps, the app.

The marks go into the ledger beside the grades (``OUT/ledger.sqlite``, ``ledger_marks``), every
version kept. ``OUT/marking/`` holds what only the marking page needs: the live claims
(``claims.sqlite``: who has which answer open) and the secret that turns student ids into the page's
answer keys (``answer-keys.secret``, readable by its owner only). Stopping ``course mark`` loses
nothing: every mark is written when it is saved, and starting it again opens the same marks
(resumable).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from autograde.knowledge.questions import KNOWLEDGE_DIR, SOLUTIONS_DIR, LabQuestions, load_lab
from autograde.marking.ledger_marks import LedgerMarks
from autograde.marking.service import DEFAULT_LEASE_S, MarkingApp
from autograde.marking.store import MarkStore, SqliteClaims

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
                 questions_dir: Path = KNOWLEDGE_DIR, solutions_dir: Path = SOLUTIONS_DIR,
                 claims_path: Path | None = None, marks: MarkStore | None = None,
                 lease_s: float = DEFAULT_LEASE_S, default_grader: str = "") -> MarkingApp:
    """The marking app for ``lab`` in ``out_dir``: its questions (rubrics joined to their cells in
    ``solutions_dir``), the ledger's marks (or ``marks``), the claims and the secret."""
    out_dir = Path(out_dir)
    questions = questions if questions is not None else load_lab(lab, questions_dir, solutions_dir)
    claims = SqliteClaims(claims_path or marking_dir(out_dir) / "claims.sqlite")
    return MarkingApp(out_dir, questions, marks if marks is not None else LedgerMarks(out_dir), claims,
                      answer_key_secret(marking_dir(out_dir)), anonymous=anonymous, lease_s=lease_s,
                      default_grader=default_grader, clock=claims.clock)
