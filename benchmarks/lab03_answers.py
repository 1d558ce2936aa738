"""Lab 0.3's reference answers (the solution notebooks' answer cells), loaded for the GPU scripts.

The notebooks are read as JSON and only their answer cells run, after the imports those answers use
(``PRELUDE``): the GPU machine that runs ``benchmarks/gpu_check.sh`` has PyTorch, Triton, numpy and
pytest, not nbformat, matplotlib or the instructor's platform, which the notebooks' other cells
import. The answer cells keep their ``### BEGIN SOLUTION`` markers, which are comments; they run with
their lines registered in ``linecache`` (``@triton.jit`` reads a kernel's source, as in a notebook).
"""

from __future__ import annotations

import json
import linecache
import types
from pathlib import Path

import course_lib.kernels  # noqa: F401  (decides Triton's interpreter before any kernel is defined)

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions" / "lab03-kernels"
PRELUDE = "import math\nimport statistics\nimport time\nimport torch\nimport triton\nimport triton.language as tl\n"

__all__ = ["SOLUTIONS", "chapter", "solution_backend"]


def _answer_cells(path: Path) -> list[tuple[str, str]]:
    """(grade_id, source) of each answer cell, in order."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "code" and meta.get("solution") and not meta.get("grade"):
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            found.append((meta.get("grade_id", "answer"), source))
    return found


def _run(module: types.ModuleType, source: str, filename: str) -> None:
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), module.__dict__)


def chapter(name: str, given: dict[str, object] | None = None) -> types.ModuleType:
    """The answers of ``solutions/lab03-kernels/<name>.ipynb`` as a module (``vector_add``, ``KernelBackend``...);
    ``given`` are names the answers use that the notebook defines elsewhere."""
    module = types.ModuleType(f"lab03_{name}")
    _run(module, PRELUDE, f"<lab03 {name}: imports>")
    module.__dict__.update(given or {})
    for grade_id, source in _answer_cells(SOLUTIONS / f"{name}.ipynb"):
        _run(module, source, f"<lab03 {name}: answer cell '{grade_id}'>")
    return module


def solution_backend(num_splits: int | None = None):
    """Chapter 5's ``KernelBackend`` on chapter 4's kernels, as the notebook wires them (its cell
    ``chapter4 = answers_from("04_split_kv")``)."""
    chapter4 = chapter("04_split_kv")
    names = ("split_kv_decode_attention", "choose_num_splits", "store_kv")
    chapter5 = chapter("05_into_the_engine", {name: getattr(chapter4, name) for name in names})
    return chapter5.KernelBackend(num_splits)
