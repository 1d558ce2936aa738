"""The grader's eye on one kernel's processes: memory, CPU time, process count, scratch disk.

The kernel sets its own per-process limits before any student code runs (``rlimits``: a data
segment of at most the memory limit, CPU seconds, file size, process count, no core files), and
the sandbox gives it a tmpfs of the disk limit. What no per-process limit can see is the kernel as
a whole: ten processes of 3 GB each are each within a 4 GB limit. ``Watchdog`` is a thread of the
grader that reads ``/proc`` twice a second (ten times when memory runs high) and stops the kernel,
whole process tree, the moment its processes together pass the memory, CPU-time or process limit,
or its scratch folder holds too many files; ``on_limit`` gets the reason the feedback shows
("memory limit of 4 GB reached").

The kernel's processes are those of its own user id when it has one (every process it starts,
whatever it does to its session or parent), else the descendants of the process the grader
started. Memory is counted as the processes' anonymous and shared memory (RssAnon + RssShmem: a
``mmap(MAP_SHARED)`` block escapes every per-process limit), confirmed with the proportional count
(Pss_Anon + Pss_Shmem) when it passes the limit, so pages that forked processes share are counted
once.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from course_lib.runner.limits import KernelLimits, format_bytes, format_seconds

__all__ = ["KernelCgroup", "Usage", "Watchdog", "apply_rlimits", "enforcement", "kernel_processes", "limit_message",
           "name_the_limit"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
FILES_PER_DISK_BYTES = 4096   # the scratch tmpfs may hold one file per 4 KB of its size (each costs kernel memory)


@dataclass
class Usage:
    """What a kernel's processes use at one moment."""

    processes: int = 0       # tasks (processes and threads), as RLIMIT_NPROC counts them
    memory: int = 0          # bytes of anonymous memory
    cpu: float = 0.0         # seconds of CPU, live processes and those they waited for
    disk: int | None = None  # bytes in the scratch tmpfs (None: not measurable here)
    files: int | None = None


def apply_rlimits(limits: KernelLimits, *, processes: bool) -> None:
    """Set this process's hard and soft limits (the kernel calls it first thing; children inherit them).

    ``processes``: also RLIMIT_NPROC (meaningful only under a user id of the kernel's own: it
    counts every process of the user, and root ignores it).
    """
    import resource

    def set_limit(which: int, soft: int, hard: int | None = None) -> None:
        hard = soft if hard is None else hard
        current_soft, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            hard, soft = min(hard, current_hard), min(soft, current_hard)
        resource.setrlimit(which, (soft, hard))

    set_limit(resource.RLIMIT_DATA, limits.memory)
    set_limit(resource.RLIMIT_CPU, limits.cpu, limits.cpu + 10)
    set_limit(resource.RLIMIT_FSIZE, limits.file)
    set_limit(resource.RLIMIT_CORE, 0)
    if processes:
        set_limit(resource.RLIMIT_NPROC, limits.processes)


