"""Compile Triton kernels for a GPU this machine does not have, each compile bounded in time, and say
whether each one fits the GPU: registers, shared memory, spills.

Triton compiles ahead of time for a named target with no GPU present: ``triton.compile(ASTSource(fn,
signature, constexprs), target=GPUTarget("cuda", 90, 32))`` lowers the kernel through Triton's IR,
LLVM and PTX to a cubin with ptxas (which ships with Triton), a second or two per kernel. The
interpreter that runs the course's kernels on a CPU knows nothing of this: it runs programs that the
GPU compiler refuses (a Python ``break``, a global that is not a ``tl.constexpr``), programs that
need more shared memory than a GPU has, and takes no time to "compile" a block that makes ptxas run
for minutes. This module gives a CPU-only machine the GPU's verdict:

- ``compile_kernels(module, builds, target)`` compiles each ``KernelBuild`` (a kernel of a
  ``kernel_source.KernelModule`` with its argument types and ``tl.constexpr`` values) in a worker
  process (``compile_worker.py``), one build at a time; a build that has not finished after
  ``timeout`` seconds is a failure ("did not finish compiling within 60 s"), its worker is killed
  and a fresh one takes the builds left;
- each ``BuildReport`` holds the compiler's error or the kernel's resources: registers per thread
  and stack frame read from the cubin (``cubin.cubin_resources``), bytes spilled from ptxas's report,
  shared memory from Triton's metadata, and any ``tl.dot`` on fp32 inputs that a GPU runs in TF32
  (10 bits of mantissa: the interpreter computes those products in full fp32, a GPU does not unless
  asked, ``input_precision="ieee"``);
- ``BuildReport.problems`` says why a compiled kernel cannot launch on the target (shared memory or
  registers past its limits, ``gpu_targets``).

How the worker starts is a parameter (``start_worker``): locally it is a plain subprocess with
limits on memory, CPU time and file size; the grader starts it in its sandbox, since a student's
kernel source is what it compiles. The worker gets a Triton cache of its own each time, so no
compile result crosses from one submission to another.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from course_lib.kernels.cubin import CubinError, cubin_resources, ptxas_report
from course_lib.kernels.gpu_targets import GpuTarget
from course_lib.kernels.kernel_source import KernelModule

__all__ = ["BuildReport", "KernelBuild", "WorkerCommand", "WorkerLimits", "compile_kernels", "local_worker",
           "WORKER_FILE"]

WORKER_FILE = Path(__file__).with_name("compile_worker.py")
DEFAULT_TIMEOUT_S = 60.0
MAX_RESULT_LINE = 32 << 20     # bytes of one result line (a cubin in base64, the ptxas report)
STDERR_KEPT = 4000
TF32_DOT = re.compile(r"tt\.dot .*inputPrecision = (tf32\w*) : tensor<[^>]*xf32> \* tensor<[^>]*xf32>")


@dataclass(frozen=True)
class KernelBuild:
    """One compile: ``kernel`` with argument types and ``tl.constexpr`` values, as a launch would give them.

    ``signature`` maps every parameter to a Triton type (``"*fp32"`` for a pointer to float32 data,
    ``"i32"``, ``"fp32"``) or ``"constexpr"``; ``constexprs`` gives the value of each constexpr.
    ``label`` says in words what launch this stands for (``"float32 rows of 4,097 columns"``).
    """

    kernel: str
    signature: dict[str, str]
    constexprs: dict[str, object] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 3
    label: str = ""

    def describe(self) -> str:
        if self.label:
            return self.label
        return ", ".join(f"{name}={value}" for name, value in self.constexprs.items()) or "no constexprs"

    def request(self) -> dict:
        return {"kernel": self.kernel, "signature": dict(self.signature), "constexprs": dict(self.constexprs),
                "options": {"num_warps": self.num_warps, "num_stages": self.num_stages}}


@dataclass(frozen=True)
class BuildReport:
    """The compiler's verdict on one build for one target (None: not known, e.g. it did not compile)."""

    build: KernelBuild
    target: GpuTarget
    compiled: bool
    error: str | None = None
    timed_out: bool = False
    shared_memory: int | None = None
    registers: int | None = None
    stack_frame: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    ptxas_registers: int | None = None   # ptxas's own count (its -v report): the cubin's, read another way
    threads: int | None = None
    tf32_products: tuple[str, ...] = ()
    seconds: float | None = None

    @property
    def problems(self) -> list[str]:
        """Why the compiled kernel cannot be launched on the target (empty when it can)."""
        if not self.compiled:
            return []
        found = []
        target = self.target
        if self.shared_memory is not None and self.shared_memory > target.shared_memory_per_block:
            found.append(f"needs {self.shared_memory:,} bytes of shared memory per program; the {target.name} has "
                         f"{target.shared_memory_per_block:,} ({target.shared_memory_per_block // 1024} KB) per block")
        if self.registers is not None and self.threads is not None \
                and self.registers * self.threads > target.registers_per_block:
            found.append(f"{self.threads} threads x {self.registers} registers = {self.registers * self.threads:,} "
                         f"registers; a block may hold {target.registers_per_block:,}")
        return found

    @property
    def fits(self) -> bool:
        return self.compiled and not self.problems

    def resources(self) -> str:
        """``"26 registers/thread, 0 B shared memory, no spills"``."""
        spilled = (self.spill_stores or 0) + (self.spill_loads or 0)
        if self.spill_stores is None and self.stack_frame:
            spills = f"{self.stack_frame} B stack frame per thread (spills)"
        elif spilled:
            spills = f"spills {self.spill_stores} B stored / {self.spill_loads} B loaded per thread"
        else:
            spills = "no spills"
        return f"{self.registers} registers/thread, {self.shared_memory:,} B shared memory, {spills}"

    def verdict(self) -> str:
        """One line: the build, and what the compiler said or what it costs."""
        where = f"{self.build.kernel} [{self.build.describe()}] for the {self.target}"
        if not self.compiled:
            return f"{where}: does not compile: {first_lines(self.error or 'unknown error')}"
        if self.problems:
            return f"{where}: compiles but does not fit: {'; '.join(self.problems)}"
        return f"{where}: {self.resources()}"


