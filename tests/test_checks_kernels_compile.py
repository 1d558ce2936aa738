"""Lab 0.3's compile check (course_lib.checks.kernels_compile): the reference answers' kernels compile for an
H100 and fit it; the demo students built to fail it do, for the reason their spec gives; and when grading
the check compiles the source of the cells the grader sent, in the grader's sandbox, whatever the objects
in the student's kernel say.
"""

from __future__ import annotations

import pytest

from course_lib.checks import CheckFailed
from course_lib.checks import kernels_compile as checks
from course_lib.checks.graded_sources import GradedSources, graded_sources
from course_lib.kernels.gpu_compile import local_worker
from tests.kernel_notebooks import SOLUTIONS, demo_answers, student
from tests.notebook_answers import answer_sources

CHAPTER_KERNELS = {
    "01_triton_basics": ("add_kernel", "softmax_kernel"),
    "02_fused_rmsnorm": ("fused_add_rmsnorm_kernel",),
    "03_paged_decode": ("paged_decode_kernel",),
    "04_split_kv": ("merge_splits_kernel", "split_kv_kernel", "store_kv_kernel"),
}


def test_every_kernel_the_lab_asks_for_has_a_compile_check_cell_worth_a_point():
    import nbformat

    from course_lib.handin.notebooks import nbgrader_meta

    for chapter, kernels in CHAPTER_KERNELS.items():
        cells = nbformat.read(SOLUTIONS / f"{chapter}.ipynb", as_version=4).cells
        compile_cells = {nbgrader_meta(cell)["grade_id"]: cell for cell in cells
                         if "check_compiles_for_gpu" in cell.source and nbgrader_meta(cell).get("grade")}
        assert set(compile_cells) == {f"test_{kernel}_compiles" for kernel in kernels}, chapter
        for kernel in kernels:
            cell = compile_cells[f"test_{kernel}_compiles"]
            assert nbgrader_meta(cell)["points"] == 1 and "HIDDEN" not in cell.source
            assert f'check_compiles_for_gpu("{kernel}", {kernel}, {checks.EXERCISES[kernel].wrapper})' in cell.source


@pytest.mark.parametrize("chapter", CHAPTER_KERNELS)
def test_the_reference_answers_compile_for_an_h100(chapter, capsys):
    namespace = student(chapter)
    for kernel in CHAPTER_KERNELS[chapter]:
        checks.check_compiles_for_gpu(kernel, namespace[kernel], namespace[checks.EXERCISES[kernel].wrapper])
        printed = capsys.readouterr().out
        assert f"{kernel} compiles for an H100 (sm_90): yes" in printed
        assert printed.count("registers/thread") == len(checks.EXERCISES[kernel].configurations)


def _demo(name: str, chapter: str) -> dict[str, str]:
    """The demo student's answers for ``chapter``, keyed by grade_id."""
    return {key.split("/")[-1]: source for key, source in demo_answers(name).items() if key.startswith(chapter)}


def test_a_global_the_interpreter_accepts_does_not_compile():
    namespace = student("01_triton_basics", _demo("buggy-add-global-block", "01_triton_basics"))
    with pytest.raises(CheckFailed) as failed:
        checks.check_compiles_for_gpu("add_kernel", namespace["add_kernel"], namespace["vector_add"])
    message = str(failed.value)
    assert message.startswith("add_kernel compiles for an H100: no (for float32, BLOCK=1024, sm_90:")
    assert "Cannot access global variable BLOCK_SIZE" in message and "tl.constexpr" in message


def test_a_pipeline_deeper_than_the_h100s_shared_memory_does_not_fit():
    namespace = student("03_paged_decode", _demo("buggy-decode-pipeline-too-deep", "03_paged_decode"))
    with pytest.raises(CheckFailed) as failed:
        checks.check_compiles_for_gpu("paged_decode_kernel", namespace["paged_decode_kernel"],
                                      namespace["paged_decode_attention"])
    message = str(failed.value)
    assert "paged_decode_kernel compiles for an H100: yes, but does not fit it" in message
    assert "bytes of shared memory per program; the H100 has 232,448 (227 KB) per block" in message


