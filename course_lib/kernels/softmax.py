"""Row-wise softmax in Triton: one program per row, the whole row in one block of lanes.

``softmax(x)[i, j] = exp(x[i, j] - max_j x[i, :]) / sum_j exp(x[i, j] - max_j x[i, :])``.

Program ``i`` loads row ``i`` into ``BLOCK = next_power_of_2(num_cols)`` lanes (``tl.arange`` needs a
power of two), so for any row length that is not a power of two the last lanes hang past the row.
They are loaded as ``-inf``: ``-inf`` never wins the max and ``exp(-inf) = 0`` adds nothing to the sum,
so the padding drops out of the result by itself. (Padding with 0 would be wrong: ``exp(0 - max)``
is not 0.) Subtracting the row's max before ``exp`` changes nothing mathematically and keeps every
``exp`` in ``(0, 1]``, so large inputs cannot overflow.

Rows are found through the row stride, so ``x`` may be a view whose rows are not adjacent in
memory (every other row of a bigger matrix, a column slice...); only the last dimension must be
contiguous.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from course_lib.exercises import exercise

__all__ = ["MAX_COLS", "softmax"]

MAX_COLS = 2**14
"""Longest row one program holds: the row lives in the registers of one program on a GPU. Compiled for
an A100 and an H100 (tests/test_kernels_gpu_compile.py), 16,384 float32 lanes fit in 8 warps without
spilling; at 32,768 and more, registers spill to local memory whatever the warp count."""


@exercise("lab03-kernels", "01_triton_basics", "softmax")
@triton.jit
def _softmax_kernel(
    out_ptr,  # [num_rows, num_cols]
    x_ptr,  # [num_rows, num_cols]
    num_cols,
    stride_x_row,
    stride_out_row,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may pass 2**31 in a large matrix
    cols = tl.arange(0, BLOCK)
    in_row = cols < num_cols
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=in_row, other=float("-inf")).to(tl.float32)
    shifted = x - tl.max(x, axis=0)
    numerators = tl.exp(shifted)  # padding lanes: exp(-inf) = 0
    result = numerators / tl.sum(numerators, axis=0)
    tl.store(out_ptr + row * stride_out_row + cols, result.to(out_ptr.dtype.element_ty), mask=in_row)


@exercise("lab03-kernels", "01_triton_basics", "softmax")
def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax of every row of ``x`` with the Triton kernel (math in fp32).

    Args:
        x: ``[num_rows, num_cols]`` float16, bfloat16 or float32, last dimension contiguous,
            ``1 <= num_cols <= MAX_COLS``.

    Returns:
        A new contiguous ``[num_rows, num_cols]`` tensor of x's dtype.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [num_rows, num_cols], got shape {list(x.shape)}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    num_rows, num_cols = x.shape
    if not 1 <= num_cols <= MAX_COLS:
        raise ValueError(f"x must have 1 to {MAX_COLS} columns, got {num_cols}")
    if num_cols > 1 and x.stride(1) != 1:
        raise ValueError(f"x's rows must be contiguous (stride 1 along the columns), got strides {x.stride()}")
    out = torch.empty((num_rows, num_cols), dtype=x.dtype, device=x.device)
    if num_rows == 0:
        return out
    block = triton.next_power_of_2(num_cols)
    _softmax_kernel[(num_rows,)](
        out, x, num_cols, x.stride(0), out.stride(0), BLOCK=block,
        num_warps=4 if block <= 8192 else 8,  # past 8,192 lanes, 4 warps' registers would spill
    )
    return out
