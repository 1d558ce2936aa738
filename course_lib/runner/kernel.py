"""The student's kernel: one process per graded notebook, where every line of student code runs.

Started by the grader (``course_lib.runner.student.StudentKernel``), usually inside a sandbox,
as ``python -m course_lib.runner.kernel --read-fd R --write-fd W`` with ``PYTHONPATH`` pointing at
the student edition of ``course_lib``. It runs an in-process IPython kernel (the same shell
JupyterLab uses: magics, ``display``, inline matplotlib, widgets) and serves the grader's requests
over the channel:

- ``exec_cell(source)``: run a notebook cell; reply with its nbformat outputs;
- ``global(name)``: a name of the notebook's namespace (a value, or a handle to an object);
- ``call`` / ``call_method`` / ``getattr`` / ``setattr`` / ``delattr`` / ``special`` on a handle:
  what a check does with a student's object; ``call_methods``: several of those in one request;
- ``build(module, qualname, args, kwargs)``: a platform object of this edition of ``course_lib``
  (``checks.make``), built here, next to the student's code;
- ``origin`` on a handle: where the code behind a student's object comes from (the submission or
  the library), as plain facts the grader judges (``checks.require_own_implementation``).

Before anything else the kernel sets its own limits (``--limits``: data segment, CPU time, file
size, processes; see ``watchdog.apply_rlimits``), makes its working folder (``--workdir``) and, in
a sandbox, copies the submission's files into it from the read-only ``--seed``.

What the student's code prints while serving a request travels back with the reply, its head and
tail kept within the printed-output limit. Output written straight to file descriptors 1 and 2
(C extensions, Triton) goes to a log file and is collected the same way, so nothing can write into
the channel, which uses its own descriptors. A cell's outputs are kept within the output limits
as they arrive (``bounded.CellOutputs``); the grader bounds them again.

The grader's time limit arrives as a byte on a third pipe (``--interrupt-fd``): a watcher thread
turns it into a KeyboardInterrupt in the main thread, but only while student code runs. (A signal
sent from outside would also reach the sandbox's own processes, which live in another process
namespace.) When that pipe closes, the grader is gone: the kernel ends at once, whatever the
student's code is doing.
"""

from __future__ import annotations

import _thread
import argparse
import io
import os
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager
from typing import Any

SPECIAL_OPERATIONS = {
    "len": len,
    "bool": bool,
    "iter": iter,
    "next": next,
    "getitem": lambda target, key: target[key],
    "setitem": lambda target, key, value: target.__setitem__(key, value),
    "delitem": lambda target, key: target.__delitem__(key),
    "contains": lambda target, item: item in target,
    "float": float,
    "int": int,
    "index": lambda target: target.__index__(),
    "repr": repr,
}


