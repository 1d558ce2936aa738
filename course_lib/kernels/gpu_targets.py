"""The GPUs the course's kernels must compile for, and the limits one program (a thread block) meets there.

A Triton program runs as one CUDA thread block of ``num_warps x 32`` threads. Whether it can be
launched at all on a GPU depends on three numbers of that GPU, from NVIDIA's table of compute
capabilities (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"):

- **shared memory per block**: the most a block may ask for (the opt-in maximum: 163 KB on an A100,
  227 KB on an H100). Triton asks for the shared memory its compiled kernel needs (tiles of a
  ``tl.dot``, scratch for reductions and layout changes) when it launches; past the maximum the
  launch fails ("out of resource: shared memory").
- **registers per block**: 65,536 32-bit registers per SM, and a block must fit in them, so
  ``threads x registers per thread <= 65,536``.
- **registers per thread**: at most 255; ptxas keeps to it by *spilling* the rest to local memory
  (slow, but it runs), which ``BuildReport.spill_stores`` shows.

``COURSE_GPU`` is the GPU the course's GPU checks run on (an H100); ``CI_TARGETS`` the ones every
course kernel is compiled for in CI (an A100 and an H100).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["A100", "CI_TARGETS", "COURSE_GPU", "GpuTarget", "H100", "TARGETS", "target_named"]

KB = 1024


@dataclass(frozen=True)
class GpuTarget:
    """One GPU as the compiler sees it: its compute capability and its per-block limits."""

    name: str                      # "H100"
    arch: int                      # compute capability x 10: 90 for sm_90
    shared_memory_per_block: int   # bytes, the opt-in maximum
    registers_per_block: int = 65_536
    registers_per_thread: int = 255
    warp_size: int = 32

    @property
    def sm(self) -> str:
        return f"sm_{self.arch}"

    def __str__(self) -> str:
        return f"{self.name} ({self.sm})"


A100 = GpuTarget("A100", 80, 163 * KB)
H100 = GpuTarget("H100", 90, 227 * KB)
TARGETS = {target.sm: target for target in (A100, H100)}
COURSE_GPU = H100
CI_TARGETS = (A100, H100)


def target_named(name: str) -> GpuTarget:
    """The target called ``sm_80`` / ``sm_90`` (or ``A100`` / ``H100``)."""
    for target in TARGETS.values():
        if name in (target.sm, target.name):
            return target
    raise ValueError(f"unknown GPU target {name!r}; known: {', '.join(f'{t.sm} ({t.name})' for t in TARGETS.values())}")
