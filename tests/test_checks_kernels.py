"""The chapter 1-2 checks of Lab 0.3 (course_lib.checks.kernels) accept the reference answers of
solutions/lab03-kernels/01_triton_basics.ipynb and 02_fused_rmsnorm.ipynb and reject each demo
student's bug, and other classic ones, with feedback that names the mistake.

The answers run under Triton's interpreter (small shapes), with the course's bounds guard on.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import CheckFailed
from course_lib.checks import kernels as checks
from tests.kernel_notebooks import fails as _fails, demo_answers, replace_in_answer, student

BASICS = "01_triton_basics"
FUSED = "02_fused_rmsnorm"


@pytest.fixture(scope="module")
def basics():
    return student(BASICS)


@pytest.fixture(scope="module")
def fused():
    return student(FUSED)


# ---------------------------------------------------------------------------------------------
# Chapter 1
# ---------------------------------------------------------------------------------------------


def test_reference_answers_pass_chapter_1(basics):
    for n in (1, 1000, 1025, 4096):
        checks.check_vector_add(basics["vector_add"], n, seed=n)
    checks.check_vector_add(basics["vector_add"], 300, dtype=torch.float16)
    checks.check_softmax(basics["softmax"], 3, 100)
    checks.check_softmax(basics["softmax"], 2, 1, seed=1)
    checks.check_softmax(basics["softmax"], 4, 300, seed=2, scale=100.0)
    checks.check_softmax(basics["softmax"], 5, 70, seed=3, strided=True)
    checks.check_softmax(basics["softmax"], 2, 129, seed=4, dtype=torch.float16)


def test_vector_add_without_mask_is_stopped_by_the_guard():
    bad = student(BASICS, {"vector_add": demo_answers("buggy-add-no-mask")["01_triton_basics/vector_add"]})
    checks.check_vector_add(bad["vector_add"], 4096)  # a whole number of blocks: nothing hangs over
    _fails(checks.check_vector_add, bad["vector_add"], 1000, words=("OutOfBoundsAccess", "mask"))


def test_vector_add_with_too_few_programs_names_the_grid():
    bad = replace_in_answer(BASICS, "vector_add", "(triton.cdiv(n, block),)", "(n // block,)")
    _fails(checks.check_vector_add, bad["vector_add"], 1500, words=("cdiv", "the start is right"))


def test_torch_instead_of_a_kernel_is_refused():
    bad = student(BASICS, {"vector_add": "def vector_add(x, y):\n    return x + y\n"})
    _fails(checks.check_vector_add, bad["vector_add"], 100, words=("without launching a Triton kernel",))


def test_the_reference_kernel_is_refused():
    from course_lib.kernels.vector_add import vector_add

    _fails(checks.check_vector_add, vector_add, 100, words=("reference",))


def test_softmax_zero_padding_is_named():
    bad = student(BASICS, {"softmax": demo_answers("buggy-softmax-zero-padding")["01_triton_basics/softmax"]})
    checks.check_softmax(bad["softmax"], 4, 64)  # no padding lanes
    _fails(checks.check_softmax, bad["softmax"], 3, 100, words=("padded with zeros", "-inf"))


def test_softmax_without_the_max_overflows_on_large_rows():
    bad = student(BASICS, {"softmax": demo_answers("buggy-softmax-no-max")["01_triton_basics/softmax"]})
    checks.check_softmax(bad["softmax"], 3, 100)
    # the visible case of the chapter's test cell
    _fails(checks.check_softmax, bad["softmax"], 3, 100, scale=100.0, words=("NaN or inf", "max"))


def test_softmax_that_ignores_the_row_stride_is_told_about_views():
    bad = student(BASICS, {"softmax": demo_answers("buggy-softmax-ignores-row-stride")["01_triton_basics/softmax"]})
    checks.check_softmax(bad["softmax"], 3, 100)
    # the visible case of the chapter's test cell
    _fails(checks.check_softmax, bad["softmax"], 4, 50, strided=True, words=("contiguous x", "stride"))


# ---------------------------------------------------------------------------------------------
# Chapter 2
# ---------------------------------------------------------------------------------------------


def test_reference_answers_pass_chapter_2(fused):
    for shape in ((4, 8, 4), (64, 576, 2), (1, 1, 4), (100, 7, 0.5)):
        checks.check_add_rmsnorm_traffic(fused["add_rmsnorm_traffic"], *shape)
    checks.check_add_rmsnorm_traffic(fused["add_rmsnorm_traffic"], 3, 576, 4, measure=True)
    checks.check_add_rmsnorm_traffic(fused["add_rmsnorm_traffic"], 8192, 4096, 2, measure=True)
    checks.check_fused_add_rmsnorm(fused["fused_add_rmsnorm"], 3, 576)
    checks.check_fused_add_rmsnorm(fused["fused_add_rmsnorm"], 1, 1, seed=1)
    checks.check_fused_add_rmsnorm(fused["fused_add_rmsnorm"], 4, 100, seed=2, strided=True, eps=1e-2)
    checks.check_fused_add_rmsnorm(fused["fused_add_rmsnorm"], 2, 300, seed=3, dtype=torch.float16)
    checks.check_fused_add_rmsnorm(fused["fused_add_rmsnorm"], 2, 576, seed=4, dtype=torch.bfloat16, scale=50.0)


def test_the_traffic_rule_agrees_with_the_byte_counter():
    from course_lib.kernels.rmsnorm import add_rmsnorm_traffic

    for tokens, hidden in ((1, 1), (7, 13), (4096, 4096)):
        for dtype in (torch.float32, torch.bfloat16):
            measured = checks._measured_unfused_bytes(tokens, hidden, dtype)
            assert measured == add_rmsnorm_traffic(tokens, hidden, dtype.itemsize)[0]


def test_fused_count_with_one_write_is_named():
    bad = student(FUSED, {"add_rmsnorm_traffic":
                          demo_answers("buggy-traffic-fused-one-write")["02_fused_rmsnorm/add_rmsnorm_traffic"]})
    _fails(checks.check_add_rmsnorm_traffic, bad["add_rmsnorm_traffic"], 4, 8, 4, words=("TWO rows", "residual"))


def test_unfused_count_that_forgets_the_mean_is_caught_by_the_shape_of_what_is_missing():
    bad = replace_in_answer(FUSED, "add_rmsnorm_traffic", "+ rows + num_tokens           # .mean", "+ 0           # .mean")
    message = _fails(checks.check_add_rmsnorm_traffic, bad["add_rmsnorm_traffic"], 4, 8, 4,
                     words=("unfused bytes", "has T*H + T elements too few"))
    # the hint describes the mistake, never the rule: no term of the reference count is spelled out
    for term in ("3TH", "2TH", "10TH", "2T,", "rsqrt 2T"):
        assert term not in message, message


def test_a_count_in_elements_is_told_to_multiply_by_the_bytes_per_element():
    bad = replace_in_answer(FUSED, "add_rmsnorm_traffic", "return unfused * bytes_per_element, fused * bytes_per_element",
                            "return unfused, fused")
    _fails(checks.check_add_rmsnorm_traffic, bad["add_rmsnorm_traffic"], 64, 576, 2,
           words=("fused bytes", "elements, not bytes", "bytes_per_element"))


def test_mean_over_the_block_is_named(fused):
    bad = student(FUSED, {"fused_add_rmsnorm":
                          demo_answers("buggy-rmsnorm-mean-over-block")["02_fused_rmsnorm/fused_add_rmsnorm"]})
    checks.check_fused_add_rmsnorm(bad["fused_add_rmsnorm"], 4, 64)  # hidden = BLOCK: no difference
    _fails(checks.check_fused_add_rmsnorm, bad["fused_add_rmsnorm"], 3, 576, words=("sqrt(1024 / 576)", "hidden"))


def test_rmsnorm_that_ignores_the_row_stride_is_told_about_views():
    bad = student(FUSED, {"fused_add_rmsnorm":
                          demo_answers("buggy-rmsnorm-ignores-row-stride")["02_fused_rmsnorm/fused_add_rmsnorm"]})
    checks.check_fused_add_rmsnorm(bad["fused_add_rmsnorm"], 3, 100)
    # the visible case of the chapter's test cell
    _fails(checks.check_fused_add_rmsnorm, bad["fused_add_rmsnorm"], 3, 100, strided=True,
           words=("contiguous x", "strided view", "stride(0)"))


def test_a_residual_that_is_not_updated_is_caught():
    bad = replace_in_answer(FUSED, "fused_add_rmsnorm", "summed.to(residual_out_ptr.dtype.element_ty)",
                            "residual.to(residual_out_ptr.dtype.element_ty)")
    _fails(checks.check_fused_add_rmsnorm, bad["fused_add_rmsnorm"], 3, 64, words=("new_residual", "x + residual"))


def test_gpu_checks_say_they_need_a_gpu(basics, fused):
    from course_lib.checks import NeedsGPU

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the speed checks run in the GPU tests")
    with pytest.raises(NeedsGPU, match="needs a GPU"):
        checks.check_vector_add_speed(basics["vector_add"])
    with pytest.raises(NeedsGPU, match="needs a GPU"):
        checks.check_fused_rmsnorm_speed(fused["fused_add_rmsnorm"])


def test_an_impossible_time_is_not_credible():
    with pytest.raises(CheckFailed, match="not credible"):
        checks.require_credible("a kernel", 1e-6, 1e9, 3e12)   # 1 GB in 1 us is 1,000 TB/s
    checks.require_credible("a kernel", 1e-3, 1e9, 3e12)       # 1 GB in 1 ms: 1 TB/s, fine


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_speed_checks_pass_the_reference_answers(basics, fused):
    checks.check_vector_add_speed(basics["vector_add"])
    checks.check_fused_rmsnorm_speed(fused["fused_add_rmsnorm"])
