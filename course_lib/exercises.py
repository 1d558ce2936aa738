"""Which parts of the library answer which exercise, and which labs this copy of the library locks.

The course's reference implementations are the answers to the labs' exercises. They are marked
in the source with the ``exercise`` decorator, the single record of which code answers what::

    @exercise("lab01-text-to-tensors", "01_tokenization", "train_bpe")
    def train_bpe(text, vocab_size): ...

A marked function (or every method of a marked class) keeps its signature and docstring in the
*student edition* of the library that ``course kit`` builds, but its body becomes a stub that
raises ``NotImplementedError`` naming the lab, chapter and exercise where the student writes it,
until the lab is unlocked (past its due date). At run time the decorator only tags the object, so
the instructor edition runs the reference as written.

A student edition carries ``course_lib/_edition.json`` (``{"locked": [lab, ...]}``); the
instructor edition has none and locks nothing. Platform code asks ``is_locked(lab)`` where a
feature rests on a locked reference (the engine's prefix cache, say) and turns it off with a
message instead of failing deep inside a stub.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, TypeVar

__all__ = [
    "EDITION_FILE",
    "Exercise",
    "LabInfo",
    "LABS",
    "exercise",
    "exercise_of",
    "is_locked",
    "locked_labs",
    "lab_title",
    "stub_message",
    "unlock_hint",
]

EDITION_FILE = Path(__file__).with_name("_edition.json")
LAB_NAME = re.compile(r"^lab(\d)(\d)-[a-z0-9-]+$")
NOTEBOOK_NAME = re.compile(r"^\d\d_[a-z0-9_]+$")

Marked = TypeVar("Marked", bound=Callable)


@dataclass(frozen=True)
class LabInfo:
    """A lab as students know it: its number, title, and the labs whose references its notebooks run on.

    ``builds_on`` names earlier labs whose reference code this lab's notebooks need in order to run
    (the engine's allocator and scheduler, say). A kit that contains this lab must unlock them.
    """

    number: str
    title: str
    builds_on: tuple[str, ...] = ()
    why: str = ""


LABS: dict[str, LabInfo] = {
    "lab01-text-to-tensors": LabInfo("0.1", "From text to tensors"),
    "lab02-prefill-vs-decode": LabInfo(
        "0.2", "Prefill vs decode", ("lab01-text-to-tensors",),
        "its notebooks run SmolLM2 through the engine, whose tokenizer, block allocator, scheduler and "
        "sampler are the answers of Lab 0.1"),
    "lab03-kernels": LabInfo(
        "0.3", "Kernels", ("lab01-text-to-tensors", "lab02-prefill-vs-decode"),
        "its last chapter serves SmolLM2 through the engine (Lab 0.1) and compares with the attention of Lab 0.2"),
    "lab04-faster-decoding": LabInfo(
        "0.4", "Faster decoding", ("lab01-text-to-tensors", "lab02-prefill-vs-decode"),
        "its notebooks measure SmolLM2 in the engine (Lab 0.1) with chunked prefill and prefix caching (Lab 0.2)"),
    "lab05-serving": LabInfo(
        "0.5", "Serving", ("lab01-text-to-tensors", "lab02-prefill-vs-decode"),
        "its server runs the engine (Lab 0.1) with chunked prefill and prefix caching (Lab 0.2)"),
}
"""Every lab of the course. A lab folder under solutions/ must have an entry here (a test checks it)."""


@dataclass(frozen=True)
class Exercise:
    """Where a student writes the code that a marked reference holds."""

    lab: str
    notebook: str   # the chapter notebook's file stem, e.g. "01_tokenization"
    answer: str     # the answer cell's nbgrader grade_id, e.g. "train_bpe"

    @property
    def chapter(self) -> int:
        return int(self.notebook.split("_", 1)[0])

    def where(self) -> str:
        """E.g. "Lab 0.1 chapter 1 (labs/lab01-text-to-tensors/01_tokenization.ipynb, answer cell 'train_bpe')"."""
        return (f"{lab_title(self.lab)} chapter {self.chapter} "
                f"(labs/{self.lab}/{self.notebook}.ipynb, answer cell '{self.answer}')")


def lab_title(lab: str) -> str:
    """E.g. "Lab 0.1" for "lab01-text-to-tensors" (known labs), else the folder name."""
    info = LABS.get(lab)
    return f"Lab {info.number}" if info else lab


def exercise(lab: str, notebook: str, answer: str) -> Callable[[Marked], Marked]:
    """Mark a function or class as the reference answer of one exercise (see the module docstring).

    Args:
        lab: the lab folder name, e.g. "lab01-text-to-tensors".
        notebook: the chapter notebook's file stem, e.g. "01_tokenization".
        answer: the grade_id of the notebook's answer cell, e.g. "train_bpe".
    """
    if not LAB_NAME.match(lab):
        raise ValueError(f"lab must be a lab folder name like 'lab01-text-to-tensors', got {lab!r}")
    if not NOTEBOOK_NAME.match(notebook):
        raise ValueError(f"notebook must be a chapter notebook stem like '01_tokenization', got {notebook!r}")
    if not answer or not isinstance(answer, str):
        raise ValueError(f"answer must be the answer cell's grade_id, got {answer!r}")
    marker = Exercise(lab, notebook, answer)

    def mark(obj: Marked) -> Marked:
        obj.__course_exercise__ = marker
        return obj

    return mark


def exercise_of(obj: object) -> Exercise | None:
    """The exercise whose reference ``obj`` is (for a method: its function's or its class's), or None."""
    marker = getattr(obj, "__course_exercise__", None)
    return marker if isinstance(marker, Exercise) else None


@lru_cache(maxsize=1)
def locked_labs() -> frozenset[str]:
    """Labs whose references this copy of the library replaces with stubs (none in the instructor edition)."""
    if not EDITION_FILE.is_file():
        return frozenset()
    data = json.loads(EDITION_FILE.read_text(encoding="utf-8"))
    return frozenset(data.get("locked", []))


def is_student_edition() -> bool:
    """True in the library a student kit ships (and a grading kernel imports)."""
    return EDITION_FILE.is_file()


def is_locked(lab: str) -> bool:
    """Whether ``lab``'s reference answers are stubs in this copy of the library."""
    return lab in locked_labs()


def unlock_hint(lab: str) -> str:
    """What to tell someone who needs a locked lab's reference."""
    return (f"the course's version ships once {lab_title(lab)} is past due (an instructor builds the kit with "
            f"`course kit --unlock {lab}`)")


def stub_message(qualname: str, marker: Exercise) -> str:
    """The NotImplementedError message of a stub in the student edition."""
    return (f"{qualname} is your exercise in {marker.where()}: write it there and pass your version in; "
            f"{unlock_hint(marker.lab)}.")
