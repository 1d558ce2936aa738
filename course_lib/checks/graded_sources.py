"""What the grader knows of a submission while one of its test cells runs: the code cells it sent to the
student's kernel, in order, and how it starts a compile worker (in its sandbox).

A check that must read the student's code rather than call it (Lab 0.3's compile check,
``course_lib.checks.kernels_compile``) takes the text from here when grading: the grader's own copy
of what it sent, which nothing the student's code does can change. Outside grading (a notebook, ``course
check``) there is none, and the check reads the student's objects, which are the student's own.
This module imports nothing heavy: the grader imports it for every lab.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["GradedSources", "current", "graded_sources"]


@dataclass(frozen=True)
class GradedSources:
    """The code cells sent to the student's kernel before this test cell, and the grader's compile worker
    (``start_worker(folder) -> course_lib.kernels.gpu_compile.WorkerCommand``)."""

    cells: tuple[str, ...]
    start_worker: Callable[[Path], Any]


_GRADED: ContextVar[GradedSources | None] = ContextVar("course_graded_sources", default=None)


def current() -> GradedSources | None:
    """The grader's sources while a test cell is graded; None otherwise."""
    return _GRADED.get()


@contextmanager
def graded_sources(sources: GradedSources) -> Iterator[None]:
    """Set by the grader around a test cell (``autograde.execute``)."""
    token = _GRADED.set(sources)
    try:
        yield
    finally:
        _GRADED.reset(token)
