"""The residual add fused with RMSNorm: one Triton kernel instead of six torch operations.

Every layer of a Llama-style model normalizes its input twice, and each time it first adds the
previous block's output to the *residual stream*::

    residual = x + residual                                    # the stream carries every layer's sum
    out      = residual / sqrt(mean(residual ** 2) + eps) * weight

Written op by op in torch (``unfused_add_rmsnorm``), that is six kernels on a GPU, and each reads
its inputs from memory and writes its output back: the ``[num_tokens, hidden]`` activations cross
the memory bus about ten times. The fused kernel (``fused_add_rmsnorm``) gives one program a whole
row (one token): it loads the row of ``x`` and of ``residual`` once, keeps the sum in registers,
computes the mean of squares there, and writes the new residual and the normalized row once. Four
passes instead of ten, so about 2.5 times less traffic for an operation that does a handful of
FLOPs per element and is bound by memory bandwidth either way. ``add_rmsnorm_traffic`` counts both.

The math is done in fp32 whatever the input dtype (the mean of squares of bf16 values would lose
digits); the outputs are stored in the input dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from course_lib.exercises import exercise

__all__ = [
    "MAX_HIDDEN",
    "add_rmsnorm_flops",
    "add_rmsnorm_ref",
    "add_rmsnorm_traffic",
    "fused_add_rmsnorm",
    "unfused_add_rmsnorm",
]

MAX_HIDDEN = 2**14
"""Widest row one program holds (the row lives in one program's registers): compiled for an A100 and an
H100, 16,384 lanes fit in 8 warps without spilling; wider rows spill (tests/test_kernels_gpu_compile.py)."""

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# --------------------------------------------------------------------------------------------
# Torch versions: the reference, and the op-by-op version whose bytes the lab counts.
# --------------------------------------------------------------------------------------------


def add_rmsnorm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add then RMSNorm in plain torch, with fp32 math (float64 inputs stay float64).

    Args:
        x, residual: ``[num_tokens, hidden]``; weight: ``[hidden]``; eps: added to the mean of squares.

    Returns:
        ``(out, new_residual)``, both ``[num_tokens, hidden]`` in x's dtype, where
        ``new_residual = x + residual`` and ``out = new_residual * rsqrt(mean(new_residual**2) + eps) * weight``.
    """
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    summed = x.to(compute) + residual.to(compute)
    inverse_rms = torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True) + eps)
    out = summed * inverse_rms * weight.to(compute)
    return out.to(x.dtype), summed.to(x.dtype)