class _FdLog:
    """Descriptors 1 and 2 redirected to a file; ``take()`` returns what was written since last time.

    The file is opened for appending and emptied at every ``take``, and only its first and last
    ``limit // 2`` bytes are read, so a flood written straight to the descriptors costs neither
    the kernel's disk nor its memory more than that.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        handle, path = tempfile.mkstemp(prefix=".course-fd-log-")
        os.close(handle)
        self.fd = os.open(path, os.O_RDWR | os.O_APPEND)
        os.unlink(path)
        for fd in (1, 2):
            os.dup2(self.fd, fd)

    def take(self) -> str:
        from course_lib.runner.bounded import cut_note

        end = os.lseek(self.fd, 0, os.SEEK_END)
        if end <= 0:
            return ""
        half = self.limit // 2
        if end <= self.limit:
            text = os.pread(self.fd, end, 0).decode("utf-8", errors="replace")
        else:
            text = (os.pread(self.fd, half, 0).decode("utf-8", errors="ignore") + cut_note(end - 2 * half, self.limit)
                    + os.pread(self.fd, half, end - half).decode("utf-8", errors="ignore"))
        os.ftruncate(self.fd, 0)
        return text


class Kernel:
    """The request handler of the kernel process (see the module docstring)."""

    def __init__(self, fd_log: _FdLog, limits) -> None:
        from ipykernel.inprocess.manager import InProcessKernelManager

        self.fd_log = fd_log
        self.limits = limits
        self.manager = InProcessKernelManager()
        self.manager.start_kernel()
        self.client = self.manager.client()
        self.client.start_channels()
        self.shell = self.manager.kernel.shell
        self.in_student_code = False
        self.listeners: list = []
        signal.signal(signal.SIGINT, self._on_sigint)

    # ---- signals ------------------------------------------------------------------------------

    def _on_sigint(self, signum, frame) -> None:
        if self.in_student_code:
            raise KeyboardInterrupt("interrupted by the grader: the time limit of this cell ran out")

    @contextmanager
    def _student_code(self):
        self.in_student_code = True
        try:
            yield
        finally:
            self.in_student_code = False

    # ---- requests -------------------------------------------------------------------------------

    def handle(self, op: str, args: tuple) -> Any:
        from course_lib.runner.channel import ProtocolError

        if op == "exec_cell":
            return self.exec_cell(*args)
        if op == "global":
            return self.lookup(*args)
        if op in ("call", "call_in_place", "call_method", "call_methods", "getattr", "setattr", "delattr", "special",
                  "build", "origin"):
            return self._run_for_grader(getattr(self, f"_{op}"), args)
        if op == "listen":
            return self.listen(*args)
        raise ProtocolError(f"unknown request {op!r}")

    def listen(self, port: int, path: str) -> None:
        """Open 127.0.0.1:``port`` here, relayed to the grader's server through the Unix socket ``path``."""
        from course_lib.runner.relay import relay_tcp_to_unix

        if not isinstance(port, int) or not 0 < port < 65536 or not isinstance(path, str):
            raise ValueError(f"listen needs a port and a socket path, got {port!r}, {path!r}")
        self.listeners.append(relay_tcp_to_unix(port, path))

    def lookup(self, name: str) -> Any:
        namespace = self.shell.user_ns
        if not isinstance(name, str) or name not in namespace:
            raise NameError(f"name {name!r} is not defined in the notebook")
        return namespace[name]

    def _run_for_grader(self, operation, args: tuple) -> Any:
        """Run student code for the grader, with its printed output captured (head and tail) and sent back."""
        from course_lib.runner.channel import with_output

        buffer = _Captured(self.limits.stream)
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = buffer
        try:
            with self._student_code():
                value = operation(*args)
        except BaseException as error:
            buffer.write(self.fd_log.take())
            error.captured_output = buffer.keeper.text()  # type: ignore[attr-defined]
            raise
        finally:
            sys.stdout, sys.stderr = saved
        buffer.write(self.fd_log.take())
        return with_output(value, buffer.keeper.text())

    @staticmethod
    def _call(target: Any, call_args: tuple, call_kwargs: dict) -> Any:
        return target(*call_args, **call_kwargs)

    @staticmethod
    def _call_in_place(target: Any, call_args: tuple, call_kwargs: dict) -> Any:
        """A call whose arguments the grader wants back afterwards (the function changes them in place)."""
        value = target(*call_args, **call_kwargs)
        return (value, call_args, call_kwargs)

    @staticmethod
    def _call_method(target: Any, name: str, call_args: tuple, call_kwargs: dict, in_place: bool) -> Any:
        """``target.name(*call_args, **call_kwargs)`` in one request (the attribute is read now)."""
        if not isinstance(name, str):
            raise TypeError(f"a method name must be a string, got {type(name).__name__}")
        value = getattr(target, name)(*call_args, **call_kwargs)
        return (value, call_args, call_kwargs) if in_place else value

    @staticmethod
    def _call_methods(target: Any, calls: list) -> list[tuple[str, Any]]:
        """Each ``(name, args)`` in order: ``target.name(*args)``, or the attribute when args is None.

        One request for what a check reads after every step (a free count, every block table). An
        exception ends only its own call and comes back described; a time-limit interrupt ends all.
        """
        from course_lib.runner.channel import describe_error

        if not isinstance(calls, list):
            raise TypeError("call_methods takes a list of (name, args) pairs")
        results: list[tuple[str, Any]] = []
        for call in calls:
            if not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], str)
                    and (call[1] is None or isinstance(call[1], tuple))):
                raise TypeError(f"call_methods: each call is (name, args tuple or None), got {call!r}")
            name, call_args = call
            try:
                member = getattr(target, name)
            except Exception as error:  # noqa: BLE001 - reported to the check, which decides
                results.append(("missing" if isinstance(error, AttributeError) else "error", describe_error(error)))
                continue
            try:
                results.append(("value", member if call_args is None else member(*call_args)))
            except Exception as error:  # noqa: BLE001 - reported to the check, which decides
                results.append(("error", describe_error(error)))
        return results

    @staticmethod
    def _getattr(target: Any, name: str) -> Any:
        return getattr(target, name)

    @staticmethod
    def _setattr(target: Any, name: str, value: Any) -> None:
        setattr(target, name, value)

    @staticmethod
    def _delattr(target: Any, name: str) -> None:
        delattr(target, name)

    @staticmethod
    def _special(target: Any, operation: str, operation_args: tuple) -> Any:
        if operation not in SPECIAL_OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}")
        return SPECIAL_OPERATIONS[operation](target, *operation_args)

    @staticmethod
    def _origin(target: Any) -> dict:
        """Where the code behind ``target`` comes from, as plain facts (``checks.origin_facts``)."""
        from course_lib.checks import origin_facts

        return origin_facts(target)

    @staticmethod
    def _build(module: str, qualname: str, call_args: tuple, call_kwargs: dict) -> Any:
        from course_lib.runner.channel import _resolve_course_attribute

        return _resolve_course_attribute(module, qualname)(*call_args, **call_kwargs)

    # ---- cells ------------------------------------------------------------------------------------

    def exec_cell(self, source: str) -> dict:
        """Run one notebook cell; its outputs in nbformat form (within the output limits) and its execution count."""
        from course_lib.runner.bounded import CellOutputs

        client = self.client
        self.fd_log.take()
        with self._student_code():
            msg_id = client.execute(source, store_history=True, allow_stdin=False, stop_on_error=False)
        outputs = CellOutputs(self.limits.output, self.limits.stream)
        self._drain_iopub(msg_id, outputs)
        reply = client.get_shell_msg(timeout=5)
        stray = self.fd_log.take()
        if stray:
            outputs.add_stream("stdout", stray)
        content = reply.get("content", {})
        return {"outputs": outputs.result(), "execution_count": content.get("execution_count"),
                "status": content.get("status", "ok")}

    def _drain_iopub(self, msg_id: str, outputs) -> None:
        while True:
            try:
                message = self.client.get_iopub_msg(timeout=5)
            except Exception:  # queue.Empty: everything has been delivered
                return
            kind, content = message["msg_type"], message["content"]
            parent = message.get("parent_header", {}).get("msg_id")
            if kind == "status" and parent == msg_id and content.get("execution_state") == "idle":
                return
            _add_output(outputs, kind, content)


