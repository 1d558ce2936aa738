"""Finding a model answer, or a rubric's wording, where students can read it.

The kit's leak scan (``autograde.kit.find_leaks``) fingerprints *code*: windows of significant lines
with names taken out. Written answers are prose, so they get a fingerprint of their own: every
window of ``WINDOW_WORDS`` consecutive words, lower-cased, with punctuation, Markdown and HTML markup
dropped, so re-wrapping, re-casing or escaping a paragraph (``&lt;``, ``**bold**``) does not hide it.

What counts as an answer: a question's model answer, its criteria and partial-credit texts, and its
notes for TAs. What does not: a window that students are given anyway, that is one that also occurs
in the question's own prompt or in the ``given`` text (``given_text``: the chapters' cells but the
written answers; a model answer that repeats a sentence of the chapter gives nothing away; the same
rule as the kit's gift rule).

Where it must find nothing: a kit (every file: ``course kit`` refuses one), the release (``labs/``),
and the feedback pages of a lab whose TA marks the instructor has not released (``course mark
--release``): there a student's own answer is given too, since it is theirs. Once marks are
released, feedback shows the rubric items ticked and the TA's comment on purpose.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autograde.knowledge.questions import LabQuestions

WINDOW_WORDS = 12         # twelve words in a row: a sentence copied, not a phrase of the trade
WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")   # letters and digits, apostrophes inside a word
TAG = re.compile(r"<[^>]{0,2000}>")
BINARY_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".gguf", ".zip", ".pyc", ".db", ".so", ".whl", ".pdf"}


@dataclass(frozen=True)
class AnswerLeak:
    path: str        # relative to the scanned folder
    where: str       # "cell 12 (markdown)", "line 40"
    origin: str      # "lab02-prefill-vs-decode 03_decode/written_decode_memory_bound: model answer"

    def __str__(self) -> str:
        return f"{self.path}: {self.where}: holds the wording of {self.origin}"


def words(text: str) -> list[str]:
    """The words of ``text``: HTML tags and entities resolved away, lower case, no punctuation."""
    return [word.lower().replace("’", "'") for word in WORD.findall(html.unescape(TAG.sub(" ", text)))]


def windows(text: str) -> set[str]:
    """Every run of ``WINDOW_WORDS`` consecutive words of ``text``, joined by spaces."""
    found = words(text)
    return {" ".join(found[start:start + WINDOW_WORDS]) for start in range(len(found) - WINDOW_WORDS + 1)}


def answer_fingerprints(labs: Iterable[LabQuestions], given: set[str] = frozenset()) -> dict[str, str]:
    """window -> origin, for the text of every model answer, rubric and TA note that students must
    not see, leaving out what the prompt or the ``given`` text already shows them."""
    fingerprints: dict[str, str] = {}
    for lab in labs:
        for question in lab.questions:
            shown = windows(question.prompt) | given
            parts = [("model answer", question.model_answer), ("notes for TAs", question.notes)]
            for criterion in question.criteria:
                parts.append((f"criterion {criterion.id}", criterion.text))
                parts += [(f"criterion {criterion.id}, partial credit", credit.when) for credit in criterion.partial]
            for label, text in parts:
                for window in windows(text) - shown:
                    fingerprints.setdefault(window, f"{lab.lab} {question.key}: {label}")
    return fingerprints


def given_text(notebooks_dir: Path) -> set[str]:
    """The windows of every cell of every notebook under ``notebooks_dir`` (the release, ``labs/``, or the
    source, ``solutions/``) but its written answer cells: what the chapters themselves tell students. A
    model answer may repeat a sentence of its chapter (a "check yourself" answer) and give nothing away."""
    given: set[str] = set()
    for path in sorted(Path(notebooks_dir).rglob("*.ipynb")):
        for _, text in _notebook_parts(path, skip_written=True):
            given |= windows(text)
    return given


def find_answer_leaks(folder: Path, labs: Iterable[LabQuestions], *, given: set[str] = frozenset()) -> list[AnswerLeak]:
    """Places under ``folder`` (a kit, a release, unreleased feedback; or one file) holding answer or
    rubric text.

    Notebooks are read cell by cell (source and text outputs), HTML pages as text, any other text
    file line by line; a window may run across lines, but not across cells.
    """
    fingerprints = answer_fingerprints(labs, given)
    leaks: list[AnswerLeak] = []
    if not fingerprints:
        return leaks
    folder = Path(folder)
    paths = [folder] if folder.is_file() else sorted(folder.rglob("*"))
    for path in paths:
        if not path.is_file() or path.suffix.lower() in BINARY_SUFFIXES:
            continue
        relative = path.name if path == folder else str(path.relative_to(folder))
        for where, text in _parts(path):
            first: dict[str, int] = {}   # origin -> line of its first window here
            for window, line in _windows_by_line(text):
                if window in fingerprints:
                    first.setdefault(fingerprints[window], line)
            leaks += [AnswerLeak(relative, f"{where}, line {line}", origin) for origin, line in sorted(first.items())]
    return leaks


def _windows_by_line(text: str):
    """(window, line number of its first word) for every window of ``text``."""
    numbered = [(word, number) for number, line in enumerate(text.splitlines(), 1) for word in words(line)]
    for start in range(len(numbered) - WINDOW_WORDS + 1):
        yield " ".join(word for word, _ in numbered[start:start + WINDOW_WORDS]), numbered[start][1]


def _parts(path: Path):
    """(where, text) pieces of one file: a notebook's cells, or the whole text of another file."""
    if path.suffix == ".ipynb":
        yield from _notebook_parts(path)
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return
    yield "file", text


def _notebook_parts(path: Path, *, skip_written: bool = False):
    from course_lib.handin.notebooks import is_written_answer

    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (ValueError, OSError, AttributeError):
        return
    for index, cell in enumerate(cells if isinstance(cells, list) else []):
        if not isinstance(cell, dict) or (skip_written and is_written_answer(cell)):
            continue
        pieces = [_joined(cell.get("source", ""))]
        for output in cell.get("outputs", []) or []:
            if isinstance(output, dict):
                pieces.append(_joined(output.get("text", "")))
                for value in (output.get("data") or {}).values():
                    if isinstance(value, (str, list)):
                        pieces.append(_joined(value))
        yield f"cell {index} ({cell.get('cell_type', '?')})", "\n".join(pieces)


def _joined(value) -> str:
    return "".join(value) if isinstance(value, list) else value if isinstance(value, str) else ""


def unreleased_feedback_leaks(out_dir: Path, lab: str, labs: Iterable[LabQuestions], *,
                              given: set[str] = frozenset()) -> list[AnswerLeak]:
    """Places in the feedback pages of ``lab`` (``OUT/feedback/<student>/<lab>/``) holding answer or rubric
    text, for a lab whose marks are not released. A student's own notebook (``OUT/autograded/``) is given
    to them: an answer that happens to repeat the model answer is theirs to see."""
    leaks: list[AnswerLeak] = []
    labs = list(labs)
    for folder in sorted(Path(out_dir).glob(f"feedback/*/{lab}")):
        own: set[str] = set()
        for path in sorted((Path(out_dir) / "autograded" / folder.parent.name / lab).glob("*.ipynb")):
            for _, text in _notebook_parts(path):
                own |= windows(text)
        leaks += [AnswerLeak(f"{folder.parent.name}/{lab}/{leak.path}", leak.where, leak.origin)
                  for leak in find_answer_leaks(folder, labs, given=set(given) | own)]
    return leaks