def first_lines(text: str, lines: int = 12, width: int = 1500) -> str:
    """The start of a compiler message, short enough for feedback."""
    kept = "\n".join(text.strip().splitlines()[:lines])
    return kept if len(kept) <= width else kept[:width] + " [...]"


@dataclass(frozen=True)
class WorkerLimits:
    """What one compile worker may use (its ptxas included): memory, CPU seconds, bytes of a written file."""

    memory: int = 4 << 30
    cpu: int = 15 * 60
    file: int = 256 << 20

    def as_dict(self) -> dict:
        return {"memory": self.memory, "cpu": self.cpu, "file": self.file}


@dataclass
class WorkerCommand:
    """How to run ``compile_worker.py`` found in a folder: the command line, its environment and folder."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


def worker_environment(home: str, cache: str) -> dict[str, str]:
    """The environment a worker needs: a Triton cache of its own, ptxas's report kept, nothing of the caller's."""
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": home,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TRITON_CACHE_DIR": cache,
        "TRITON_DUMP_PTXAS_LOG": "1",
        "TRITON_DEFAULT_FP_FUSION": "1",    # Triton 3.9's default, stated (it warns when unset)
        "TRITON_INTERPRET": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def local_worker(folder: Path) -> WorkerCommand:
    """Run the worker as a plain subprocess of this Python (the student's own machine, or CI)."""
    return WorkerCommand([sys.executable, "-I", str(folder / WORKER_FILE.name)],
                         worker_environment(str(folder), str(folder / "triton-cache")), folder)


StartWorker = Callable[[Path], WorkerCommand]


def compile_kernels(module: KernelModule, builds: Sequence[KernelBuild], target: GpuTarget, *,
                    timeout: float = DEFAULT_TIMEOUT_S, start_worker: StartWorker = local_worker,
                    limits: WorkerLimits = WorkerLimits(), stop_at_first_failure: bool = False,
                    on_report: Callable[[BuildReport], None] | None = None) -> list[BuildReport]:
    """Compile every build of ``module`` for ``target``; one report per build, in order (module docstring).

    ``timeout``: seconds one build may take. ``stop_at_first_failure``: return after the first build that
    does not compile or does not fit (the reports end there). ``on_report`` is called as each report
    arrives (progress).
    """
    reports: list[BuildReport] = []
    while len(reports) < len(builds):
        finished = _run_worker(module, list(builds[len(reports):]), target, timeout, start_worker, limits,
                               stop_at_first_failure)
        for report in finished:
            reports.append(report)
            if on_report is not None:
                on_report(report)
        if stop_at_first_failure and any(not report.fits for report in finished):
            break
    return reports


def _run_worker(module: KernelModule, builds: list[KernelBuild], target: GpuTarget, timeout: float,
                start_worker: StartWorker, limits: WorkerLimits, stop_at_first_failure: bool) -> list[BuildReport]:
    """Reports for a prefix of ``builds``: all of them, or up to the one that timed out or killed the worker."""
    folder = Path(tempfile.mkdtemp(prefix="course-gpu-compile-"))
    try:
        shutil.copy(WORKER_FILE, folder / WORKER_FILE.name)
        os.chmod(folder, 0o755)
        os.chmod(folder / WORKER_FILE.name, 0o644)
        command = start_worker(folder)
        cpu = min(limits.cpu, int(timeout * len(builds)) + 30)
        request = {"source": module.text, "kernels": list(module.kernels),
                   "target": {"arch": target.arch, "warp_size": target.warp_size},
                   "builds": [build.request() for build in builds],
                   "limits": {**limits.as_dict(), "cpu": cpu}}
        with tempfile.TemporaryFile() as errors:
            process = subprocess.Popen(command.argv, cwd=command.cwd, env=command.env, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=errors, start_new_session=True)
            try:
                return _collect(process, builds, target, timeout, json.dumps(request).encode(), errors,
                                stop_at_first_failure)
            finally:
                _kill(process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _collect(process: subprocess.Popen, builds: list[KernelBuild], target: GpuTarget, timeout: float,
             request: bytes, errors, stop_at_first_failure: bool) -> list[BuildReport]:
    try:
        process.stdin.write(request)
        process.stdin.close()
    except OSError:
        pass   # the worker died at once: the first read says so
    reports: list[BuildReport] = []
    lines = _LineReader(process.stdout)
    for build in builds:
        started = time.monotonic()
        line = lines.next(timeout)
        if line is _LineReader.TIMEOUT:
            reports.append(BuildReport(build, target, False, f"did not finish compiling within {timeout:g} s "
                                                             "(a runaway compile is a failure)", timed_out=True,
                                       seconds=time.monotonic() - started))
            return reports
        if line is None:
            reports.append(BuildReport(build, target, False, "the compiler stopped without a result: "
                                                             + _tail(process, errors)))
            return reports
        reports.append(_report(build, target, line))
        if stop_at_first_failure and not reports[-1].fits:
            return reports
    return reports


class _LineReader:
    """Lines from a pipe, each awaited for at most a given time, each at most MAX_RESULT_LINE bytes."""

    TIMEOUT = object()

    def __init__(self, pipe) -> None:
        self.fd = pipe.fileno()
        self.buffer = b""
        self.closed = False

    def next(self, timeout: float):
        """The next line (bytes), None at the end of the stream (or a line too long), or TIMEOUT."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                if self.closed or len(self.buffer) > MAX_RESULT_LINE:
                    return None
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    return self.TIMEOUT
                chunk = os.read(self.fd, 1 << 20)
                self.closed = not chunk
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


def _tail(process: subprocess.Popen, errors) -> str:
    try:
        code = process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        code = None
    errors.seek(0)
    text = errors.read().decode("utf-8", "replace").strip()[-STDERR_KEPT:]
    status = f"exit code {code}" if code is not None and code >= 0 else (
        f"killed by signal {-code}" if code is not None else "still running")
    if code is not None and -code in (signal.SIGKILL, signal.SIGXCPU):
        status += " (a limit on memory or CPU time, or the timeout)"
    return f"{status}; {first_lines(text.splitlines()[-1] if text else 'nothing on stderr', 3)}"


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            process.kill()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    if process.stdout is not None:
        process.stdout.close()


def _report(build: KernelBuild, target: GpuTarget, line: bytes) -> BuildReport:
    """A report from one result line of the worker, every field checked for its type."""
    try:
        result = json.loads(line)
        if not isinstance(result, dict):
            raise ValueError("not an object")
    except ValueError as error:
        return BuildReport(build, target, False, f"unreadable result from the compiler ({error})")
    seconds = result.get("seconds") if isinstance(result.get("seconds"), (int, float)) else None
    if result.get("ok") is not True:
        error = result.get("error")
        return BuildReport(build, target, False, str(error)[:8000] if error else "unknown error", seconds=seconds)
    try:
        cubin = base64.b64decode(str(result.get("cubin", "")), validate=True)
        resources = cubin_resources(cubin, build.kernel)
    except (binascii.Error, CubinError) as error:
        return BuildReport(build, target, False, f"the compiled kernel could not be read: {error}", seconds=seconds)
    log = ptxas_report(str(result.get("ptxas_log", "")), build.kernel)
    shared = result.get("shared")
    num_warps = result.get("num_warps")
    dots = [str(line) for line in result.get("dots", []) if isinstance(line, str)]
    return BuildReport(
        build, target, True,
        shared_memory=shared if isinstance(shared, int) and shared >= 0 else None,
        registers=resources.registers, stack_frame=resources.stack_frame,
        spill_stores=log.spill_stores, spill_loads=log.spill_loads, ptxas_registers=log.registers,
        threads=num_warps * target.warp_size if isinstance(num_warps, int) and num_warps > 0 else None,
        tf32_products=tuple(line for line in dots if TF32_DOT.search(line)), seconds=seconds)
