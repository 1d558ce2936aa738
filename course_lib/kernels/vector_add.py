"""The first Triton kernel: ``out = x + y``, one program per block of elements.

A Triton kernel is a function that one *program* runs; a launch runs many programs, each on its
own slice of the data. Here program ``p`` owns elements ``p * BLOCK`` to ``p * BLOCK + BLOCK - 1``:

    offsets = p * BLOCK + tl.arange(0, BLOCK)      # BLOCK lanes, one element each
    mask    = offsets < n                          # lanes past the end of the tensor do nothing

``tl.arange(0, BLOCK)`` is a vector of BLOCK lanes (a power of two); a pointer plus that vector is
a vector of addresses, and ``tl.load`` / ``tl.store`` move the whole vector at once. The grid has
``ceil(n / BLOCK)`` programs, so unless BLOCK divides n the last program's block hangs over the end
of the tensor: its extra lanes must be masked off, or they read and write memory that belongs to
something else.

The wrapper ``vector_add`` checks its inputs, allocates the output and launches the grid.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from course_lib.exercises import exercise

__all__ = ["DEFAULT_BLOCK", "vector_add"]

DEFAULT_BLOCK = 1024
"""Elements per program: large enough for wide memory transactions, small enough for registers."""


@exercise("lab03-kernels", "01_triton_basics", "vector_add")
@triton.jit
def _add_kernel(
    x_ptr,  # [n]
    y_ptr,  # [n]
    out_ptr,  # [n]
    n,
    BLOCK: tl.constexpr,
):
    program = tl.program_id(0)
    offsets = program * BLOCK + tl.arange(0, BLOCK)  # [BLOCK] element indices of this program
    in_bounds = offsets < n  # the last program's block may hang over the end
    x = tl.load(x_ptr + offsets, mask=in_bounds)
    y = tl.load(y_ptr + offsets, mask=in_bounds)
    tl.store(out_ptr + offsets, x + y, mask=in_bounds)


@exercise("lab03-kernels", "01_triton_basics", "vector_add")
def vector_add(x: torch.Tensor, y: torch.Tensor, block: int = DEFAULT_BLOCK) -> torch.Tensor:
    """``x + y`` with the Triton kernel.

    Args:
        x, y: 1-D tensors of the same length, dtype and device, contiguous.
        block: elements per program, a power of two.

    Returns:
        A new tensor ``[n]`` of x's dtype: ``out[i] = x[i] + y[i]``.
    """
    for name, tensor in (("x", x), ("y", y)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {list(tensor.shape)}")
        if tensor.numel() > 1 and tensor.stride(0) != 1:
            raise ValueError(f"{name} must be contiguous (stride 1), got stride {tensor.stride(0)}")
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise ValueError(
            f"x and y must share shape, dtype and device, got {list(x.shape)} {x.dtype} {x.device} "
            f"and {list(y.shape)} {y.dtype} {y.device}"
        )
    if not isinstance(block, int) or block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block!r}")
    out = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return out
    _add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return out