def max_scratch_files(limits: KernelLimits) -> int:
    """How many files the kernel's scratch folder may hold (each costs the system's memory, not disk)."""
    return max(10_000, limits.disk // FILES_PER_DISK_BYTES)


def limit_message(name: str, limits: KernelLimits) -> str:
    """The sentence a student reads when the kernel passed limit ``name`` ("files": the scratch folder's)."""
    value = max_scratch_files(limits) if name == "files" else getattr(limits, name)
    shown = {"memory": f"memory limit of {format_bytes(value)}", "processes": f"process limit of {value}",
             "cpu": f"CPU-time limit of {format_seconds(value)}", "file": f"file-size limit of {format_bytes(value)}",
             "disk": f"disk limit of {format_bytes(value)}", "files": f"limit of {value} files in the scratch folder",
             "notebook": f"time limit of {format_seconds(value)} for the whole notebook"}
    return f"{shown.get(name, name)} reached"


# What the student's code sees when it meets a limit inside the kernel: (limit, words in the error).
_LIMIT_SIGNS = (
    ("memory", ("MemoryError", "Cannot allocate memory", "can't allocate memory", "Unable to allocate")),
    ("disk", ("No space left on device", "database or disk is full")),
    ("file", ("File too large",)),
    ("processes", ("can't start new thread", "Resource temporarily unavailable")),
)


def name_the_limit(output: dict, limits: KernelLimits, peak_processes: int = 0) -> dict:
    """An error output a limit caused (MemoryError, ENOSPC...) with the limit's sentence in front of it.

    A refused fork or thread (EAGAIN) names the process limit only when the kernel came near it
    (``peak_processes``): a non-blocking socket says "Resource temporarily unavailable" too.
    """
    if output.get("output_type") != "error":
        return output
    text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
    for name, signs in _LIMIT_SIGNS:
        if name == "processes" and peak_processes < 0.9 * limits.processes:
            continue
        if any(sign in text for sign in signs):
            message = limit_message(name, limits)
            if not str(output.get("evalue", "")).startswith(message):
                output = {**output, "evalue": f"{message}: {output.get('evalue') or output.get('ename')}"}
            break
    return output


# ---- reading /proc ------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read()
    except OSError:
        return None


def _status_fields(pid: int) -> dict[str, str]:
    text = _read(f"/proc/{pid}/status") or ""
    result = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        result[key] = value.strip()
    return result


def _all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _parent_of(pid: int) -> int | None:
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    try:
        return int(text[text.rindex(")") + 2:].split()[1])
    except (ValueError, IndexError):
        return None


def kernel_processes(root_pid: int | None, uid: int | None) -> list[int]:
    """The kernel's processes: every process of ``uid`` (when it has one), else ``root_pid`` and its descendants."""
    pids = _all_pids()
    if uid is not None:
        found = []
        for pid in pids:
            real_uid = _status_fields(pid).get("Uid", "").split()
            if real_uid and real_uid[0] == str(uid):
                found.append(pid)
        return found
    if root_pid is None:
        return []
    children: dict[int, list[int]] = {}
    for pid in pids:
        parent = _parent_of(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _cpu_seconds(pid: int) -> float:
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return 0.0
    try:
        fields = text[text.rindex(")") + 2:].split()
        return sum(int(value) for value in fields[11:15]) / _TICKS   # utime, stime, cutime, cstime
    except (ValueError, IndexError):
        return 0.0


def _kilobytes(value: str) -> int:
    try:
        return int(value.split()[0]) * 1024
    except (ValueError, IndexError):
        return 0


def _proportional_anonymous(pid: int) -> int:
    text = _read(f"/proc/{pid}/smaps_rollup") or ""
    found = [_kilobytes(line.partition(":")[2]) for line in text.splitlines()
             if line.startswith(("Pss_Anon:", "Pss_Shmem:"))]
    if found:
        return sum(found)
    fields = _status_fields(pid)
    return _kilobytes(fields.get("RssAnon", "0 kB")) + _kilobytes(fields.get("RssShmem", "0 kB"))


def measure(pids: list[int], scratch_of: int | None = None) -> Usage:
    """The usage of ``pids`` (and of the scratch tmpfs seen by process ``scratch_of``)."""
    usage = Usage()
    for pid in pids:
        fields = _status_fields(pid)
        if not fields:
            continue
        usage.processes += int(fields.get("Threads", "1") or 1)
        # Anonymous memory and shared memory (mmap(MAP_SHARED), which no data limit counts).
        usage.memory += _kilobytes(fields.get("RssAnon", "0 kB")) + _kilobytes(fields.get("RssShmem", "0 kB"))
        usage.cpu += _cpu_seconds(pid)
    if scratch_of is not None:
        try:
            stats = os.statvfs(f"/proc/{scratch_of}/root/tmp")
            usage.disk = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
            usage.files = stats.f_files - stats.f_ffree if stats.f_files else None
        except OSError:
            pass
    return usage


class Watchdog:
    """A thread that stops a kernel past its memory, CPU-time, process or file-count limit.

    root_pid: the process the grader started (bubblewrap, unshare or the kernel itself). uid: the
    kernel's own user id, or None. on_limit(reason): called once, from the watchdog's thread,
    when a limit is passed; it must stop the kernel. ``scratch``: whether the kernel has a scratch
    tmpfs of its own (inside a sandbox) whose files the watchdog should count.
    """

    def __init__(self, root_pid: int, limits: KernelLimits, *, uid: int | None, on_limit: Callable[[str], None],
                 scratch: bool = False, interval: float = 0.5) -> None:
        self.root_pid, self.limits, self.uid = root_pid, limits, uid
        self.on_limit, self.scratch, self.interval = on_limit, scratch, interval
        self.peak = Usage()
        self.last = Usage()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="course-kernel-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def check(self) -> str | None:
        """One look at the kernel: the reason to stop it, or None."""
        pids = kernel_processes(self.root_pid, self.uid)
        scratch_of = next((pid for pid in pids if pid != self.root_pid), None) if self.scratch else None
        usage = measure(pids, scratch_of)
        if usage.memory > self.limits.memory:  # confirm with the count that shares forked pages fairly
            usage.memory = sum(_proportional_anonymous(pid) for pid in pids)
        self.last = usage
        self.peak = Usage(max(self.peak.processes, usage.processes), max(self.peak.memory, usage.memory),
                          max(self.peak.cpu, usage.cpu), usage.disk, usage.files)
        if usage.memory > self.limits.memory:
            return (f"{limit_message('memory', self.limits)} (the kernel's processes held "
                    f"{format_bytes(usage.memory)})")
        if usage.cpu > self.limits.cpu:
            return f"{limit_message('cpu', self.limits)} (the kernel's processes used {usage.cpu:.0f} s of CPU)"
        if usage.processes >= self.limits.processes:   # RLIMIT_NPROC stops it there: reaching it is the sign
            return f"{limit_message('processes', self.limits)} ({usage.processes} processes and threads)"
        if usage.files is not None and usage.files > max_scratch_files(self.limits):
            return limit_message("files", self.limits)
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reason = self.check()
            except Exception:  # noqa: BLE001 - a /proc race must never stop the watch
                reason = None
            if reason is not None:
                self.on_limit(reason)
                return
            busy = self.last.memory > self.limits.memory // 2
            self._stop.wait(self.interval / 5 if busy else self.interval)


def wait_for_exit(pids: list[int], timeout: float) -> bool:
    """Whether every one of ``pids`` is gone within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{pid}") and _status_fields(pid).get("State", "Z")[:1] not in ("Z", "X")
                   for pid in pids):
            return True
        time.sleep(0.05)
    return False


def cgroup_v2_controllers() -> tuple[set[str], str]:
    """The controllers cgroup v2 offers this process's cgroup, and where it is mounted ("" if nowhere)."""
    mount = ""
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        parts = line.split()
        if " - cgroup2 " in line and len(parts) > 4:
            mount = parts[4]
            break
    if not mount:
        return set(), ""
    own = ""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        if line.startswith("0::"):
            own = line[3:].strip()
    controllers = (_read(os.path.join(mount, own.lstrip("/"), "cgroup.controllers")) or "").split()
    return set(controllers), mount


def enforcement(limits: KernelLimits, *, sandbox: str, own_user: bool) -> list[str]:
    """How each limit is enforced on this machine, one sentence each (``course grade``'s header).

    sandbox: the isolation's name ("bubblewrap", "unshare", "none"); own_user: kernels run under a
    user id of their own (root with setpriv, in a sandbox).
    """
    controllers, mount = cgroup_v2_controllers()
    parent, how = KernelCgroup.parent()
    if parent is not None:
        cgroups = how
    elif not mount:
        cgroups = "no cgroup v2 here"
    elif {"memory", "pids"} <= controllers:
        cgroups = f"cgroup v2 has memory and pids here: {how}"
    else:
        cgroups = f"cgroup v2 here offers {', '.join(sorted(controllers)) or 'no controller'} (no memory or pids)"
    lines = [f"memory {format_bytes(limits.memory)}: each process's data limit (setrlimit) and the grader's watchdog "
             f"over all the kernel's processes ({cgroups})",
             f"CPU {format_seconds(limits.cpu)}: each process's CPU limit and the watchdog over all of them",
             f"files {format_bytes(limits.file)}: each file's size (setrlimit)"]
    if own_user:
        lines.append(f"{limits.processes} processes: RLIMIT_NPROC of a user id of the kernel's own, and the watchdog")
    else:
        lines.append(f"{limits.processes} processes: the watchdog only (kernels run as the grader's user, whose "
                     "process limit the kernels would share; root ignores it)")
    if sandbox == "none":
        lines.append(f"disk {format_bytes(limits.disk)}: NOT enforced (no sandbox: the working folder is on the "
                     "grader's disk; only the file-size limit applies)")
    else:
        lines.append(f"disk {format_bytes(limits.disk)}: a tmpfs of that size holds the working folder and /tmp "
                     f"(/dev/shm: {format_bytes(min(limits.disk, 256 << 20))} more)")
    lines.append(f"notebook {format_seconds(limits.notebook)} of wall time; output {format_bytes(limits.output)} "
                 f"per cell, {format_bytes(limits.stream)} of it printed text (head and tail kept)")
    return lines


# ---- cgroups v2 ------------------------------------------------------------------------------------

CGROUP_ENVIRONMENT = "COURSE_CGROUP"


class KernelCgroup:
    """A cgroup v2 of one kernel under a delegated parent: memory.max, memory.swap.max, pids.max.

    Used when ``COURSE_CGROUP`` names a cgroup v2 folder this user may write whose
    ``cgroup.subtree_control`` enables ``memory`` and ``pids`` (a systemd scope started with
    ``Delegate=yes``, say). The kernel's first process joins it before it runs anything (``enter``
    prefixes the command with a shell that writes its own pid, then execs), so every process the
    kernel starts is in it; the kernel's memory then cannot pass the limit at all (the OOM killer
    ends it, and ``oom_killed`` says so), and a fork past ``pids.max`` fails.
    """

    def __init__(self, parent: str, name: str) -> None:
        self.path = os.path.join(parent, name)

    @staticmethod
    def parent() -> tuple[str | None, str]:
        """The delegated parent to use, or None, and why."""
        parent = os.environ.get(CGROUP_ENVIRONMENT, "")
        if not parent:
            return None, f"not used (set {CGROUP_ENVIRONMENT} to a delegated cgroup v2 folder with memory and pids)"
        enabled = (_read(os.path.join(parent, "cgroup.subtree_control")) or "").split()
        if not {"memory", "pids"} <= set(enabled) or not os.access(parent, os.W_OK):
            return None, (f"{CGROUP_ENVIRONMENT}={parent} is not a writable cgroup v2 folder with memory and pids "
                          "in its cgroup.subtree_control: not used")
        return parent, f"a cgroup v2 of its own under {parent} (memory.max, pids.max)"

    def create(self, limits: KernelLimits) -> "KernelCgroup":
        os.makedirs(self.path, exist_ok=False)
        for name, value in (("memory.max", limits.memory), ("memory.swap.max", 0), ("pids.max", limits.processes)):
            try:
                with open(os.path.join(self.path, name), "w") as file:
                    file.write(f"{value}\n")
            except OSError:
                if name != "memory.swap.max":   # no swap accounting on this machine: nothing to cap
                    raise
        return self

    def enter(self, command: list[str]) -> list[str]:
        """``command`` started from a shell that first moves itself into this cgroup."""
        procs = os.path.join(self.path, "cgroup.procs")
        return ["sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "course-cgroup", procs, *command]

    def oom_killed(self) -> bool:
        for line in (_read(os.path.join(self.path, "memory.events")) or "").splitlines():
            name, _, count = line.partition(" ")
            if name == "oom_kill" and count.strip() not in ("", "0"):
                return True
        return False

    def remove(self) -> None:
        """Kill what is left in it and remove it."""
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "w") as file:
                file.write("1\n")
        except OSError:
            for pid in (_read(os.path.join(self.path, "cgroup.procs")) or "").split():
                try:
                    os.kill(int(pid), 9)
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)
