"""Your answers from an earlier chapter, used in a later one without pasting them again.

A later chapter often runs what you wrote in an earlier one: Lab 0.5's load generator from
chapter 2 drives the experiments of chapters 3 to 5. Instead of pasting that code into every later
notebook (where a fix made in one copy never reaches the others), a notebook imports it from the
earlier notebook's saved file::

    from course_lib.chapters import answers_from

    chapter2 = answers_from("02_load")          # reads 02_load.ipynb next to this notebook
    times = chapter2.poisson_arrival_times(2.0, 10.0, seed=0)

``answers_from`` runs the earlier notebook's import lines and then its answer cells (the cells you
write in, in order) in a fresh module, and returns that module. Nothing else of that notebook runs:
no worked example, no experiment, no test. It reads the file as last saved, so save the earlier
notebook after a fix; the next run of the later notebook picks the fix up.

The same happens when your work is graded: the grader runs each notebook in the folder of your
handed-in notebooks, so a later chapter reads the earlier notebook you handed in.
"""

from __future__ import annotations

import ast
import json
import linecache
import sys
import types
from pathlib import Path

__all__ = ["ChapterNotFound", "answers_from"]


class ChapterNotFound(FileNotFoundError):
    """The earlier chapter's notebook is not in this notebook's folder."""


def _notebook_path(chapter: str, folder: Path) -> Path:
    if not isinstance(chapter, str) or not chapter.strip() or "/" in chapter or "\\" in chapter:
        raise ValueError(f"chapter must be the file name of a notebook in this folder, like '02_load' "
                         f"(or '02_load.ipynb'), got {chapter!r}")
    name = chapter if chapter.endswith(".ipynb") else f"{chapter}.ipynb"
    path = folder / name
    if not path.is_file():
        present = ", ".join(sorted(p.stem for p in folder.glob("*.ipynb"))) or "none"
        raise ChapterNotFound(
            f"answers_from({chapter!r}): there is no {name} in {folder} (notebooks there: {present}). Your answers "
            f"are read from the earlier chapter's saved notebook, which must sit in the same folder as this one "
            f"(and be handed in with it).")
    return path


def _code_cells(path: Path) -> list[dict]:
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"answers_from: {path.name} is not a readable notebook ({error}); open it in JupyterLab "
                         f"and save it again") from None
    return [cell for cell in notebook.get("cells", []) if cell.get("cell_type") == "code"]


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _is_answer_cell(cell: dict) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("solution")) and not meta.get("grade")


def _without_magics(source: str) -> str:
    """IPython's `%magic` and `!shell` lines become blank lines (plain Python cannot run them)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _import_lines(cells: list[dict]) -> str:
    """The top-level import statements of the notebook's other code cells, in order."""
    statements = []
    for cell in cells:
        if _is_answer_cell(cell) or cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        try:
            tree = ast.parse(_without_magics(_source(cell)))
        except SyntaxError:
            continue
        statements += [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return "\n".join(dict.fromkeys(statements))


def _run(module: types.ModuleType, source: str, filename: str) -> None:
    # Registered with linecache so tracebacks show the lines and inspect.getsource works on what the
    # cell defines (a function shipped to another process by its source needs that).
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), module.__dict__)


def answers_from(chapter: str, *, folder: str | Path | None = None) -> types.ModuleType:
    """The answer cells of an earlier chapter's saved notebook, run in a fresh module.

    Args:
        chapter: the notebook's file name in this folder, e.g. "02_load" or "02_load.ipynb".
        folder: where the notebooks are (default: the folder the kernel runs in, which is the
            notebook's own folder in JupyterLab, in `course check` and when graded).

    Returns:
        A module whose attributes are what the answer cells define (functions, classes, constants).

    Raises:
        ChapterNotFound: the notebook is not there.
        ValueError: the file is not a notebook, or it has no answer cells.
        Exception: whatever an answer cell raises while it runs, with the cell named in the traceback.
    """
    path = _notebook_path(chapter, Path(folder) if folder is not None else Path.cwd())
    cells = _code_cells(path)
    answers = [cell for cell in cells if _is_answer_cell(cell)]
    if not answers:
        raise ValueError(f"answers_from: {path.name} has no answer cells (is it a notebook of this lab?)")
    module = types.ModuleType(f"answers_from_{path.stem}",
                              f"Your answer cells of {path.name}, as saved at the time of the call.")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # so pickle and inspect can find what it defines
    _run(module, _import_lines(cells), f"<{path.name}: imports>")
    for number, cell in enumerate(answers, 1):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", f"answer {number}")
        _run(module, _without_magics(_source(cell)), f"<{path.name}: answer cell '{grade_id}'>")
    return module
