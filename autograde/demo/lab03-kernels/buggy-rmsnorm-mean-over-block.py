"""Demo student: rmsnorm mean over block (02_fused_rmsnorm)."""

DESCRIPTION = (
    'fused_add_rmsnorm_kernel divides the sum of squares by BLOCK (the next power of two) instead of '
    "hidden: right for hidden = 64, too large by sqrt(1024 / 576) for SmolLM2's 576. Loses both kernel "
    'cells, expected 5/11'
)
BASE = "solution"
ANSWERS = {
    '02_fused_rmsnorm/fused_add_rmsnorm': '''
@triton.jit
def fused_add_rmsnorm_kernel(out_ptr, residual_out_ptr, x_ptr, residual_ptr, weight_ptr, hidden, eps,
                             stride_x_row, stride_residual_row, stride_out_row, stride_residual_out_row,
                             BLOCK: tl.constexpr):
    """One row (token): s = x + residual; residual_out = s; out = s / sqrt(mean(s ** 2) + eps) * weight."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    in_row = cols < hidden
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=in_row, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * stride_residual_row + cols, mask=in_row, other=0.0).to(tl.float32)
    summed = x + residual
    mean_square = tl.sum(summed * summed, axis=0) / BLOCK
    inverse_rms = 1.0 / tl.sqrt(mean_square + eps)
    weight = tl.load(weight_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    tl.store(residual_out_ptr + row * stride_residual_out_row + cols,
             summed.to(residual_out_ptr.dtype.element_ty), mask=in_row)
    tl.store(out_ptr + row * stride_out_row + cols,
             (summed * inverse_rms * weight).to(out_ptr.dtype.element_ty), mask=in_row)


def fused_add_rmsnorm(x, residual, weight, eps):
    """Residual add + RMSNorm with fused_add_rmsnorm_kernel, one program per token.

    Args:
        x, residual: Tensor [num_tokens, hidden] (float32, float16 or bfloat16, one dtype), columns
            contiguous, rows possibly further apart. weight: Tensor [hidden]. eps: float >= 0.
    Returns:
        (out, new_residual): new contiguous Tensors [num_tokens, hidden] of x's dtype.
    """
    num_tokens, hidden = x.shape
    out = torch.empty((num_tokens, hidden), dtype=x.dtype, device=x.device)
    new_residual = torch.empty_like(out)
    fused_add_rmsnorm_kernel[(num_tokens,)](
        out, new_residual, x, residual, weight, hidden, eps,
        x.stride(0), residual.stride(0), out.stride(0), new_residual.stride(0),
        BLOCK=triton.next_power_of_2(hidden))
    return out, new_residual
''',
}
EXPECTED = {'02_fused_rmsnorm': 5}
