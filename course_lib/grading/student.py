"""The grader's side of one student kernel: start it in its sandbox, run cells, enforce time limits.

``StudentKernel`` owns the kernel process (``course_lib.grading.kernel``) and the grader's end of the
channel (``course_lib.grading.channel``). Everything the grader asks of the student's code goes
through it, with the current cell's deadline:

- a cell that overruns gets SIGINT (student code raises KeyboardInterrupt); if the kernel does not
  answer within a grace period it is killed, and the rest of the notebook is reported as not run;
- a kernel that exits (``os._exit``, a segfault, out of memory) turns into ``KernelDied``;
- what the student's code prints while serving the grader is handed to ``output_sink``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from course_lib.grading.channel import GRADER, ChannelClosed, Endpoint, ProtocolError, Shared, widen_pipe
from course_lib.grading.sandbox import (NONE, Isolation, default_plan, detect_isolation, kernel_environment,
                                       shared_cache, wrap_command)

__all__ = ["CellTimeout", "KernelDied", "StudentKernel"]

STARTUP_TIMEOUT_S = 180
INTERRUPT_GRACE_S = 10


class KernelDied(RuntimeError):
    """The student's kernel process ended (or was killed); the message says how."""


class CellTimeout(TimeoutError):
    """The cell ran past its time limit and was interrupted."""


