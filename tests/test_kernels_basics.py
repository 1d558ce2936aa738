"""The first reference kernels (course_lib.kernels.vector_add, .softmax) against torch, under the
interpreter, at sizes around their block boundaries; and their input errors."""

from __future__ import annotations

import pytest
import torch

import course_lib.kernels  # noqa: F401  (interpreter on before the kernels are defined)
from course_lib.kernels.softmax import MAX_COLS, softmax
from course_lib.kernels.tolerances import assert_close
from course_lib.kernels.vector_add import vector_add


@pytest.mark.parametrize("n", [1, 7, 1023, 1024, 1025, 5000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_vector_add_matches_torch_exactly(n, dtype):
    generator = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=generator).to(dtype)
    y = torch.randn(n, generator=generator).to(dtype)
    assert torch.equal(vector_add(x, y), x + y)


def test_vector_add_small_blocks_and_empty_input():
    x, y = torch.arange(10.0), torch.ones(10)
    assert torch.equal(vector_add(x, y, block=4), x + 1)
    assert vector_add(torch.empty(0), torch.empty(0)).shape == (0,)


@pytest.mark.parametrize("x, y, block, error, words", [
    ([1.0], torch.ones(1), 4, TypeError, "x must be a torch.Tensor"),
    (torch.ones(2, 2), torch.ones(2, 2), 4, ValueError, "1-D"),
    (torch.ones(4), torch.ones(5), 4, ValueError, "share shape"),
    (torch.ones(8)[::2], torch.ones(4), 4, ValueError, "contiguous"),
    (torch.ones(4), torch.ones(4), 3, ValueError, "power of two"),
])
def test_vector_add_rejects_bad_input(x, y, block, error, words):
    with pytest.raises(error, match=words):
        vector_add(x, y, block=block)


@pytest.mark.parametrize("num_rows, num_cols", [(1, 1), (3, 7), (4, 64), (2, 100), (2, 1025)])
def test_softmax_matches_torch(num_rows, num_cols):
    x = torch.randn(num_rows, num_cols, generator=torch.Generator().manual_seed(num_cols)) * 5
    assert_close(softmax(x), torch.softmax(x.double(), dim=-1))


def test_softmax_large_values_strided_rows_and_half_precision():
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(0)) * 300     # exp(300) overflows fp32
    assert_close(softmax(x), torch.softmax(x.double(), dim=-1))
    wide = torch.randn(8, 50, generator=torch.Generator().manual_seed(1))
    view = wide[::2, :30]
    assert_close(softmax(view), torch.softmax(view.double(), dim=-1))
    half = torch.randn(3, 33).half()
    assert_close(softmax(half), torch.softmax(half.double(), dim=-1))


@pytest.mark.parametrize("x, error, words", [
    (torch.ones(3), ValueError, "2-D"),
    (torch.ones(2, 3, dtype=torch.int32), TypeError, "float16, bfloat16 or float32"),
    (torch.ones(2, 0), ValueError, "1 to"),
    (torch.ones(2, MAX_COLS + 1), ValueError, "1 to"),
    (torch.ones(3, 4).t(), ValueError, "contiguous"),
])
def test_softmax_rejects_bad_input(x, error, words):
    with pytest.raises(error, match=words):
        softmax(x)


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("num_cols", [1, 100, 4097, 8192, MAX_COLS])   # MAX_COLS: 16,384 lanes in 8 warps
def test_gpu_softmax_compiled_matches_float64(dtype, num_cols):
    x = (torch.randn(64, num_cols, generator=torch.Generator().manual_seed(num_cols)) * 10).to(dtype)
    assert_close(softmax(x.cuda()), torch.softmax(x.double(), dim=-1))
    assert torch.equal(vector_add(x[0].cuda(), x[1].cuda()).cpu(), x[0] + x[1])
