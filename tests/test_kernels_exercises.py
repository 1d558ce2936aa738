"""Every Lab 0.3 exercise marker in course_lib names a notebook and an answer cell that exist, every
answer cell of the lab is answered by some marked reference, and kernels are marked together with
the Python wrappers that launch them."""

from __future__ import annotations

import importlib
from pathlib import Path

import nbformat

from course_lib.exercises import exercise_of
from course_lib.handin.notebooks import nbgrader_meta

ROOT = Path(__file__).resolve().parent.parent
LAB = "lab03-kernels"
MODULES = ["course_lib.kernels.vector_add", "course_lib.kernels.softmax", "course_lib.kernels.rmsnorm",
           "course_lib.kernels.paged_attention", "course_lib.kernels.timing"]


def _markers():
    found = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            marker = exercise_of(value)
            if marker is not None:
                found[f"{name}.{attribute}"] = marker
    return found


def _answer_cells():
    cells = {}
    for path in sorted((ROOT / "solutions" / LAB).glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        cells[path.stem] = {nbgrader_meta(c)["grade_id"] for c in notebook.cells if nbgrader_meta(c).get("solution") and c.cell_type == "code"}
    return cells


def test_markers_point_at_existing_answer_cells():
    cells = _answer_cells()
    markers = _markers()
    assert markers, "no marked references found"
    for name, marker in markers.items():
        assert marker.lab == LAB, name
        assert marker.answer in cells.get(marker.notebook, set()), f"{name} -> {marker} names no answer cell"


def test_every_kernel_exercise_has_a_reference():
    answered = {(marker.notebook, marker.answer) for marker in _markers().values()}
    # chapter 5 imports chapter 4's answers; its backend class is platform glue
    not_in_library = {("05_into_the_engine", "KernelBackend")}
    for notebook, answers in _answer_cells().items():
        for answer in answers:
            assert (notebook, answer) in answered | not_in_library, f"{notebook}/{answer} has no marked reference"


def test_kernels_are_marked_with_their_wrappers():
    from course_lib.kernels import paged_attention, rmsnorm, softmax, vector_add

    pairs = [(vector_add._add_kernel, vector_add.vector_add), (softmax._softmax_kernel, softmax.softmax),
             (rmsnorm._fused_add_rmsnorm_kernel, rmsnorm.fused_add_rmsnorm),
             (paged_attention._paged_decode_kernel, paged_attention.paged_decode_attention),
             (paged_attention._merge_splits_kernel, paged_attention.merge_splits),
             (paged_attention._store_kv_kernel, paged_attention.store_kv)]
    for kernel, wrapper in pairs:
        assert exercise_of(kernel) == exercise_of(wrapper) is not None
