"""Compiling a submission's Triton kernels for the course's GPU, in the grader's sandbox.

Lab 0.3's compile check (``course_lib.checks.kernels_compile``) runs in a test cell, here in the
grader. It compiles the kernels' source as the student handed it in: the code cells this grader
sent to the student's kernel before the test cell (``execute.IsolatedExecute`` collects them). The
compile itself is Triton's compiler working on that source, so it runs like the student's kernel
does: in the sandbox (``course_lib.runner.sandbox``: the instructor's files hidden, no network, a
private ``/tmp`` of ``COMPILE_SCRATCH_BYTES``, its own process tree, every capability dropped), as
a user id of its own when the grader runs as root (``compile_uid``: not the kernel's, so the
student's kernel can neither signal it nor share its process limit), and under the worker's limits
on memory, CPU time and file size. Its Triton cache lives in that private ``/tmp``: no compile
result is shared between submissions, so none can be planted for another. What comes back is read
by the grader: one bounded line of JSON per configuration (``course_lib.kernels.gpu_compile``).
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Callable

from course_lib.runner.sandbox import (KERNEL_UID_BASE, NONE, SEED_INSIDE, default_plan, detect_isolation,
                                       kernel_python, wrap_command)

__all__ = ["COMPILE_SCRATCH_BYTES", "compile_uid", "sandboxed_worker"]

COMPILE_SCRATCH_BYTES = 512 << 20   # the worker's /tmp: its Triton cache, ptxas's files (a few MB per kernel)
COMPILE_UID_BASE = KERNEL_UID_BASE + (1 << 29)   # above every kernel_uid (those stay below KERNEL_UID_BASE + 2**28)
_WORKERS = itertools.count()


def compile_uid(counter: int) -> int:
    """A user id for one compile worker: from this grader process's id and its worker ``counter``."""
    return COMPILE_UID_BASE + (os.getpid() % (1 << 22)) * 64 + counter % 64


def sandboxed_worker(hidden: list[Path]) -> Callable[[Path], object]:
    """How the grader starts a compile worker: in the sandbox this machine offers, ``hidden`` hidden.

    Without a sandbox (``course grade`` says so in its header) the worker is a plain subprocess under
    its limits, like the kernels then are. (``course_lib.kernels`` is imported only when a compile
    starts: it imports torch, which a grader of the other labs never needs.)
    """
    isolation = detect_isolation()

    def start(folder: Path):
        from course_lib.kernels.gpu_compile import WORKER_FILE, WorkerCommand, local_worker, worker_environment

        if isolation.name == NONE:
            return local_worker(folder)
        uid = compile_uid(next(_WORKERS)) if os.geteuid() == 0 and shutil.which("setpriv") else None
        plan = default_plan(workdir=folder, edition=folder, extra_hidden=hidden,
                            scratch_bytes=COMPILE_SCRATCH_BYTES, uid=uid)
        command = [kernel_python(), "-I", str(SEED_INSIDE / WORKER_FILE.name)]
        return WorkerCommand(wrap_command(command, plan, isolation, workdir=Path("/tmp")),
                             worker_environment("/tmp", "/tmp/triton-cache"), folder)

    return start
