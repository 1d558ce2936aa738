"""Demo student: add_kernel sizes its block with a plain global (01_triton_basics)."""

DESCRIPTION = (
    'add_kernel reads its block size from a module-level BLOCK_SIZE = 1024 instead of its BLOCK parameter. '
    "Triton's interpreter runs the kernel's Python, where any global will do, so every vector_add check "
    'passes; a GPU compile refuses a global that is not a tl.constexpr ("Cannot access global variable '
    'BLOCK_SIZE"). Loses the add_kernel compile cell only, expected 10/11'
)
BASE = "solution"
ANSWERS = {
    '01_triton_basics/vector_add': '''
BLOCK_SIZE = 1024   # elements per program


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] + y[i] for the BLOCK elements of this program (i < n)."""
    program = tl.program_id(0)
    offsets = program * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    in_bounds = offsets < n
    x = tl.load(x_ptr + offsets, mask=in_bounds)
    y = tl.load(y_ptr + offsets, mask=in_bounds)
    tl.store(out_ptr + offsets, x + y, mask=in_bounds)


def vector_add(x, y):
    """x + y with add_kernel.

    Args:
        x, y: 1-D contiguous tensors of the same length n >= 1, dtype and device.
    Returns:
        A new tensor [n] of x's dtype: out[i] = x[i] + y[i].
    """
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, out, n, BLOCK=BLOCK_SIZE)
    return out
''',
}
EXPECTED = {'01_triton_basics': 10}
