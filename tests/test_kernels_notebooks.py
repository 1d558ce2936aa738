"""Lab 0.3's notebooks say what they do: headers that count their graded cells, plots that render,
worked examples that show what the text says they show, and no chapter that repeats another's answers.

Each test runs only the cells it needs (the kernels under Triton's interpreter, small shapes).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib.handin.notebooks import nbgrader_meta
from tests.kernel_notebooks import replace_in_answer, run_source

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions" / "lab03-kernels"
NOTEBOOKS = sorted(SOLUTIONS.glob("*.ipynb"))


def _notebook(stem: str):
    return nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4)


def _cell(notebook, text: str) -> str:
    """The source of the one code cell that contains ``text``."""
    sources = [cell.source for cell in notebook.cells if cell.cell_type == "code" and text in cell.source]
    assert len(sources) == 1, f"{len(sources)} code cells contain {text!r}"
    return sources[0]


def _without_magics(source: str) -> str:
    return "\n".join("" if line.startswith("%") else line for line in source.splitlines())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_header_counts_the_graded_cells_and_the_gpu_one(path):
    notebook = nbformat.read(path, as_version=4)
    graded = [cell for cell in notebook.cells if nbgrader_meta(cell).get("grade") and cell.cell_type == "code"]
    header = notebook.cells[0].source
    announced = re.search(r"in (\d+) graded test cells", header)
    assert announced and int(announced.group(1)) == len(graded), \
        f"{path.name}: the header announces {announced and announced.group(1)} graded test cells, there are {len(graded)}"
    gpu = [cell for cell in graded if cell.metadata.get("course", {}).get("needs_gpu")]
    if gpu:
        points = sum(float(nbgrader_meta(cell)["points"]) for cell in gpu)
        assert f"one of them, {points:g} points, needs a GPU" in header and len(gpu) == 1, path.name
    else:
        assert "needs a GPU" not in header, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_that_draws_figures_renders_them_inline(path):
    """A matplotlib Figure (not pyplot) shows as an image only once %matplotlib inline has run."""
    notebook = nbformat.read(path, as_version=4)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    draws = any(re.search(r"\bFigure\(|roofline_figure\(", source) for source in code)
    if draws:
        assert code[0].startswith("%matplotlib inline"), f"{path.name} draws figures: its first cell needs it"


def test_chapter_5_imports_chapter_4s_kernels_instead_of_pasting_them():
    notebook = _notebook("05_into_the_engine")
    answers = [cell.source for cell in notebook.cells if nbgrader_meta(cell).get("solution")]
    assert not any("@triton.jit" in source for source in answers), "chapter 5 must not hold a copy of a kernel"
    assert 'answers_from("04_split_kv")' in _cell(notebook, "answers_from(")


def test_chapter_1s_worked_example_is_not_the_exercise_renamed():
    """The worked example may not be the answer to vector_add (the kit's leak scan says why)."""
    notebook = _notebook("01_triton_basics")
    example = _cell(notebook, "def flip_kernel(")
    assert "tl.load(x_ptr + offsets" not in example and "x + y" not in example


def test_chapter_2_places_the_h100_at_bf16_intensities(monkeypatch):
    """Each roofline panel places the intensities of the dtype it is drawn for: fp32 measured here, bf16 on the H100."""
    from course_lib import roofline
    from course_lib.viz import roofline_plots

    notebook = _notebook("02_fused_rmsnorm")
    drawn = []
    monkeypatch.setattr(roofline_plots, "roofline_figure", lambda machines, points, measured=None: drawn.append(
        (machines, points)))
    monkeypatch.setattr(roofline, "measure_machine", lambda name: roofline.Machine(name, 1e11, 1e10))
    namespace = {"display": lambda figure: None}
    run_source(_without_magics(notebook.cells[1].source), "02 imports", namespace)
    for text in ("def add_rmsnorm_traffic(", "T, H = 4096, 4096", "flops = add_rmsnorm_flops(T, H)",
                 "machine = roofline.measure_machine"):
        run_source(_cell(notebook, text), f"02 {text}", namespace)
    (cpu, cpu_points), (gpu, gpu_points) = drawn
    assert cpu[0].name == "this machine" and gpu == [roofline.H100_SXM] and "BF16" in gpu[0].name
    assert all("fp32" in label for label in cpu_points) and all("bf16" in label for label in gpu_points)
    for fp32, bf16 in zip(cpu_points.values(), gpu_points.values()):
        assert bf16 == pytest.approx(2 * fp32, rel=1e-3), "half the bytes per element: twice the intensity"


def test_chapter_3s_small_pool_shows_a_kernel_that_reads_empty_slots():
    notebook = _notebook("03_paged_decode")
    namespace: dict = {}
    run_source(_without_magics(notebook.cells[1].source), "03 imports", namespace)
    for text in ("owner = [[", "def attend_one_program("):
        run_source(_cell(notebook, text), f"03 {text}", namespace)
    bad = replace_in_answer("03_paged_decode", "paged_decode_attention", "mask=is_token[:, None], other=0.0)",
                            "mask=None)")
    args = [namespace[name] for name in ("q", "k_cache", "v_cache", "block_tables", "seq_lens", "scale")]
    assert torch.isnan(namespace["k_cache"]).any(), "the example pool's empty slots hold NaN"
    assert not torch.allclose(bad["paged_decode_attention"](*args), namespace["reference"], atol=1e-5)


def test_chapter_4s_rule_picks_what_its_cost_model_finds_fastest():
    from course_lib.kernels.paged_attention import choose_num_splits

    notebook = _notebook("04_split_kv")
    namespace: dict = {"Figure": __import__("matplotlib.figure", fromlist=["Figure"]).Figure}
    run_source(_cell(notebook, "def modelled_time("), "04 model", namespace)
    for num_seqs in (1, 8, 64, 256):
        times = {splits: namespace["modelled_time"](num_seqs, 8, 8192, splits) for splits in namespace["splits"]}
        assert choose_num_splits(num_seqs, 8, 8192, 132) == min(times, key=times.get), f"batch {num_seqs}"
