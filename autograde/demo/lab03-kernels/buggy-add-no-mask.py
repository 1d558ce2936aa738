"""Demo student: add no mask (01_triton_basics)."""

DESCRIPTION = (
    'add_kernel loads and stores without a mask, so the last program reads and writes past the end of the '
    "tensors whenever the block does not divide n: the interpreter's guard stops it. Loses both "
    'vector_add cells (the kernel still compiles for an H100), expected 7/11 (the GPU cell is skipped on a CPU)'
)
BASE = "solution"
ANSWERS = {
    '01_triton_basics/vector_add': '''
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] + y[i] for the BLOCK elements of this program (i < n)."""
    program = tl.program_id(0)
    offsets = program * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    y = tl.load(y_ptr + offsets)
    tl.store(out_ptr + offsets, x + y)


def vector_add(x, y):
    """x + y with add_kernel.

    Args:
        x, y: 1-D contiguous tensors of the same length n >= 1, dtype and device.
    Returns:
        A new tensor [n] of x's dtype: out[i] = x[i] + y[i].
    """
    out = torch.empty_like(x)
    n = x.numel()
    block = 1024
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return out
''',
}
EXPECTED = {'01_triton_basics': 7}
