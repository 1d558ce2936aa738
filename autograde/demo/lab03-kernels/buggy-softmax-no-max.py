"""Demo student: softmax without the max (01_triton_basics)."""

DESCRIPTION = (
    "softmax_kernel takes exp(x) of the raw row, without subtracting the row's max: right for small "
    'values, inf / inf = NaN once a value passes 88 (exp overflows float32). Loses both softmax cells, '
    'expected 6/11'
)
BASE = "solution"
ANSWERS = {
    '01_triton_basics/softmax': '''
@triton.jit
def softmax_kernel(out_ptr, x_ptr, num_cols, stride_x_row, stride_out_row, BLOCK: tl.constexpr):
    """Softmax of row tl.program_id(0) of x into the same row of out (math in fp32)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    in_row = cols < num_cols
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=in_row, other=float("-inf")).to(tl.float32)
    shifted = x
    numerators = tl.exp(shifted)
    result = numerators / tl.sum(numerators, axis=0)
    tl.store(out_ptr + row * stride_out_row + cols, result.to(out_ptr.dtype.element_ty), mask=in_row)


def softmax(x):
    """Softmax of every row of x with softmax_kernel.

    Args:
        x: Tensor [num_rows, num_cols] (float32 or float16), columns contiguous (x.stride(1) == 1),
            rows possibly further apart (x.stride(0) >= num_cols).
    Returns:
        A new contiguous Tensor [num_rows, num_cols] of x's dtype.
    """
    num_rows, num_cols = x.shape
    out = torch.empty((num_rows, num_cols), dtype=x.dtype, device=x.device)
    softmax_kernel[(num_rows,)](out, x, num_cols, x.stride(0), out.stride(0),
                                BLOCK=triton.next_power_of_2(num_cols))
    return out
''',
}
EXPECTED = {'01_triton_basics': 6}
