"""The course's patches to Triton's CPU interpreter: the bounds guard (every load and store inside a
tensor argument, with a message that names the kernel and the tensor) and the cheaper calls of
@triton.jit helpers (same results)."""

from __future__ import annotations

import os

import pytest
import torch

import course_lib.kernels  # noqa: F401  (first: it turns the interpreter on before triton is imported)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from course_lib.kernels import interpreter_guard, interpreter_speedup  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                reason="Triton's interpreter is not in use (a GPU runs the kernels)")


def test_both_patches_are_installed_with_the_pinned_triton():
    assert triton.__version__ == "3.9.0", "the patches were written for the interpreter of Triton 3.9"
    assert interpreter_guard.is_installed() and interpreter_speedup.is_installed()


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, SHIFT: tl.constexpr, MASKED: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK) + SHIFT
    if MASKED:
        inside = (offsets >= 0) & (offsets < n)
        tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=inside), mask=inside)
    else:
        tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets))


def _launch(n, shift=0, masked=False, block=8, src=None):
    src = torch.arange(n, dtype=torch.float32) if src is None else src
    dst = torch.zeros(n)
    _copy_kernel[(triton.cdiv(n, block),)](src, dst, n, SHIFT=shift, MASKED=masked, BLOCK=block)
    return src, dst


def test_masked_and_in_bounds_accesses_run_normally():
    src, dst = _launch(16)
    assert torch.equal(src, dst)
    src, dst = _launch(13, masked=True)
    assert torch.equal(src, dst)
    src, dst = _launch(13, shift=-3, masked=True)
    assert torch.equal(dst[:10], src[:10])


def test_a_load_past_the_end_is_stopped_and_named():
    with pytest.raises(Exception, match=r"_copy_kernel, program \(1, 0, 0\): load.*3 of 8.*the first at src_ptr \+ 13, "
                                        r"1 element past its last element \(src_ptr: \[13\] float32, src_ptr \+ 0 to "
                                        r"src_ptr \+ 12\)"):
        _launch(13)


def test_an_access_before_the_start_is_stopped():
    with pytest.raises(Exception, match=r"the first at src_ptr - 2, 2 elements before its first element"):
        _launch(16, shift=-2)


def test_a_view_is_its_own_extent_not_its_storage():
    buffer = torch.arange(32, dtype=torch.float32)
    with pytest.raises(Exception, match=r"past its last element \(src_ptr: \[13\] float32"):
        _launch(13, src=buffer[:13])


def test_launches_are_counted():
    before = interpreter_guard.launch_count()
    _launch(8)
    _launch(8)
    assert interpreter_guard.launch_count() == before + 2


@triton.jit
def _helpers_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    total = tl.sum(x, axis=0) + tl.max(x, axis=0) + tl.cdiv(BLOCK, 3) + tl.sum(tl.maximum(x, 0.5), axis=0)
    tl.store(out_ptr, total)


def test_helper_calls_give_the_same_results():
    assert interpreter_speedup.is_installed()
    x = torch.tensor([0.25, 1.0, 2.0, -3.0])
    out = torch.zeros(1)
    _helpers_kernel[(1,)](x, out, BLOCK=4)
    expected = x.sum() + x.max() + 2 + torch.clamp(x, min=0.5).sum()
    assert float(out) == pytest.approx(float(expected))