class StudentKernel:
    """A running student kernel. Use as a context manager; ``close()`` always ends the process.

    edition: the folder that holds the student edition's ``course_lib`` (put on PYTHONPATH).
    workdir: the kernel's working folder (a copy of the submission's folder; the only writable place).
    hidden: extra folders the kernel must not see (workspace, outputs, submissions).
    """

    def __init__(self, *, edition: Path, workdir: Path, hidden: list[Path] = (), threads: int | None = None,
                 gpu: bool = False, isolation: Isolation | None = None,
                 environment: dict[str, str] | None = None) -> None:
        self.edition, self.workdir = Path(edition), Path(workdir)
        self.hidden = [Path(path) for path in hidden]
        self.threads, self.gpu = threads, gpu
        self.environment = dict(environment or {})
        self.isolation = isolation or detect_isolation()
        self.process: subprocess.Popen | None = None
        self.endpoint: Endpoint | None = None
        self.output_sink: Callable[[str], None] | None = None
        self.timed_out = False
        self._timeout_s = 0.0
        self._interrupted_at: float | None = None
        self._stderr_log = None
        self._interrupt_fd = -1
        self._relays: dict[int, Any] = {}  # port -> the grader's listening Unix socket

    # ---- life cycle -------------------------------------------------------------------------

    def __enter__(self) -> "StudentKernel":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        to_kernel_read, to_kernel_write = os.pipe()
        from_kernel_read, from_kernel_write = os.pipe()
        interrupt_read, self._interrupt_fd = os.pipe()
        for fd in (to_kernel_write, from_kernel_write):
            widen_pipe(fd)
        # -P: the working folder (the student's files) is not put before the edition on sys.path, so a
        # folder named course_lib in a submission cannot stand in for the library; the kernel appends it.
        safe_path = ["-P"] if sys.version_info >= (3, 11) else []
        command = [sys.executable, *safe_path, "-m", "course_lib.grading.kernel", "--read-fd", str(to_kernel_read),
                   "--write-fd", str(from_kernel_write), "--interrupt-fd", str(interrupt_read)]
        cache = shared_cache()
        plan = default_plan(workdir=self.workdir, edition=self.edition, extra_hidden=self.hidden, cache=cache)
        self._stderr_log = tempfile.TemporaryFile()
        try:
            self.process = subprocess.Popen(
                wrap_command(command, plan, self.isolation, workdir=self.workdir),
                pass_fds=(to_kernel_read, from_kernel_write, interrupt_read), cwd=self.workdir, stdin=subprocess.DEVNULL,
                stdout=self._stderr_log, stderr=self._stderr_log, start_new_session=True,
                env={**kernel_environment(edition=self.edition, workdir=self.workdir, threads=self.threads,
                                          gpu=self.gpu, cache=cache), **self.environment},
            )
        finally:
            for fd in (to_kernel_read, from_kernel_write, interrupt_read):
                os.close(fd)
        self.endpoint = Endpoint(from_kernel_read, to_kernel_write, GRADER, self._serve,
                                 on_output=self._relay)
        self.endpoint.on_timeout = self._on_timeout
        # The first request doubles as the start-up check: the kernel imports IPython and the edition.
        self.set_deadline(STARTUP_TIMEOUT_S)
        try:
            edition_name = self.request("global", "__name__")
        except KernelDied as error:
            raise KernelDied(f"the student kernel did not start: {error}") from None
        if edition_name != "__main__":
            raise KernelDied(f"the student kernel started in an unexpected state ({edition_name!r})")

    def close(self) -> None:
        """End the kernel process (politely first) and release the pipes."""
        if self.process is not None and self.process.poll() is None and self.endpoint is not None:
            try:
                self.set_deadline(5)
                self.endpoint.request("shutdown")
            except Exception:
                pass
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._kill()
                self.process.wait(timeout=10)
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

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None and self.endpoint is not None

    # ---- time limits ---------------------------------------------------------------------------

    def set_deadline(self, seconds: float) -> None:
        """Start the clock of the next piece of work (a cell)."""
        self._timeout_s = seconds
        self._interrupted_at = None
        self.timed_out = False
        if self.endpoint is not None:
            self.endpoint.deadline = time.monotonic() + seconds

    def _on_timeout(self) -> float:
        if self._interrupted_at is None:
            self._interrupted_at = time.monotonic()
            self.timed_out = True
            self._interrupt()
            return time.monotonic() + INTERRUPT_GRACE_S
        self._kill()
        raise KernelDied(f"the cell ran past its {self._timeout_s:g} s limit and the kernel did not stop when "
                         "interrupted, so it was killed; the cells after it were not run")

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

    def _kill(self) -> None:
        self._signal(signal.SIGKILL)
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    # ---- requests --------------------------------------------------------------------------------

    def request(self, op: str, *args: Any) -> Any:
        """One request to the kernel; kernel death and broken frames become ``KernelDied``."""
        if self.endpoint is None or self.process is None:
            raise KernelDied("the student kernel is not running")
        try:
            return self.endpoint.request(op, *args)
        except (ChannelClosed, ProtocolError, OSError) as error:
            if isinstance(error, TimeoutError):
                raise
            raise KernelDied(self._death_reason(error)) from None

    def _death_reason(self, error: Exception) -> str:
        if isinstance(error, ProtocolError):
            self._kill()
            return f"the kernel sent a malformed message ({error}) and was stopped"
        code = None
        if self.process is not None:
            try:
                code = self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._kill()
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            how = f"killed by signal {name}"
        elif code is not None:
            how = f"exited with code {code}"
        else:
            how = "stopped answering"
        return (f"the kernel died while running this cell ({how}: os._exit, a crash or running out of "
                "memory); the cells after it were not run")

    def run_cell(self, source: str, timeout: float) -> dict:
        """Run a notebook cell in the kernel: {"outputs": [...], "execution_count": n}."""
        self.set_deadline(timeout)
        result = self.request("exec_cell", source)
        if not isinstance(result, dict) or not isinstance(result.get("outputs"), list):
            raise KernelDied("the kernel answered a cell with something that is not a cell result")
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

        from course_lib.grading.relay import relay_unix_to_tcp

        parts = urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
            raise ValueError(f"student_url needs http://127.0.0.1:PORT/..., got {url!r}")
        if self.isolation.name == NONE or parts.port in self._relays:
            return url  # without a network namespace the kernel shares the grader's loopback
        folder = self.workdir / ".course-net"
        folder.mkdir(exist_ok=True)
        path = folder / f"{parts.port}.sock"
        self._relays[parts.port] = relay_unix_to_tcp(path, parts.port)
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
        target = shared.obj if method == "__call__" else getattr(shared.obj, method)
        return target(*call_args, **call_kwargs)

    def _relay(self, text: str) -> None:
        if self.output_sink is not None:
            self.output_sink(text)

    def stderr_tail(self, limit: int = 2000) -> str:
        """The last lines the kernel process wrote outside any cell (start-up errors)."""
        if self._stderr_log is None:
            return ""
        self._stderr_log.seek(0)
        return self._stderr_log.read().decode("utf-8", errors="replace")[-limit:]
