"""The class's answers to one written question, read from the graded notebooks.

``course grade`` keeps every student's graded notebooks in ``OUT/autograded/<student>/<lab>/
<notebook>.ipynb``. A written answer is the cell whose nbgrader ``grade_id`` is the question's:
nbgrader's *manually graded answer* cell (``solution`` and ``grade`` set, ``points`` its worth). Its
source is what the student wrote, Markdown (or code, if they changed the cell's type), shown to a TA
as text, never as HTML.

An answer is:

- ``answered``: the student wrote something;
- ``blank``: the cell is as released ("YOUR ANSWER HERE", empty, or nbgrader's checksum unchanged):
  nbgrader scores it 0 by itself, and no TA needs to read it (a TA may still give it a mark);
- ``missing``: the notebook was not handed in or has no such cell (0 points, nothing to read);
- ``unreadable``: the notebook could not be read (the grader reported it already).

Answers are read once per question and kept until a notebook file changes (a regrade), so a page of
200 answers does not parse 200 notebooks again on every request.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from autograde.feedback import ANSWER_KEY
from course_lib.handin.notebooks import SAFE_ID, is_blank_answer

ANSWERED, BLANK, MISSING, UNREADABLE = "answered", "blank", "missing", "unreadable"
MAX_ANSWER_CHARS = 20_000              # a TA reads at most this much of one answer
MAX_NOTEBOOK_BYTES = 64 * 2**20        # a graded notebook larger than this is not parsed


@dataclass(frozen=True)
class Answer:
    student: str
    notebook: str
    grade_id: str
    status: str
    text: str = ""
    truncated_chars: int = 0      # characters cut from a very long answer
    cell_type: str = "markdown"
    attachments: int = 0          # images pasted into the cell (not shown)
    problem: str = ""             # why an answer is unreadable


def students(out_dir: Path, lab: str) -> list[str]:
    """Students with graded notebooks of ``lab`` in ``OUT/autograded/`` (safe folder names only)."""
    root = Path(out_dir) / "autograded"
    if not root.is_dir():
        return []
    return sorted(path.name for path in root.iterdir()
                  if path.is_dir() and SAFE_ID.match(path.name) and (path / lab).is_dir())


def read_answer(out_dir: Path, lab: str, student: str, notebook: str, grade_id: str) -> Answer:
    """One student's answer cell, from their graded notebook."""
    path = Path(out_dir) / "autograded" / student / lab / f"{notebook}.ipynb"
    base = dict(student=student, notebook=notebook, grade_id=grade_id)
    if not path.is_file():
        return Answer(**base, status=MISSING)
    try:
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            return Answer(**base, status=UNREADABLE, problem=f"the notebook is larger than {MAX_NOTEBOOK_BYTES >> 20} MB")
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        return Answer(**base, status=UNREADABLE, problem=f"the notebook could not be read ({type(error).__name__})")
    cell = next((cell for cell in cells if isinstance(cell, dict)
                 and (cell.get("metadata") or {}).get("nbgrader", {}).get("grade_id") == grade_id), None)
    if cell is None:
        return Answer(**base, status=MISSING)
    cell = _as_written(cell)
    source = cell.get("source", "")
    text = "".join(source) if isinstance(source, list) else str(source)
    kind = cell.get("cell_type") if cell.get("cell_type") in ("markdown", "code", "raw") else "markdown"
    attachments = len(cell.get("attachments") or {}) if isinstance(cell.get("attachments"), dict) else 0
    attachments = cell.get("attachment_count", attachments)
    if _is_blank(cell, text):
        return Answer(**base, status=BLANK, cell_type=kind)
    shown = text[:MAX_ANSWER_CHARS]
    return Answer(**base, status=ANSWERED, text=shown, truncated_chars=len(text) - len(shown), cell_type=kind,
                  attachments=attachments)


def _as_written(cell: dict) -> dict:
    """The answer cell as the student wrote it. The graded notebooks are kept sanitized for formgrader
    (``feedback.reviewable_notebook``): a Markdown answer is shown there as a text block, its own words
    kept in the cell's metadata, which this reads back."""
    kept = (cell.get("metadata") or {}).get(ANSWER_KEY)
    if not isinstance(kept, dict) or not isinstance(kept.get("source"), str):
        return cell
    attachments = kept.get("attachments")
    return {**cell, "source": kept["source"], "cell_type": kept.get("cell_type", "markdown"),
            "attachment_count": attachments if isinstance(attachments, int) and attachments >= 0 else 0}


def _is_blank(cell: dict, text: str) -> bool:
    """Unchanged from the release: nothing but the stub, or empty (the grader's rule,
    ``is_blank_answer``), or nbgrader's own rule (the checksum it stored still matches)."""
    if is_blank_answer(text):
        return True
    checksum = (cell.get("metadata") or {}).get("nbgrader", {}).get("checksum")
    if not checksum:
        return False
    try:
        from nbformat import from_dict
        from nbgrader.utils import compute_checksum

        return compute_checksum(from_dict(cell)) == checksum
    except Exception:   # a cell nbgrader cannot checksum was edited by hand: it is not the stub
        return False


class AnswerIndex:
    """The answers of one lab's written questions, cached per notebook file until it changes."""

    def __init__(self, out_dir: Path, lab: str):
        self.out_dir, self.lab = Path(out_dir), lab
        self._cache: dict[tuple[str, str, str], tuple[tuple[int, int] | None, Answer]] = {}
        self._lock = threading.Lock()

    def students(self) -> list[str]:
        return students(self.out_dir, self.lab)

    def answers(self, notebook: str, grade_id: str) -> list[Answer]:
        """Every student's answer to one question, in student order."""
        return [self.answer(student, notebook, grade_id) for student in self.students()]

    def answer(self, student: str, notebook: str, grade_id: str) -> Answer:
        path = self.out_dir / "autograded" / student / self.lab / f"{notebook}.ipynb"
        try:
            stamp = path.stat()
            version = (stamp.st_mtime_ns, stamp.st_size)
        except OSError:
            version = None
        key = (student, notebook, grade_id)
        with self._lock:
            cached = self._cache.get(key)
        if cached and cached[0] == version:
            return cached[1]
        answer = read_answer(self.out_dir, self.lab, student, notebook, grade_id)
        with self._lock:
            self._cache[key] = (version, answer)
        return answer
