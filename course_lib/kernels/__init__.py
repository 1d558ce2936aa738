"""Triton kernels of the reference inference stack (one module per kernel).

``paged_attention``: the paged decode-attention kernel and the KV-store kernel, each beside the
torch reference that students compare against.

Importing this package decides how Triton runs, so it must happen before Triton's kernels are
defined: Triton reads ``TRITON_INTERPRET`` when a ``@triton.jit`` function is created, not when it
is launched.
"""

import os

import torch

# Without a CUDA device Triton cannot compile anything, but its interpreter runs the same kernel
# source on the CPU with numpy (slowly, exactly). Turning it on here, before any kernel module is
# imported, lets the course's CPU-only machines run and test every kernel. A value the user set
# (say TRITON_INTERPRET=1 on a GPU machine, to debug a kernel) is left alone.
if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"
