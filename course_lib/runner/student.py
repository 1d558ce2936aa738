"""The grader's side of one student kernel: start it in its sandbox, run cells, enforce time limits.

``StudentKernel`` owns the kernel process (``course_lib.runner.kernel``) and the grader's end of the
channel (``course_lib.runner.channel``). Everything the grader asks of the student's code goes
through it, with the current cell's deadline:

- a cell that overruns gets SIGINT (student code raises KeyboardInterrupt); if the kernel does not
  answer within a grace period it is killed, and the rest of the notebook is reported as not run;
  a write to a kernel that stopped reading is bounded by the same deadline;
- a kernel that exits (``os._exit``, a segfault, out of memory) turns into ``KernelDied``;
- the kernel's limits (``KernelLimits``) are set by the kernel on itself, by the sandbox (a scratch
  tmpfs of the disk limit, a user id of its own) and watched from here (``watchdog.Watchdog``): a
  kernel past its memory, CPU-time or process limit is stopped and the reason ("memory limit of
  4 GB reached") becomes the cell's error;
- stopping a kernel ends its whole process tree: SIGTERM, then SIGKILL after a short grace (at
  once for a limit), to its process group and to every process of its user id;
- what the student's code prints while serving the grader is handed to ``output_sink``;
- what the kernel asks of an object a check lent it (``checks.share``) is bounded: arguments of a
  plain size, a model's inputs within what a check needs (``LENT_MAX_TOKENS`` per call), and the
  time the lent calls of one cell take together.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from course_lib.runner.channel import GRADER, ChannelClosed, Endpoint, ProtocolError, Shared, from_kernel, widen_pipe
from course_lib.runner.limits import KERNEL_START_S, KernelLimits
from course_lib.runner.receipt import ValueTooLarge
from course_lib.runner.sandbox import (NONE, SEED_INSIDE, WORK_INSIDE, Isolation, default_plan, detect_isolation,
                                       kernel_environment, kernel_python, kernel_uid, readable_to_all,
                                       shared_cache, wrap_command)
from course_lib.runner.watchdog import KernelCgroup, Watchdog, kernel_processes, wait_for_exit

__all__ = ["CellTimeout", "KernelDied", "LENT_MAX_ELEMENTS", "LENT_MAX_TOKENS", "StudentKernel"]

STARTUP_TIMEOUT_S = KERNEL_START_S
INTERRUPT_GRACE_S = 10
TERM_GRACE_S = 2
LENT_MAX_ELEMENTS = 1 << 20      # numbers in the arguments of one call to a lent object
LENT_MAX_TOKENS = 1024           # tokens one call to a lent model may run (the checks use at most a few hundred)
LENT_MAX_CELL_TOKENS = 50_000    # tokens the lent models of one test cell may run together
LENT_MAX_DEPTH = 16
_KERNELS = itertools.count()


class KernelDied(RuntimeError):
    """The student's kernel process ended (or was killed); the message says how.

    Made only by ``StudentKernel._died``, which records the reason first (``StudentKernel.death``):
    the grader tells its own verdict by that record, never by this class (see docs/trust-model.md).
    """


class CellTimeout(TimeoutError):
    """The cell ran past its time limit and was interrupted."""

    stops_the_cell = True   # raised inside a lent call, it ends the test cell (see Endpoint.serve)


def LentCallRefused(message: str) -> ValueError:   # noqa: N802 - reads as the exception it makes
    """A call to a lent object beyond what the check lends it for: a ValueError in the student's code
    (a built-in type, so the kernel rebuilds it as itself and the student's code can catch it)."""
    return ValueError(message)


class StudentKernel:
    """A running student kernel. Use as a context manager; ``close()`` always ends the process.

    edition: the folder that holds the student edition's ``course_lib`` (put on PYTHONPATH).
    workdir: the kernel's working folder (a copy of the submission's folder; the only writable place).
    hidden: extra folders the kernel must not see (workspace, outputs, submissions).
    """

    def __init__(self, *, edition: Path, workdir: Path, hidden: list[Path] = (), threads: int | None = None,
                 gpu: bool = False, isolation: Isolation | None = None,
                 environment: dict[str, str] | None = None, limits: KernelLimits | None = None) -> None:
        self.edition, self.workdir = Path(edition), Path(workdir)
        self.hidden = [Path(path) for path in hidden]
        self.threads, self.gpu = threads, gpu
        self.environment = dict(environment or {})
        self.isolation = isolation or detect_isolation()
        self.limits = limits or KernelLimits()
        self.process: subprocess.Popen | None = None
        self.endpoint: Endpoint | None = None
        self.output_sink: Callable[[str], None] | None = None
        self.timed_out = False
        self.limit_reason: str | None = None   # set when the watchdog stopped the kernel
        self.death: str | None = None          # how the kernel ended, in the grader's words (``_died`` only)
        self.uid: int | None = None
        self.watchdog: Watchdog | None = None
        self.net_dir: Path | None = None
        self.cgroup: KernelCgroup | None = None
        self._timeout_s = 0.0
        self._interrupted_at: float | None = None
        self._stderr_log = None
        self._interrupt_fd = -1
        self._relays: dict[int, Any] = {}  # port -> the grader's listening Unix socket
        self._lent_seconds = 0.0
        self._lent_tokens = 0

    # ---- life cycle -------------------------------------------------------------------------

    def __enter__(self) -> "StudentKernel":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def sandboxed(self) -> bool:
        return self.isolation.name != NONE

    def start(self) -> None:
        to_kernel_read, to_kernel_write = os.pipe()
        from_kernel_read, from_kernel_write = os.pipe()
        interrupt_read, self._interrupt_fd = os.pipe()
        os.set_blocking(self._interrupt_fd, False)
        for fd in (to_kernel_write, from_kernel_write):
            widen_pipe(fd)
        # Root in a sandbox: the kernel runs under a user id of its own (its process limit holds, and
        # it can signal no other process). Without a sandbox it keeps the grader's.
        self.uid = kernel_uid(next(_KERNELS)) if self.sandboxed and os.geteuid() == 0 and shutil.which("setpriv") \
            else None
        inside = WORK_INSIDE if self.sandboxed else self.workdir
        if self.sandboxed:   # the relay sockets of checks.student_url: the grader's folder, read-only in there
            self.net_dir = Path(tempfile.mkdtemp(prefix="course-net-"))
            os.chmod(self.net_dir, 0o755)
        if self.uid is not None:   # the kernel's own user id reads the edition and the submission's files
            readable_to_all(self.edition)
            readable_to_all(self.workdir)
        # -P: the working folder (the student's files) is not put before the edition on sys.path, so a
        # folder named course_lib in a submission cannot stand in for the library; the kernel appends it.
        safe_path = ["-P"] if sys.version_info >= (3, 11) else []
        command = [kernel_python(), *safe_path, "-m", "course_lib.runner.kernel", "--read-fd", str(to_kernel_read),
                   "--write-fd", str(from_kernel_write), "--interrupt-fd", str(interrupt_read),
                   "--limits", self.limits.to_json(), "--workdir", str(inside)]
        command += ["--seed", str(SEED_INSIDE)] if self.sandboxed else []
        command += ["--own-user"] if self.uid is not None else []
        cache = shared_cache()
        plan = default_plan(workdir=self.workdir, edition=self.edition, extra_hidden=self.hidden, cache=cache,
                            net=self.net_dir, scratch_bytes=self.limits.disk if self.sandboxed else None,
                            uid=self.uid)
        self._stderr_log = tempfile.TemporaryFile()
        wrapped = wrap_command(command, plan, self.isolation, workdir=inside)
        parent, _ = KernelCgroup.parent()
        if parent is not None:   # the strongest limits where the machine delegates a cgroup v2 to the grader
            self.cgroup = KernelCgroup(parent, f"course-kernel-{os.getpid()}-{next(_KERNELS)}").create(self.limits)
            wrapped = self.cgroup.enter(wrapped)
        try:
            self.process = subprocess.Popen(
                wrapped,
                pass_fds=(to_kernel_read, from_kernel_write, interrupt_read), cwd=self.workdir, stdin=subprocess.DEVNULL,
                stdout=self._stderr_log, stderr=self._stderr_log, start_new_session=True,
                env={**kernel_environment(edition=self.edition, workdir=inside, threads=self.threads,
                                          gpu=self.gpu, cache=cache), **self.environment},
            )
        finally:
            for fd in (to_kernel_read, from_kernel_write, interrupt_read):
                os.close(fd)
        self.watchdog = Watchdog(self.process.pid, self.limits, uid=self.uid, on_limit=self._on_limit,
                                 scratch=self.sandboxed).start()
        self.endpoint = Endpoint(from_kernel_read, to_kernel_write, GRADER, self._serve,
                                 on_output=self._relay)
        self.endpoint.on_timeout = self._on_timeout
        # The first request doubles as the start-up check: the kernel imports IPython and the edition.
        self.set_deadline(STARTUP_TIMEOUT_S)
        try:
            edition_name = self.request("global", "__name__")
        except KernelDied as error:
            detail = " / ".join(self.stderr_tail(600).strip().splitlines()[-3:])
            self.death = None   # said again in the start-up's words
            raise self._died(f"the student kernel did not start: {error}" + (f" ({detail})" if detail else "")) \
                from None
        if edition_name != "__main__":
            raise self._died(f"the student kernel started in an unexpected state ({edition_name!r})")

    def close(self) -> None:
        """End the kernel process (politely first, within seconds) and release the pipes."""
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.process is not None and self.process.poll() is None and self.endpoint is not None:
            try:
                self.set_deadline(5)
                self.endpoint.on_timeout = self._give_up
                self.endpoint.request("shutdown")
            except Exception:
                pass
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self._kill()
        if self.endpoint is not None:
            for fd in (self.endpoint.read_fd, self.endpoint.write_fd, self._interrupt_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.endpoint = None
        if self._stderr_log is not None:
            self._stderr_log.close()
            self._stderr_log = None
        for listener in self._relays.values():
            listener.close()
        self._relays.clear()
        if self.net_dir is not None:
            shutil.rmtree(self.net_dir, ignore_errors=True)
            self.net_dir = None
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None and self.endpoint is not None

    # ---- time limits ---------------------------------------------------------------------------

    def set_deadline(self, seconds: float) -> None:
        """Start the clock of the next piece of work (a cell)."""
        self._timeout_s = seconds
        self._interrupted_at = None
        self.timed_out = False
        self._lent_seconds = 0.0
        self._lent_tokens = 0
        if self.endpoint is not None:
            self.endpoint.deadline = time.monotonic() + seconds
            self.endpoint.on_timeout = self._on_timeout
            self.endpoint.writing_late = False

    def _give_up(self) -> float:
        self._kill()
        raise self._died("the kernel did not answer in time and was stopped")

    def _on_timeout(self) -> float:
        if self._interrupted_at is None:
            self._interrupted_at = time.monotonic()
            self.timed_out = True
            self._interrupt()
            return time.monotonic() + INTERRUPT_GRACE_S
        self._kill()
        if self.endpoint is not None and self.endpoint.writing_late:
            raise self._died(f"the kernel stopped reading what the grader sent it, past the cell's "
                             f"{self._timeout_s:g} s limit, so it was stopped{self._near_limits()}; the cells after "
                             "it were not run")
        raise self._died(f"the cell ran past its {self._timeout_s:g} s limit and the kernel did not stop when "
                         f"interrupted, so it was stopped{self._near_limits()}; the cells after it were not run")

    def _near_limits(self) -> str:
        """", having reached the process limit of 512" when the watchdog saw the kernel at a limit."""
        from course_lib.runner.watchdog import limit_message

        peak = self.watchdog.peak if self.watchdog is not None else None
        if peak is not None and peak.processes >= self.limits.processes:
            return f" ({limit_message('processes', self.limits)}: {peak.processes} processes and threads)"
        return ""

    def _interrupt(self) -> None:
        try:
            os.write(self._interrupt_fd, b"!")
        except OSError:
            pass

    def _signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def _on_limit(self, reason: str) -> None:
        """The watchdog's call (from its thread): the kernel passed a limit; stop it now."""
        self.limit_reason = reason
        self._kill(grace=0)

    def _kill(self, grace: float = TERM_GRACE_S) -> None:
        """End the kernel's whole process tree: SIGTERM, then SIGKILL after ``grace`` seconds (0: at once).

        A stopped (SIGSTOP) or wedged kernel ends too: SIGKILL needs no cooperation, and reaches the
        processes that left the kernel's process group (all of its user id, or the descendants).
        """
        if self.process is None:
            return
        if grace > 0 and self.process.poll() is None:
            self._signal_tree(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        killed = self._signal_tree(signal.SIGKILL)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        wait_for_exit(killed, 5)   # the sandbox's processes end with it, a moment later

    def _signal_tree(self, signum: int) -> list[int]:
        pids = kernel_processes(self.process.pid, self.uid) if self.process is not None else []
        self._signal(signum)
        for pid in pids:
            if self.process is not None and pid == self.process.pid and self.process.poll() is not None:
                continue
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        return pids

    # ---- requests --------------------------------------------------------------------------------

    def request(self, op: str, *args: Any) -> Any:
        """One request to the kernel; kernel death and broken frames become ``KernelDied``."""
        if self.endpoint is None or self.process is None:
            raise self._died("the student kernel is not running")
        try:
            return self.endpoint.request(op, *args)
        except (ChannelClosed, ProtocolError, OSError) as error:
            # A TimeoutError is the channel's own (ChannelTimeout); an OSError the student's code raised
            # (FileNotFoundError, ConnectionError) is the student's error, not a broken channel.
            if isinstance(error, TimeoutError) or from_kernel(error):
                raise
            raise self._died(self._death_reason(error)) from None

    def _died(self, reason: str) -> KernelDied:
        """The grader's verdict that the kernel ended: recorded (the first reason stays), then made."""
        if self.death is None:
            self.death = reason
        return KernelDied(self.death)

    def ended(self) -> str | None:
        """How the kernel ended, in the grader's words, or None while it runs.

        From the grader's own record (``death``), which this completes: a channel that broke under a
        request (``Endpoint.failure``, even if a check caught the error) or a kernel process that is
        gone ends the kernel too. Nothing the kernel sent decides it.
        """
        if self.death is None and self.endpoint is not None and self.endpoint.failure is not None:
            self._died(self._death_reason(self.endpoint.failure))
        if self.death is None and self.process is not None and self.process.poll() is not None:
            self._died(self._death_reason(ChannelClosed("the kernel process ended")))
        return self.death

    def _death_reason(self, error: Exception) -> str:
        if self.limit_reason is None and self.cgroup is not None and self.cgroup.oom_killed():
            from course_lib.runner.watchdog import limit_message

            self.limit_reason = limit_message("memory", self.limits)
        if self.limit_reason is not None:
            return f"{self.limit_reason}: the kernel was stopped while running this cell; the cells after it were not run"
        if isinstance(error, ProtocolError):
            self._kill()
            return f"the kernel sent a malformed message ({error}) and was stopped"
        code = None
        if self.process is not None:
            try:
                code = self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._kill()
        if self.limit_reason is not None:
            return f"{self.limit_reason}: the kernel was stopped while running this cell; the cells after it were not run"
        if code is not None and -code == signal.SIGXCPU or code == 128 + signal.SIGXCPU:
            from course_lib.runner.watchdog import limit_message

            return f"{limit_message('cpu', self.limits)}: the kernel was stopped; the cells after it were not run"
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            how = f"killed by signal {name}"
        elif code is not None:
            how = f"exited with code {code}"
        else:
            how = "stopped answering"
        return (f"the kernel died while running this cell ({how}: os._exit, a crash or running out of "
                f"memory){self._near_limits()}; the cells after it were not run")

    def run_cell(self, source: str, timeout: float) -> dict:
        """Run a notebook cell in the kernel: {"outputs": [...], "execution_count": n}."""
        self.set_deadline(timeout)
        try:
            result = self.request("exec_cell", source)
        except ValueTooLarge as refused:   # a kernel sent outputs no honest kernel sends (it bounds them itself)
            return {"outputs": [{"output_type": "error", "ename": "ValueTooLarge", "evalue": str(refused),
                                 "traceback": [str(refused)]}], "execution_count": None}
        if not isinstance(result, dict) or not isinstance(result.get("outputs"), list):
            self._kill()
            raise self._died("the kernel answered a cell with something that is not a cell result, so it was "
                             "stopped; the cells after it were not run")
        if self.timed_out:
            result["outputs"].append({"output_type": "error", "ename": "CellTimeoutError",
                                      "evalue": f"the cell ran longer than the {timeout:g} s limit and was "
                                                "interrupted", "traceback": []})
        return result

    def lookup(self, name: str) -> Any:
        """A name of the notebook's namespace (NameError if the notebook never defined it)."""
        return self.request("global", name)

    def build(self, factory: Callable, args: tuple, kwargs: dict) -> Any:
        """``checks.make``: the kernel builds ``factory(*args, **kwargs)`` from its own edition."""
        module, qualname = getattr(factory, "__module__", ""), getattr(factory, "__qualname__", "")
        if not module.startswith("course_lib") or "<" in qualname:
            raise TypeError(f"checks.make needs a course_lib class or function, got {factory!r}")
        return self.request("build", module, qualname, tuple(args), dict(kwargs))

    @staticmethod
    def share(obj: Any, methods: tuple[str, ...]) -> Shared:
        return Shared(obj, tuple(methods))

    def expose_url(self, url: str) -> str:
        """``checks.student_url``: relay the kernel's 127.0.0.1:PORT to the grader's (see ``relay``)."""
        from urllib.parse import urlsplit

        from course_lib.runner.relay import relay_unix_to_tcp

        parts = urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
            raise ValueError(f"student_url needs http://127.0.0.1:PORT/..., got {url!r}")
        if self.isolation.name == NONE or parts.port in self._relays:
            return url  # without a network namespace the kernel shares the grader's loopback
        # The socket goes in the grader's own folder (made at start, read-only to the kernel), never in
        # the kernel's working folder, where a link the student made could point anywhere.
        if self.net_dir is None or self.net_dir.is_symlink() or not self.net_dir.is_dir():
            raise RuntimeError("the kernel's relay folder is missing")
        path = self.net_dir / f"{int(parts.port)}.sock"
        self._relays[parts.port] = relay_unix_to_tcp(path, parts.port)
        os.chmod(path, 0o666)   # the kernel's own user id connects to it
        self.request("listen", parts.port, str(path))
        return url

    # ---- the kernel's requests to the grader ------------------------------------------------------

    def _serve(self, op: str, args: tuple) -> Any:
        if op != "call_shared" or len(args) != 4:
            raise PermissionError(f"the kernel may not ask the grader for {op!r}")
        handle_id, method, call_args, call_kwargs = args
        shared = self.endpoint.exported(handle_id) if self.endpoint else None
        if not isinstance(shared, Shared) or not isinstance(method, str) or method not in shared.methods:
            raise PermissionError(f"the check did not lend method {method!r}")
        if not isinstance(call_args, tuple) or not isinstance(call_kwargs, dict):
            raise ProtocolError("malformed call")
        self._check_lent_call(shared, method, call_args, call_kwargs)
        target = shared.obj if method == "__call__" else getattr(shared.obj, method)
        started = time.monotonic()
        try:
            return target(*call_args, **call_kwargs)
        finally:
            self._lent_seconds += time.monotonic() - started

    def _check_lent_call(self, shared: Shared, method: str, call_args: tuple, call_kwargs: dict) -> None:
        """Refuse, as the student's error, a call beyond what a check lends an object for."""
        what = f"the {type(shared.obj).__name__.lstrip('_')} the check lent"
        if self._timeout_s and self._lent_seconds > self._timeout_s:
            raise LentCallRefused(f"{what} has already run {self._lent_seconds:.0f} s in this test, past the cell's "
                                  f"{self._timeout_s:g} s: call it only as often as the exercise needs")
        elements = _count_elements((call_args, call_kwargs), LENT_MAX_ELEMENTS)
        if elements > LENT_MAX_ELEMENTS:
            raise LentCallRefused(f"{what} takes at most {LENT_MAX_ELEMENTS:,} numbers per call; this call passed more")
        model = _lent_model(shared.obj)
        if model is not None and method == "__call__":
            self._lent_tokens += _check_model_call(model, call_args, call_kwargs, what)
            if self._lent_tokens > LENT_MAX_CELL_TOKENS:
                raise LentCallRefused(f"{what} has run {self._lent_tokens:,} tokens in this test, more than any "
                                      f"answer needs ({LENT_MAX_CELL_TOKENS:,}): is a loop running the whole "
                                      "sequence again at every step?")



    def _relay(self, text: str) -> None:
        if self.output_sink is not None:
            self.output_sink(text)

    def stderr_tail(self, limit: int = 2000) -> str:
        """The last lines the kernel process wrote outside any cell (start-up errors)."""
        if self._stderr_log is None:
            return ""
        self._stderr_log.seek(0)
        return self._stderr_log.read().decode("utf-8", errors="replace")[-limit:]


# ---- what a lent object accepts ---------------------------------------------------------------------


def _count_elements(value: Any, limit: int, depth: int = 0) -> int:
    """Numbers, items and characters in ``value`` (tensors by their element count), stopping past ``limit``."""
    if depth > LENT_MAX_DEPTH:
        return limit + 1
    kind = type(value).__module__
    if kind.startswith("torch") and hasattr(value, "numel"):
        return int(value.numel())
    if kind.startswith("numpy") and hasattr(value, "size"):
        return int(value.size)
    if isinstance(value, (str, bytes)):
        return len(value) // 8 + 1
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple, set, frozenset)):
        total = len(value)
        for item in value:
            if total > limit:
                break
            total += _count_elements(item, limit - total, depth + 1)
        return total
    return 1


def _lent_model(obj: Any) -> Any:
    """The course model behind a lent object (a check's counting or timing wrapper), or None."""
    model = getattr(obj, "_model", obj)
    config = getattr(model, "config", None)
    if getattr(config, "vocab_size", None) is None or not callable(model):
        return None
    return model


def _check_model_call(model: Any, call_args: tuple, call_kwargs: dict, what: str) -> int:
    """A lent model's forward arguments within bounds: ids of the vocabulary, at most LENT_MAX_TOKENS of
    them, positions and logits rows matching; the number of tokens. Raises LentCallRefused."""
    import torch

    names = ("input_ids", "positions", "attention", "logits_indices")
    if len(call_args) > len(names) or set(call_kwargs) - set(names):
        raise LentCallRefused(f"{what} is called as model(input_ids, positions=None, attention=None, "
                              "logits_indices=None)")
    bound = dict(zip(names, call_args)) | call_kwargs
    config = model.config

    def ids_tensor(name: str, value: Any) -> torch.Tensor:
        try:
            tensor = torch.as_tensor(value)
        except Exception:
            raise LentCallRefused(f"{what}: {name} must be a tensor or a list of ints") from None
        if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
            raise LentCallRefused(f"{what}: {name} must hold integers, got {tensor.dtype}")
        return tensor

    input_ids = ids_tensor("input_ids", bound.get("input_ids"))
    tokens = int(input_ids.numel())
    if input_ids.dim() > 2 or not 0 < tokens <= LENT_MAX_TOKENS:
        raise LentCallRefused(f"{what} runs 1 to {LENT_MAX_TOKENS} tokens per call (a 1-D list of ids); this call "
                              f"passed shape {tuple(input_ids.shape)}")
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= config.vocab_size:
        raise LentCallRefused(f"{what}: token ids must be in [0, {config.vocab_size})")
    positions = bound.get("positions")
    if positions is not None:
        positions = ids_tensor("positions", positions)
        limit = getattr(config, "max_position_embeddings", 1 << 20)
        if positions.numel() != tokens or int(positions.min()) < 0 or int(positions.max()) >= limit:
            raise LentCallRefused(f"{what}: positions must be one per token, in [0, {limit})")
    rows = bound.get("logits_indices")
    if rows is not None:
        rows = ids_tensor("logits_indices", rows)
        if rows.numel() > tokens or (rows.numel() and (int(rows.min()) < -tokens or int(rows.max()) >= tokens)):
            raise LentCallRefused(f"{what}: logits_indices must pick at most one row per token, within the call's "
                                  f"{tokens} tokens")
    return tokens
