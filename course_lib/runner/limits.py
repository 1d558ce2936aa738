"""What one graded kernel may use (memory, processes, CPU time, file and disk bytes, wall time, output), and
what the grading process that runs its test cells may use (memory, CPU time per test cell).

The limits follow the trusted autograders' habit (autograder.io's sandbox: 4 GB of memory, 512
processes, a time limit per command, output truncated past a size): each is a number with a
documented default that an instructor can read and change (``course grade --limits``), and each
has a negative control among the demo students (``attack-memory-hog``, ``attack-process-storm``...).

A *kernel* is the process tree that runs one student notebook. What each limit does:

- ``memory``: the kernel's processes together may hold this much memory; past it the kernel is
  stopped ("memory limit of 4 GB reached"). Each process also gets it as its data limit
  (RLIMIT_DATA), so one huge allocation fails at once with a MemoryError instead of growing.
- ``processes``: processes and threads of the kernel (RLIMIT_NPROC of a user id of its own, or a
  cgroup's pids.max); a fork past it fails in the student's code.
- ``cpu``: CPU seconds of the kernel's processes together (all cells of the notebook).
- ``file``: the largest file the kernel may write (RLIMIT_FSIZE); a write past it fails.
- ``disk``: bytes the working folder, ``/tmp`` and ``/dev/shm`` may hold together (a tmpfs of this
  size inside the sandbox); a write past it fails with "No space left on device".
- ``notebook``: wall time of one notebook, all its cells; the cells after it are not run.
- ``output``: bytes of output one cell keeps (text streams keep their head and tail, ``stream``
  bytes in all, and say how much was cut); what the student's code prints during a hidden check
  is never kept.

The grading process (nbgrader's, where the test cells run against the kernel) has two of its own
(``autograde.grader_limits``), so that what a check does with a student's value costs at most that
cell, or that submission, never the worker or the machine:

- ``grader_memory``: the process's data limit; a check's allocation past it fails, and the cell
  with it ("the grader's memory limit of 8 GB was reached ...").
- ``grader_cpu``: CPU seconds one test cell may use in the grader, its threads together; past it
  (only a C call that never returns gets there: the cell's alarm stops Python code first) the
  system ends the process, and that submission is reported as not graded, with the reason.

The per-cell time limit stays ``--timeout``. A submission's grading job gets, per notebook, the
smaller of (code cells x (timeout + grace)) and the notebook limit, plus start-up: with the
defaults at most ``max_job_seconds(notebooks=5)`` / 60 = 100 minutes for a five-chapter lab.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

__all__ = ["KernelLimits", "LimitsError", "format_bytes", "format_seconds", "parse_limits"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

KERNEL_START_S = 180      # the kernel's start-up (imports) may take this long
CELL_GRACE_S = 25         # past a cell's limit: the interrupt's grace, then the kill
NOTEBOOK_OVERHEAD_S = 60  # closing the kernel, restoring and saving the notebook
FEEDBACK_S = 300          # rendering the feedback pages of one submission


class LimitsError(ValueError):
    """A --limits value that cannot be read; the message names the key and what is allowed."""


@dataclass(frozen=True)
class KernelLimits:
    """The limits of one graded kernel (see the module docstring for what each one does)."""

    memory: int = 4 * GiB          # bytes, all the kernel's processes together
    processes: int = 512           # processes and threads
    cpu: int = 20 * 60             # CPU seconds, all processes and cells together
    file: int = 1 * GiB            # bytes, the largest file written
    disk: int = 1 * GiB            # bytes in the working folder, /tmp and /dev/shm together
    notebook: int = 15 * 60        # wall seconds for one notebook's cells
    output: int = 2 * MiB          # bytes of output kept per cell
    stream: int = 100 * KiB        # bytes of printed text kept per cell (head and tail)
    grader_memory: int = 8 * GiB   # bytes, the grading process's data limit
    grader_cpu: int = 10 * 60      # CPU seconds of the grading process per test cell

    def __post_init__(self) -> None:
        minimum = {"memory": 64 * MiB, "processes": 16, "cpu": 10, "file": 1 * MiB, "disk": 1 * MiB,
                   "notebook": 10, "output": 4 * KiB, "stream": 1 * KiB, "grader_memory": 512 * MiB,
                   "grader_cpu": 10}
        for item in fields(self):
            value = getattr(self, item.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum[item.name]:
                raise LimitsError(f"limit {item.name} must be a whole number >= {_shown(item.name, minimum[item.name])}, "
                                  f"got {value!r}")
        if self.stream > self.output:
            raise LimitsError(f"limit stream ({format_bytes(self.stream)}) cannot exceed output "
                              f"({format_bytes(self.output)}): printed text is part of a cell's output")

    # ---- what the grader derives from them ---------------------------------------------------

    def notebook_seconds(self, code_cells: int, cell_timeout: float) -> float:
        """The wall-time bound of one notebook: its code cells each at their limit, or the notebook limit."""
        return min(code_cells * (cell_timeout + CELL_GRACE_S), self.notebook) + KERNEL_START_S + NOTEBOOK_OVERHEAD_S

    def job_seconds(self, code_cells_per_notebook: list[int], cell_timeout: float) -> float:
        """How long one submission's grading job may run before it is stopped (feedback included)."""
        return sum(self.notebook_seconds(cells, cell_timeout) for cells in code_cells_per_notebook) + FEEDBACK_S

    def max_job_seconds(self, notebooks: int) -> float:
        """The most a submission of ``notebooks`` notebooks can take, whatever its cells."""
        return notebooks * (self.notebook + KERNEL_START_S + NOTEBOOK_OVERHEAD_S) + FEEDBACK_S

    def summary(self) -> str:
        """One line for ``course grade``'s header."""
        return (f"memory {format_bytes(self.memory)}, {self.processes} processes, CPU {format_seconds(self.cpu)}, "
                f"files {format_bytes(self.file)}, disk {format_bytes(self.disk)}, notebook "
                f"{format_seconds(self.notebook)}, output {format_bytes(self.output)} per cell")

    def grader_summary(self) -> str:
        """One line for ``course grade``'s header: the grading process's own limits."""
        return f"memory {format_bytes(self.grader_memory)}, CPU {format_seconds(self.grader_cpu)} per test cell"

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "KernelLimits":
        known = {item.name for item in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise LimitsError(f"unknown limit {unknown[0]!r}; the limits are {', '.join(sorted(known))}")
        return cls(**{name: int(value) for name, value in data.items()})


# ---- reading --limits -------------------------------------------------------------------------

_BYTE_UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB,
               "g": GiB, "gb": GiB, "gib": GiB, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
_TIME_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
_BYTE_LIMITS = {"memory", "file", "disk", "output", "stream", "grader_memory"}
_TIME_LIMITS = {"cpu", "notebook", "grader_cpu"}
_VALUE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def _shown(name: str, value: int) -> str:
    if name in _BYTE_LIMITS:
        return format_bytes(value)
    if name in _TIME_LIMITS:
        return format_seconds(value)
    return str(value)


def _parse_value(name: str, text: str) -> int:
    match = _VALUE.match(text)
    units = _BYTE_UNITS if name in _BYTE_LIMITS else _TIME_UNITS if name in _TIME_LIMITS else {"": 1}
    if not match or match.group(2).lower() not in units:
        allowed = {"memory": "bytes such as 4GB, 512MB", "file": "bytes such as 1GB", "disk": "bytes such as 1GB",
                   "output": "bytes such as 2MB", "stream": "bytes such as 100KB", "cpu": "seconds, or 20m, 1h",
                   "notebook": "seconds, or 15m", "processes": "a whole number such as 512",
                   "grader_memory": "bytes such as 8GB", "grader_cpu": "seconds, or 10m"}[name]
        raise LimitsError(f"--limits {name}={text!r}: expected {allowed}")
    return int(float(match.group(1)) * units[match.group(2).lower()])


def parse_limits(specs: list[str] | None, base: KernelLimits | None = None) -> KernelLimits:
    """``base`` (the defaults) changed by each spec: ``key=value[,key=value...]`` or a file of ``key = value`` lines.

    >>> parse_limits(["memory=2GB,processes=256"]).memory == 2 * GiB
    True
    """
    limits = base or KernelLimits()
    known = {item.name for item in fields(KernelLimits)}
    changes: dict[str, int] = {}
    for spec in specs or []:
        if "=" not in spec:
            path = Path(spec)
            if not path.is_file():
                raise LimitsError(f"--limits {spec!r}: neither key=value pairs nor a file (keys: {', '.join(sorted(known))})")
            pairs = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
            pairs = [pair for pair in pairs if pair]
        else:
            pairs = [pair.strip() for pair in spec.split(",") if pair.strip()]
        for pair in pairs:
            key, separator, value = pair.partition("=")
            key = key.strip().lower()
            if not separator or key not in known:
                raise LimitsError(f"--limits: unknown limit {key!r} in {pair!r}; the limits are {', '.join(sorted(known))}")
            changes[key] = _parse_value(key, value.strip())
    return replace(limits, **changes) if changes else limits


def limits_from_environment(variable: str) -> KernelLimits:
    raw = os.environ.get(variable)
    return KernelLimits.from_dict(json.loads(raw)) if raw else KernelLimits()


def format_bytes(value: int) -> str:
    """4294967296 -> "4 GB" (binary units, as ulimit and the sandbox count them)."""
    for unit, size in (("TB", 1 << 40), ("GB", GiB), ("MB", MiB), ("KB", KiB)):
        if value >= size:
            shown = value / size
            return f"{shown:.0f} {unit}" if shown == int(shown) or shown >= 10 else f"{shown:.1f} {unit}"
    return f"{value} bytes"


def format_seconds(value: float) -> str:
    """1200 -> "20 min", 45 -> "45 s", 5400 -> "90 min"."""
    if value >= 60 and value % 60 == 0:
        return f"{value // 60:g} min"
    return f"{value:g} s"
