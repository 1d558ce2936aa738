"""How close a kernel's output must be to the exact answer, per dtype: one table for the interpreter and the GPU.

Every comparison of a Triton kernel's output in this course uses ``TOLERANCES``: the Lab 0.3
checks (on a CPU under the interpreter, and in the GPU cells), the kernels' tests (``pytest``,
``pytest -m gpu``) and the GPU benchmarks. The expected side is the same formula computed in float64
(the checks) or in float32 by the torch reference (the tests), from the same inputs; an element
passes when ``|got - expected| <= atol + rtol * |expected|`` (``torch.allclose``).

Why these numbers, for outputs of size about 1 (softmax rows, normalized activations, attention
outputs, which are averages of values):

- **float32**: the kernel and the reference differ only in the order of their sums and in the
  exponential (``exp2`` in the kernel, ``ex2.approx`` on a GPU, relative error about 2**-22). Seen:
  about 4e-7 under the interpreter. rtol 1e-5 leaves room for sums over thousands of terms.
- **float16**: the output is rounded to float16 (relative step 2**-11, about 5e-4) and, in
  attention, the softmax weights enter the second product in float16.
- **bfloat16**: the same with bfloat16's relative step of 2**-8, about 4e-3.

Float32 products are full float32 products, on both sides. The interpreter computes ``tl.dot`` with
numpy in float32; a GPU runs a float32 ``tl.dot`` in TF32 (10 bits of mantissa, errors near 1e-3)
unless the kernel asks for ``input_precision="ieee"``, which the course's kernels do and the
compile check asks of students' kernels (``course_lib.checks.kernels_compile``). Torch references
computed on a GPU run inside ``full_fp32_matmul()``, so cuBLAS does not switch to TF32 either.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

__all__ = ["TOLERANCES", "Tolerance", "assert_close", "full_fp32_matmul", "is_close", "tolerance"]


@dataclass(frozen=True)
class Tolerance:
    """``|got - expected| <= atol + rtol * |expected|`` for every element."""

    rtol: float
    atol: float

    def as_kwargs(self) -> dict[str, float]:
        """For ``torch.testing.assert_close(..., **tolerance.as_kwargs())``."""
        return {"rtol": self.rtol, "atol": self.atol}


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=1e-5, atol=1e-5),
    torch.float16: Tolerance(rtol=4e-3, atol=2e-3),
    torch.bfloat16: Tolerance(rtol=2e-2, atol=2e-2),
}


def tolerance(dtype: torch.dtype) -> Tolerance:
    """The tolerance for outputs computed in ``dtype`` (float64 and other dtypes: float32's)."""
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def is_close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None) -> bool:
    """Same shape, every element finite and within ``tolerance(dtype)`` (default: ``got``'s dtype)."""
    limits = tolerance(dtype or got.dtype)
    if got.shape != expected.shape or not torch.isfinite(got).all():
        return False
    return bool(torch.allclose(got.double(), expected.double(), rtol=limits.rtol, atol=limits.atol))


def assert_close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None) -> None:
    """``torch.testing.assert_close`` with the table's tolerance, both sides compared in float64 on the CPU."""
    torch.testing.assert_close(got.detach().double().cpu(), expected.detach().double().cpu(),
                               **tolerance(dtype or got.dtype).as_kwargs())


@contextmanager
def full_fp32_matmul() -> Iterator[None]:
    """Inside the block, float32 matrix products on a GPU are full float32 (no TF32), as under the interpreter."""
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")   # "high" would allow TF32 in cuBLAS's float32 products
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
