"""Helpers for writing nbgrader *source* notebooks (solutions/<lab>/<chapter>.ipynb) from Python.

The .ipynb in solutions/ is the source of truth; these helpers only make new cells carry the
right nbgrader metadata:

- ``markdown(text)``: read-only explanation.
- ``code(source)``: ordinary code the student runs (imports, plots, worked examples).
- ``answer(grade_id, source)``: an answer cell; its source holds ``### BEGIN SOLUTION`` /
  ``### END SOLUTION`` around the reference answer, which the release replaces with a stub.
- ``tests(grade_id, points, source, needs_gpu=False)``: a locked, graded test cell; a ``### BEGIN
  HIDDEN TESTS`` / ``### END HIDDEN TESTS`` region in it is removed from the release and from
  feedback. ``needs_gpu=True`` records in the cell's metadata (``course.needs_gpu``) that it can
  only run on a CUDA GPU: the grader skips it on a CPU and leaves its points out of max_score.
- ``check_yourself(question, answer_text)``: a question whose answer is folded away.
- ``written_question(grade_id, points, prompt, model_answer)``: a question answered in words and
  graded by a TA with a rubric (``autograde/knowledge/<lab>.toml``, ``course mark``): a locked prompt
  cell, then nbgrader's "manually graded answer" cell (``solution`` and ``grade`` set, with points),
  whose source in solutions/ is the model answer; the release replaces it by "YOUR ANSWER HERE".
"""

from __future__ import annotations

from textwrap import dedent

import nbformat

SCHEMA_VERSION = 3
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _clean(source: str) -> str:
    return dedent(source).strip("\n")


def _meta(grade_id: str | None = None, *, grade=False, solution=False, locked=False, points=None,
          task=False) -> dict:
    meta = {"grade": grade, "locked": locked, "schema_version": SCHEMA_VERSION, "solution": solution,
            "task": task}
    if grade_id is not None:
        meta["grade_id"] = grade_id
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def markdown(text: str, grade_id: str | None = None):
    """A read-only markdown cell (locked when it has a grade_id)."""
    cell = nbformat.v4.new_markdown_cell(_clean(text))
    if grade_id:
        cell.metadata.update(_meta(grade_id, locked=True))
    return cell


def code(source: str, grade_id: str | None = None):
    """An ordinary code cell (locked when it has a grade_id)."""
    cell = nbformat.v4.new_code_cell(_clean(source))
    if grade_id:
        cell.metadata.update(_meta(grade_id, locked=True))
    return cell


def answer(grade_id: str, source: str):
    """An autograded answer cell; ``source`` must contain the BEGIN/END SOLUTION markers."""
    text = _clean(source)
    if "### BEGIN SOLUTION" not in text or "### END SOLUTION" not in text:
        raise ValueError(f"answer cell {grade_id!r} needs ### BEGIN SOLUTION / ### END SOLUTION markers")
    cell = nbformat.v4.new_code_cell(text)
    cell.metadata.update(_meta(grade_id, solution=True))
    return cell


def tests(grade_id: str, points: float, source: str, *, needs_gpu: bool = False):
    """A locked, graded test cell worth ``points`` (GPU-only when ``needs_gpu``)."""
    if points <= 0:
        raise ValueError(f"test cell {grade_id!r}: points must be > 0, got {points}")
    cell = nbformat.v4.new_code_cell(_clean(source))
    cell.metadata.update(_meta(grade_id, grade=True, locked=True, points=points))
    if needs_gpu:
        cell.metadata["course"] = {"needs_gpu": True}
    return cell


def check_yourself(question: str, answer_text: str):
    """A "check yourself" question whose answer stays folded until the student opens it."""
    body = (
        f"**Check yourself.** {_clean(question)}\n\n"
        f"<details><summary>Show the answer</summary>\n\n{_clean(answer_text)}\n\n</details>"
    )
    return nbformat.v4.new_markdown_cell(body)


def written_question(grade_id: str, points: float, prompt: str, model_answer: str) -> list:
    """A written question's two cells: the locked prompt (grade_id ``<grade_id>_prompt``), then the
    answer cell a TA grades, worth ``points``, holding ``model_answer`` (solutions/ only: nbgrader's
    release replaces a written solution cell by its text stub)."""
    if points <= 0:
        raise ValueError(f"written question {grade_id!r}: points must be > 0, got {points}")
    if not _clean(model_answer):
        raise ValueError(f"written question {grade_id!r}: the model answer is empty")
    prompt_cell = markdown(f"**Written question ({points:g} points, graded by your TA).** {_clean(prompt)}",
                           grade_id=f"{grade_id}_prompt")
    answer_cell = nbformat.v4.new_markdown_cell(_clean(model_answer))
    answer_cell.metadata.update(_meta(grade_id, grade=True, solution=True, points=points))
    return [prompt_cell, answer_cell]


def notebook(cells, *, title: str | None = None):
    """A v4 notebook with the course's kernelspec."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    if title:
        nb.metadata["title"] = title
    nb.cells = list(cells)
    return nb


def points_summary(nb) -> str:
    """What a chapter's first cell announces about its points: "**15 points** in 7 graded test cells",
    with the GPU-only cell and the written answers when there are some: "**20 points**: 15 in 7 graded
    test cells (one of them, 2 points, needs a GPU and is skipped on a CPU) and 5 in a written answer
    graded by your TA". Tests check every header against it."""
    from course_lib.handin.notebooks import autograded_cells, written_cells

    tests_ = autograded_cells(nb)
    written = written_cells(nb)
    auto = sum(float(cell.metadata["nbgrader"].get("points", 0)) for cell in tests_)
    gpu = [cell for cell in tests_ if cell.metadata.get("course", {}).get("needs_gpu")]
    gpu_text = ""
    if gpu:
        gpu_points = sum(float(cell.metadata["nbgrader"]["points"]) for cell in gpu)
        which = "one of them" if len(gpu) == 1 else f"{len(gpu)} of them"
        gpu_text = f" ({which}, {gpu_points:g} points, need{'s' if len(gpu) == 1 else ''} a GPU and " \
                   f"{'is' if len(gpu) == 1 else 'are'} skipped on a CPU)"
    if not written:
        return f"**{auto:g} points** in {len(tests_)} graded test cells{gpu_text}"
    ta = sum(float(cell.metadata["nbgrader"].get("points", 0)) for cell in written)
    answers = "a written answer" if len(written) == 1 else f"{len(written)} written answers"
    return (f"**{auto + ta:g} points**: {auto:g} in {len(tests_)} graded test cells{gpu_text} and {ta:g} in "
            f"{answers} graded by your TA")


def total_points(nb) -> float:
    """Sum of the points of a notebook's graded cells (what the header should announce)."""
    return sum(
        float(cell.metadata.get("nbgrader", {}).get("points", 0))
        for cell in nb.cells
        if cell.metadata.get("nbgrader", {}).get("grade")
    )