class _Captured(io.TextIOBase):
    """sys.stdout and sys.stderr while student code serves the grader: head and tail kept."""

    def __init__(self, limit: int) -> None:
        from course_lib.runner.bounded import TextKeeper

        self.keeper = TextKeeper(limit)

    def write(self, text: str) -> int:
        self.keeper.write(text)
        return len(text) if isinstance(text, str) else 0

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False


def _add_output(outputs, kind: str, content: dict) -> None:
    """Turn one IOPub message into an nbformat output (the subset a notebook stores) within the limits."""
    if kind == "stream":
        outputs.add_stream(str(content.get("name", "stdout")), str(content.get("text", "")))
    elif kind == "display_data":
        outputs.add({"output_type": "display_data", "data": content.get("data", {})})
    elif kind == "execute_result":
        outputs.add({"output_type": "execute_result", "data": content.get("data", {}),
                     "execution_count": content.get("execution_count")})
    elif kind == "error":
        outputs.add({"output_type": "error", "ename": content.get("ename", "Error"),
                     "evalue": content.get("evalue", ""), "traceback": content.get("traceback", [])})
    elif kind == "clear_output":
        outputs.clear()


def _watch_interrupts(fd: int) -> None:
    """Each byte on ``fd`` is one interrupt from the grader: SIGINT in the main thread. The end of
    the pipe means the grader is gone: the kernel and every process it started end now."""
    while True:
        try:
            data = os.read(fd, 1)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            _end_everything()
        _thread.interrupt_main(signal.SIGINT)


def _end_everything() -> None:
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(1)


def _prepare_workdir(workdir: str, seed: str | None) -> None:
    """Make the working folder, fill it from the read-only ``seed`` (in a sandbox), and go there."""
    import shutil

    os.makedirs(workdir, exist_ok=True)
    if seed and os.path.isdir(seed):
        shutil.copytree(seed, workdir, dirs_exist_ok=True, symlinks=True)
    os.chdir(workdir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A student kernel serving the course grader (internal).")
    parser.add_argument("--read-fd", type=int, required=True)
    parser.add_argument("--write-fd", type=int, required=True)
    parser.add_argument("--interrupt-fd", type=int, required=True)
    parser.add_argument("--limits", default="{}", help="the kernel's limits as JSON (KernelLimits)")
    parser.add_argument("--own-user", action="store_true", help="the kernel runs under a user id of its own")
    parser.add_argument("--workdir", help="the working folder to make and run in")
    parser.add_argument("--seed", help="a read-only folder whose files the working folder starts with")
    args = parser.parse_args(argv)
    from course_lib.runner.limits import KernelLimits
    from course_lib.runner.watchdog import apply_rlimits

    limits = KernelLimits.from_dict(__import__("json").loads(args.limits))
    apply_rlimits(limits, processes=args.own_user)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the file-size limit fails instead of killing
    if args.workdir:
        _prepare_workdir(args.workdir, args.seed)
    if os.getcwd() not in sys.path:  # the notebook's folder, after the library (as `import helper` expects)
        sys.path.append(os.getcwd())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # until the kernel installs its own handler
    fd_log = _FdLog(limits.stream)
    from course_lib.runner.channel import KERNEL, Endpoint

    kernel = Kernel(fd_log, limits)
    threading.Thread(target=_watch_interrupts, args=(args.interrupt_fd,), daemon=True).start()
    endpoint = Endpoint(args.read_fd, args.write_fd, KERNEL, kernel.handle)
    endpoint.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
