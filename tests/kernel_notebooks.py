"""Run a Lab 0.3 solution notebook's answers (Triton kernels included) outside Jupyter, for the checks' tests.

``@triton.jit`` reads a kernel's source with ``inspect``, which needs a file: the answers are
compiled under a made-up file name whose lines are registered in ``linecache``, exactly as
IPython does for notebook cells.
"""

from __future__ import annotations

import linecache
import runpy
from pathlib import Path

import pytest

import course_lib.kernels  # noqa: F401  (the interpreter must be on before any kernel is defined)

from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions" / "lab03-kernels"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab03-kernels"

PRELUDE = """
import math
import statistics
import time
import torch
import triton
import triton.language as tl
"""


def run_source(source: str, name: str, namespace: dict) -> None:
    """exec ``source`` into ``namespace`` with its lines visible to inspect (and so to @triton.jit)."""
    filename = f"<lab03 {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)


EARLIER_CHAPTERS = {"05_into_the_engine": "04_split_kv"}
"""A notebook whose answers use an earlier chapter's answers (imported with course_lib.chapters.answers_from)."""


def student(notebook: str, replacements: dict[str, str] | None = None, given: tuple[str, ...] = ()) -> dict:
    """The namespace a student with the reference answers of ``notebook`` (some replaced) would have.

    ``given`` names functions defined in the notebook's ordinary code cells that the answers use.
    Replacements keyed ``"<earlier notebook>/<grade_id>"`` replace an answer of the earlier chapter that
    ``notebook`` imports (chapter 5 runs chapter 4's kernels).
    """
    namespace: dict = {"__name__": "__main__"}
    run_source(PRELUDE, f"{notebook} prelude", namespace)
    earlier = EARLIER_CHAPTERS.get(notebook)
    if earlier is not None:
        prefix = f"{earlier}/"
        earlier_replacements = {key[len(prefix):]: source for key, source in (replacements or {}).items()
                                if key.startswith(prefix)}
        for grade_id, source in answer_sources(SOLUTIONS / f"{earlier}.ipynb").items():
            run_source(earlier_replacements.get(grade_id, source), f"{earlier} answer {grade_id}", namespace)
    if given:
        import nbformat

        cells = nbformat.read(SOLUTIONS / f"{notebook}.ipynb", as_version=4).cells
        for name in given:
            source = next(c.source for c in cells if c.cell_type == "code" and f"def {name}(" in c.source
                          and not c.metadata.get("nbgrader", {}).get("solution"))
            run_source(source, f"{notebook} given {name}", namespace)
    for grade_id, source in answer_sources(SOLUTIONS / f"{notebook}.ipynb").items():
        source = (replacements or {}).get(grade_id, source)
        run_source(source, f"{notebook} answer {grade_id}", namespace)
    return namespace


def demo_answers(name: str) -> dict[str, str]:
    """ANSWERS of the demo student ``autograde/demo/lab03-kernels/<name>.py``."""
    return runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"]


def replace_in_answer(notebook: str, grade_id: str, old: str, new: str) -> dict:
    """A student whose answer ``grade_id`` has ``old`` replaced by ``new`` (which must occur in it)."""
    source = answer_sources(SOLUTIONS / f"{notebook}.ipynb")[grade_id]
    assert old in source, f"{old!r} not in the reference answer {grade_id}"
    return student(notebook, {grade_id: source.replace(old, new)})


def fails(check, *args, words=(), **kwargs) -> str:
    """The CheckFailed message of ``check(*args, **kwargs)``, asserting it names each of ``words``."""
    from course_lib.checks import CheckFailed

    with pytest.raises(CheckFailed) as caught:
        check(*args, **kwargs)
    message = str(caught.value)
    for word in words:
        assert word in message, f"{word!r} not in the feedback:\n{message}"
    return message
