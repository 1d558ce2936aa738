"""Demo student: forges the compile check's verdict from inside its kernel (01_triton_basics)."""

DESCRIPTION = (
    "Its add_kernel reads a plain global (BLOCK_SIZE), which no GPU compile accepts, and its answer cell "
    "tries to make the compile check say yes anyway: it replaces triton.compile and the course's "
    "compile_kernels and check_compiles_for_gpu in its own kernel with fakes that report success, fills a "
    "Triton cache with a made-up entry and prints 'add_kernel compiles for an H100 (sm_90): yes'. The check "
    "runs in the grader and compiles the cell's source there, in a sandbox with a fresh cache: it loses the "
    "add_kernel compile cell like buggy-add-global-block, expected 10/11"
)
BASE = "solution"
ANSWERS = {
    '01_triton_basics/vector_add': '''
import os
import types

import course_lib.checks.kernels_compile as compile_checks
import course_lib.kernels.gpu_compile as gpu_compile

BLOCK_SIZE = 1024


def _pretend(*args, **kwargs):
    print("add_kernel compiles for an H100 (sm_90): yes")
    return []


triton.compile = lambda *args, **kwargs: types.SimpleNamespace(metadata=types.SimpleNamespace(shared=0))
gpu_compile.compile_kernels = _pretend
compile_checks.compile_kernels = _pretend
compile_checks.check_compiles_for_gpu = _pretend
os.makedirs(os.path.expanduser("~/.triton/cache/forged"), exist_ok=True)
with open(os.path.expanduser("~/.triton/cache/forged/add_kernel.json"), "w") as forged:
    forged.write('{"name": "add_kernel", "shared": 0, "num_warps": 4}')
_pretend()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] + y[i] for the BLOCK elements of this program (i < n)."""
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    in_bounds = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=in_bounds) + tl.load(y_ptr + offsets, mask=in_bounds),
             mask=in_bounds)


def vector_add(x, y):
    """x + y with add_kernel."""
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, out, n, BLOCK=BLOCK_SIZE)
    return out
''',
}
EXPECTED = {'01_triton_basics': 10}