def unfused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same computation as it is often written, one torch operation (one GPU kernel) per line.

    Everything stays in x's dtype, so each line reads and writes whole tensors of that dtype (this
    is the version whose traffic ``add_rmsnorm_traffic`` counts as "unfused").
    """
    residual = x + residual                                   # reads 2 rows, writes 1
    variance = residual.pow(2).mean(dim=-1, keepdim=True)     # pow: 1 row -> 1 row; mean: 1 row -> 1 number
    inverse_rms = torch.rsqrt(variance + eps)                 # two tiny [num_tokens, 1] operations
    normed = residual * inverse_rms                           # reads a row and a number, writes a row
    return normed * weight, residual                          # reads a row and the weight, writes a row


# --------------------------------------------------------------------------------------------
# Counting: bytes moved and FLOPs performed.
# --------------------------------------------------------------------------------------------


@exercise("lab03-kernels", "02_fused_rmsnorm", "add_rmsnorm_traffic")
def add_rmsnorm_traffic(num_tokens: int, hidden: int, bytes_per_element: float) -> tuple[float, float]:
    """Bytes moved by the unfused torch version and by the fused kernel, in that order.

    Counting rule: each operation reads each of its tensor inputs once and writes its output once
    (what ``course_lib.kernels.byte_counter.count_bytes`` measures). With ``T = num_tokens``,
    ``H = hidden`` and every tensor in one dtype of ``bytes_per_element`` bytes:

    - unfused (``unfused_add_rmsnorm``): add ``3TH``; pow ``2TH``; mean ``TH + T``; ``+ eps`` ``2T``;
      rsqrt ``2T``; ``* inverse_rms`` ``2TH + T``; ``* weight`` ``2TH + H``: ``10TH + 6T + H`` elements;
    - fused: read x, residual and weight, write out and the new residual: ``4TH + H`` elements.

    Returns:
        ``(unfused_bytes, fused_bytes)``.
    """
    for name, value in (("num_tokens", num_tokens), ("hidden", hidden)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if isinstance(bytes_per_element, bool) or not isinstance(bytes_per_element, (int, float)) or bytes_per_element <= 0:
        raise ValueError(f"bytes_per_element must be a number > 0, got {bytes_per_element!r}")
    rows = num_tokens * hidden
    unfused = 10 * rows + 6 * num_tokens + hidden
    fused = 4 * rows + hidden
    return unfused * bytes_per_element, fused * bytes_per_element


def add_rmsnorm_flops(num_tokens: int, hidden: int) -> int:
    """FLOPs of the residual add + RMSNorm, fused or not (fusion moves fewer bytes, not fewer FLOPs).

    Per element: the add, the square, the sum, the multiply by 1/rms and by the weight (5); per row:
    the division by ``hidden``, ``+ eps`` and the reciprocal square root (3).
    """
    return 5 * num_tokens * hidden + 3 * num_tokens


# --------------------------------------------------------------------------------------------
# The fused kernel.
# --------------------------------------------------------------------------------------------


@exercise("lab03-kernels", "02_fused_rmsnorm", "fused_add_rmsnorm")
@triton.jit
def _fused_add_rmsnorm_kernel(
    out_ptr,  # [num_tokens, hidden]
    residual_out_ptr,  # [num_tokens, hidden]
    x_ptr,  # [num_tokens, hidden]
    residual_ptr,  # [num_tokens, hidden]
    weight_ptr,  # [hidden]
    hidden,
    eps,
    stride_x_row,
    stride_residual_row,
    stride_out_row,
    stride_residual_out_row,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    in_row = cols < hidden
    # One read of each input row; padding lanes load 0, which adds nothing to the sum of squares.
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=in_row, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * stride_residual_row + cols, mask=in_row, other=0.0).to(tl.float32)
    summed = x + residual
    # The mean is over the row's `hidden` real elements, not over the BLOCK lanes.
    mean_square = tl.sum(summed * summed, axis=0) / hidden
    inverse_rms = 1.0 / tl.sqrt(mean_square + eps)
    weight = tl.load(weight_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    out = summed * inverse_rms * weight
    # One write of each output row.
    tl.store(residual_out_ptr + row * stride_residual_out_row + cols,
             summed.to(residual_out_ptr.dtype.element_ty), mask=in_row)
    tl.store(out_ptr + row * stride_out_row + cols, out.to(out_ptr.dtype.element_ty), mask=in_row)


@exercise("lab03-kernels", "02_fused_rmsnorm", "fused_add_rmsnorm")
def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add + RMSNorm in one Triton kernel (one program per token).

    Args:
        x, residual: ``[num_tokens, hidden]`` float16, bfloat16 or float32 (one dtype), rows
            contiguous (any row stride); ``1 <= hidden <= MAX_HIDDEN``.
        weight: ``[hidden]``, the norm's learned scale (any of those dtypes).
        eps: a number >= 0 added to the mean of squares.

    Returns:
        ``(out, new_residual)``: new contiguous ``[num_tokens, hidden]`` tensors in x's dtype.
    """
    _check_inputs(x, residual, weight, eps)
    num_tokens, hidden = x.shape
    out = torch.empty((num_tokens, hidden), dtype=x.dtype, device=x.device)
    residual_out = torch.empty_like(out)
    if num_tokens == 0:
        return out, residual_out
    block = triton.next_power_of_2(hidden)
    _fused_add_rmsnorm_kernel[(num_tokens,)](
        out, residual_out, x, residual, weight.contiguous(), hidden, float(eps),
        x.stride(0), residual.stride(0), out.stride(0), residual_out.stride(0),
        BLOCK=block, num_warps=4 if block <= 8192 else 8,  # past 8,192 lanes, 4 warps' registers would spill
    )
    return out, residual_out


def _check_inputs(x, residual, weight, eps) -> None:
    for name, tensor in (("x", x), ("residual", residual), ("weight", weight)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16 or float32, got {tensor.dtype}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [num_tokens, hidden], got shape {list(x.shape)}")
    num_tokens, hidden = x.shape
    if not 1 <= hidden <= MAX_HIDDEN:
        raise ValueError(f"hidden must be in [1, {MAX_HIDDEN}], got {hidden}")
    if residual.shape != x.shape:
        raise ValueError(f"residual must have x's shape {list(x.shape)}, got {list(residual.shape)}")
    if residual.dtype != x.dtype:
        raise TypeError(f"residual must have x's dtype {x.dtype}, got {residual.dtype}")
    if weight.shape != (hidden,):
        raise ValueError(f"weight must have shape [hidden] = [{hidden}], got {list(weight.shape)}")
    for name, tensor in (("x", x), ("residual", residual)):
        if hidden > 1 and tensor.stride(1) != 1:
            raise ValueError(f"{name}'s rows must be contiguous (stride 1 along hidden), got strides {tensor.stride()}")
    if len({x.device, residual.device, weight.device}) != 1:
        raise ValueError(f"x, residual and weight must be on one device, got {x.device}, {residual.device}, {weight.device}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