def _graded_cells(chapter: str, answers: dict[str, str]) -> tuple[str, ...]:
    """The answer cells a grader would have sent for a student with these answers (keys: grade ids)."""
    sources = answer_sources(SOLUTIONS / f"{chapter}.ipynb")
    return tuple(answers.get(grade_id, source) for grade_id, source in sources.items())


def test_when_grading_the_cells_sent_are_compiled_not_the_objects_in_the_kernel():
    """A correct object in hand, the handed-in cell's kernel compiled: the grader's text decides."""
    correct = student("01_triton_basics")
    cells = _graded_cells("01_triton_basics", _demo("buggy-add-global-block", "01_triton_basics"))
    with graded_sources(GradedSources(cells, local_worker)):
        with pytest.raises(CheckFailed, match="Cannot access global variable BLOCK_SIZE"):
            checks.check_compiles_for_gpu("add_kernel", correct["add_kernel"], correct["vector_add"])
    renamed = cells + ("def vector_add(x, y):\n    out = torch.empty_like(x)\n"
                       "    other_kernel[(1,)](x, y, out, x.numel(), BLOCK=1024)\n    return out\n",)
    with graded_sources(GradedSources(renamed, local_worker)):
        with pytest.raises(CheckFailed, match="vector_add does not launch add_kernel .it launches other_kernel."):
            checks.check_compiles_for_gpu("add_kernel", correct["add_kernel"], correct["vector_add"])
    rebound = _graded_cells("01_triton_basics", {}) + ("add_kernel = vector_add\n",)
    with graded_sources(GradedSources(rebound, local_worker)):
        with pytest.raises(CheckFailed, match="bound last by something else"):
            checks.check_compiles_for_gpu("add_kernel", correct["add_kernel"], correct["vector_add"])


def test_the_release_s_placeholder_is_not_attempted_rather_than_failed():
    """A blank notebook's compile cells say "not written yet", as its other cells do (and score nothing)."""
    import json

    from tests.kernel_notebooks import ROOT

    cells = json.loads((ROOT / "labs" / "lab03-kernels" / "01_triton_basics.ipynb").read_text())["cells"]
    sources = tuple("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"
                    and not cell.get("metadata", {}).get("nbgrader", {}).get("grade"))
    correct = student("01_triton_basics")
    with graded_sources(GradedSources(sources, local_worker)):
        with pytest.raises(NotImplementedError, match="add_kernel is not written yet"):
            checks.check_compiles_for_gpu("add_kernel", correct["add_kernel"], correct["vector_add"])


def test_parameters_other_than_the_lab_s_are_named():
    cells = _graded_cells("01_triton_basics", {}) + (
        "@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, EXTRA: tl.constexpr):\n"
        "    pass\n",)
    correct = student("01_triton_basics")
    with graded_sources(GradedSources(cells, local_worker)):
        with pytest.raises(CheckFailed, match="its parameters are not the lab's") as failed:
            checks.check_compiles_for_gpu("add_kernel", correct["add_kernel"], correct["vector_add"])
    assert "EXTRA" in str(failed.value)


def test_the_grader_compiles_in_its_sandbox(tmp_path):
    """The worker the grader starts: sandboxed where the machine offers one, and it still compiles."""
    from autograde.kernel_compile import compile_uid, sandboxed_worker
    from course_lib.runner.sandbox import KERNEL_UID_BASE, NONE, SEED_INSIDE, detect_isolation, kernel_uid

    start = sandboxed_worker([tmp_path])
    command = start(tmp_path)
    if detect_isolation().name != NONE:
        assert str(SEED_INSIDE / "compile_worker.py") in command.argv
        assert command.env["TRITON_CACHE_DIR"] == "/tmp/triton-cache"   # the sandbox's private /tmp
    assert compile_uid(0) >= KERNEL_UID_BASE + (1 << 29) > kernel_uid(63)
    correct = student("01_triton_basics")
    with graded_sources(GradedSources(_graded_cells("01_triton_basics", {}), start)):
        checks.check_compiles_for_gpu("add_kernel", correct["add_kernel"], correct["vector_add"])
