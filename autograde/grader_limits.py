"""The grading process's own limits: memory, and CPU time per test cell.

Test cells run in the grader (``testcells``), in the process nbgrader autogrades a submission in,
and a value the student's code returned drives what they do there. The values are bounded on
receipt (``course_lib.runner.receipt``), but a check still does work proportional to them, and a
C call (a ``list()``, a hash, a big multiplication) holds the process until it returns: neither
the cell's alarm nor any Python code of the grader runs meanwhile. So the process gets limits of
its own, from ``KernelLimits`` (``course grade --limits grader_memory=...,grader_cpu=...``):

- ``grader_memory``: its data limit (RLIMIT_DATA, the soft limit only: the student kernels it
  starts set their own). An allocation past it fails at once, as a MemoryError (or PyTorch's
  "can't allocate memory") in the check that made it: the test cell fails with the grader's own
  sentence (``GRADER_MEMORY``), and grading goes on.
- ``grader_cpu``: CPU seconds one test cell may use in the grader, all its threads together
  (RLIMIT_CPU's soft limit, moved before each test cell). The cell's wall-clock alarm stops Python
  code well before; only a C call that never returns reaches it, and then the kernel of the
  operating system ends the process with SIGXCPU, whatever it is doing: that submission alone is
  reported as not graded, with ``stopped_by_limit``'s sentence. The other submissions are graded by
  processes of their own.
"""

from __future__ import annotations

import contextlib
import resource
import signal
import time

from course_lib.runner.limits import KernelLimits, format_bytes, format_seconds

__all__ = ["apply_grader_memory", "cell_cpu_budget", "grader_enforcement", "grader_memory_sentence",
           "stopped_by_limit"]


def _lower_soft(which: int, soft: int) -> None:
    """Set the soft limit ``which`` to ``soft`` (never past the hard limit, which stays as it is)."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def apply_grader_memory(limits: KernelLimits) -> None:
    """This (the grading) process's data limit, and no core file if a limit ends it."""
    _lower_soft(resource.RLIMIT_DATA, limits.grader_memory)
    _lower_soft(resource.RLIMIT_CORE, 0)


@contextlib.contextmanager
def cell_cpu_budget(limits: KernelLimits, wall_s: float = 0):
    """Run one test cell with ``limits.grader_cpu`` CPU seconds from now (never fewer than the cell's own
    wall-clock limit ``wall_s``, so the alarm stops Python code first) as this process's soft CPU limit.

    Past it the system sends SIGXCPU, whose default action ends the process: no handler is set, as
    a Python handler would only run once the C call that overran returned.
    """
    used = time.process_time()
    before = resource.getrlimit(resource.RLIMIT_CPU)
    _, hard = before
    soft = int(used) + 1 + max(limits.grader_cpu, int(wall_s) + 1)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CPU, before)


def grader_memory_sentence(limits: KernelLimits) -> str:
    """What a test cell shows when a check passed the grader's memory limit (the grader's own words)."""
    return (f"the grader's memory limit of {format_bytes(limits.grader_memory)} was reached while a check worked on "
            "what your code returned (a value far larger than the exercise needs?)")


def stopped_by_limit(returncode: int | None, limits: KernelLimits) -> str | None:
    """The sentence for a grading process the system ended at one of its limits, or None."""
    if returncode is not None and returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return (f"grading was stopped: a test cell made the grader work past its CPU-time limit of "
                f"{format_seconds(limits.grader_cpu)} per test cell (a check on what your code returned never "
                "finished); this submission was not graded, the others were")
    return None


def grader_enforcement(limits: KernelLimits) -> list[str]:
    """How each of the grading process's limits is enforced, one sentence each (``course grade``'s header)."""
    return [f"memory {format_bytes(limits.grader_memory)}: the grading process's data limit (setrlimit); a check's "
            "allocation past it fails that test cell",
            f"CPU {format_seconds(limits.grader_cpu)} per test cell: the grading process's CPU limit, moved before "
            "each test cell (setrlimit); past it the system ends the process and that submission is reported as not "
            "graded",
            "every value a kernel sends is bounded on receipt (items, characters, bytes, int bits, nesting, tensor "
            "bytes): docs/trust-model.md"]
