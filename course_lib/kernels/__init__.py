"""Triton kernels of the reference inference stack (one module per kernel), and how they run on a CPU.

- ``vector_add``, ``softmax``: the first kernels of Lab 0.3 (programs, blocks, masks, strides);
- ``rmsnorm``: the residual add fused with RMSNorm, and the bytes it saves;
- ``paged_attention``: the paged decode-attention kernel (with split-KV), the KV-store kernel, and
  their torch references;
- ``timing``: honest GPU timing (paired, alternated runs; the copy bandwidth that bounds them);
- ``byte_counter``: the bytes a sequence of torch operations reads and writes;
- ``interpreter_guard``: bounds checks for Triton's CPU interpreter;
- ``interpreter_speedup``: cheaper calls of ``@triton.jit`` helpers under the interpreter.

Importing this package decides how Triton runs, so it must happen before any kernel is defined:
Triton reads ``TRITON_INTERPRET`` when a ``@triton.jit`` function is created, not when it is
launched. A notebook imports ``course_lib.kernels`` in its first cell, before its own kernels.
"""

import os

import torch

# Without a CUDA device Triton cannot compile anything, but its interpreter runs the same kernel
# source on the CPU with numpy (slowly, exactly). Turning it on here, before any kernel module is
# imported, lets the course's CPU-only machines run and test every kernel. A value the user set
# (say TRITON_INTERPRET=1 on a GPU machine, to debug a kernel) is left alone.
if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    # The interpreter reads and writes raw addresses: without the guard, a missing mask corrupts
    # the process's memory instead of raising an error that names the kernel and the access.
    # The speed-up removes the interpreter's largest fixed cost (see its module).
    from course_lib.kernels import interpreter_guard, interpreter_speedup

    interpreter_guard.install()
    interpreter_speedup.install()
