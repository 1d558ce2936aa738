"""Starting and stopping servers: in a thread of this process, or in a process of their own.

Everything listens on the loopback interface (127.0.0.1) on a port the OS reports free, and every
start has its stop: ``with start_server(...) as server:`` stops it on leaving the block, and
servers still running when Python exits are stopped by an ``atexit`` hook, so a notebook or a test
never leaves a server behind.

- ``start_server(model, tokenizer, ...)``: the engine loop and uvicorn in threads of this process.
  The admission policy (and anything else passed in) runs inside the real server; use it in
  notebooks and tests.
- ``ServerProcess``: ``python -m course_lib.server`` in a child process (its own GIL, its own
  model copy); replicas behind a router and ``course serve`` use it.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable

import httpx

__all__ = [
    "LOOPBACK",
    "ServerProcess",
    "ServerThread",
    "free_port",
    "is_loopback",
    "start_server",
    "wait_healthy",
]

LOOPBACK = "127.0.0.1"
_RUNNING: weakref.WeakSet = weakref.WeakSet()


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def is_loopback(url_or_host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost (with or without a scheme and port)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url_or_host).hostname if "://" in url_or_host else url_or_host.split(":")[0]
    if host in (None, ""):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def wait_healthy(url: str, timeout: float = 120.0, process: subprocess.Popen | None = None) -> None:
    """Poll ``url/health`` until it answers 200; RuntimeError on timeout or if ``process`` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server process exited with code {process.returncode} before it was healthy")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not become healthy within {timeout:.0f} s")


class ServerThread:
    """uvicorn serving ``app`` from a background thread; ``stop()`` also stops ``backend``.

    url: ``http://127.0.0.1:<port>``. Use as a context manager, or call ``stop()``.
    """

    def __init__(self, app, *, backend=None, host: str = LOOPBACK, port: int | None = None,
                 on_stop: Callable[[], None] | None = None) -> None:
        import uvicorn

        self.host = host
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.app = app
        self.backend = backend
        self._on_stop = on_stop
        config = uvicorn.Config(app, host=host, port=self.port, log_level="error", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"uvicorn-{self.port}", daemon=True)

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server on port {self.port} did not start")
            time.sleep(0.01)
        _RUNNING.add(self)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10)
        if self.backend is not None:
            self.backend.stop()
        if self._on_stop is not None:
            self._on_stop()
            self._on_stop = None
        _RUNNING.discard(self)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ServerThread({self.url}, {'running' if self.running else 'stopped'})"


def start_server(model, tokenizer, *, model_name: str = "SmolLM2-135M-Instruct", admission=None, limits=None,
                 max_pending: int | None = None, port: int | None = None, host: str = LOOPBACK,
                 server_info: dict | None = None, **engine_options) -> ServerThread:
    """Serve ``model`` over HTTP from this process; returns the running ``ServerThread``.

    engine_options go to ``LLMEngine`` (num_blocks, max_num_seqs, max_num_batched_tokens,
    speculative, ...). admission / limits: see ``course_lib.server.admission`` (None: admit up to
    ``max_pending``). server_info: more facts for ``GET /server_info`` (say the quantization).
    """
    from course_lib.engine import LLMEngine
    from course_lib.server.app import DEFAULT_MAX_PENDING, build_app
    from course_lib.server.engine_loop import EngineLoop
    from course_lib.server.metrics import ServerMetrics

    holder: dict = {}
    loop = EngineLoop(lambda: LLMEngine(model, tokenizer, **engine_options),
                      on_finish=lambda timing, reason: holder["metrics"].observe_finished(timing, reason))
    holder["metrics"] = ServerMetrics(loop.state)
    app = build_app(loop, model_name=model_name, admission=admission, limits=limits,
                    max_pending=max_pending or DEFAULT_MAX_PENDING, metrics=holder["metrics"], server_info=server_info)
    loop.start()
    try:
        return ServerThread(app, backend=loop, host=host, port=port).start()
    except BaseException:
        loop.stop()
        raise


class ServerProcess:
    """``python -m course_lib.server`` in a child process on a free loopback port.

    args: extra command-line options (see ``python -m course_lib.server --help``), e.g.
    ``["--model", "tiny", "--num-blocks", "64"]``. ``start()`` waits until ``/health`` answers.
    """

    def __init__(self, args: list[str] | None = None, *, port: int | None = None, threads: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.args = list(args or [])
        self.threads = threads
        self.process: subprocess.Popen | None = None
        self._log = None

    def launch(self) -> ServerProcess:
        """Start the process without waiting for it (start several, then ``wait``)."""
        env = dict(os.environ)
        if self.threads:
            env["COURSE_TORCH_THREADS"] = str(self.threads)
        command = [sys.executable, "-m", "course_lib.server", "--port", str(self.port), *self.args]
        self._log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty child can never block on it
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=self._log,
                                        start_new_session=True)
        _RUNNING.add(self)
        return self

    def wait(self, timeout: float = 180.0) -> ServerProcess:
        try:
            wait_healthy(self.url, timeout, self.process)
        except RuntimeError as error:
            stderr = self._stderr_tail()
            self.stop()
            raise RuntimeError(f"{error}\n{stderr}") from None
        return self

    def start(self, timeout: float = 180.0) -> ServerProcess:
        return self.launch().wait(timeout)

    def _stderr_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None
        _RUNNING.discard(self)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> ServerProcess:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ServerProcess({self.url}, {'running' if self.running else 'stopped'})"


@atexit.register
def _stop_everything() -> None:
    for server in list(_RUNNING):
        try:
            server.stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
