"""Byte relays that let a sandboxed kernel reach one server a check runs, and nothing else.

A graded kernel lives in a network namespace of its own: its 127.0.0.1 is not the grader's. When a
check starts a server (a load generator's target, say) and hands its address to the student's
code, the grader opens a relay for that one port (``checks.student_url``):

    student code -> 127.0.0.1:PORT in the kernel's namespace    (kernel: listen_tcp -> connect unix)
                 -> a Unix socket in the kernel's own folder    (shared by both sides)
                 -> 127.0.0.1:PORT in the grader's namespace    (grader: listen_unix -> connect tcp)

Each accepted connection gets two threads that copy bytes until either side closes.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Callable

__all__ = ["relay_tcp_to_unix", "relay_unix_to_tcp"]

_CHUNK = 1 << 16


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                end.shutdown(how)
            except OSError:
                pass


def _serve(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    """Accept until the listener is closed; relay each connection to a fresh ``connect()``."""
    while True:
        try:
            accepted, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = connect()
        except OSError:
            accepted.close()
            continue
        for source, sink in ((accepted, upstream), (upstream, accepted)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def relay_unix_to_tcp(path: Path, port: int) -> socket.socket:
    """Grader side: a Unix socket at ``path`` whose connections go to 127.0.0.1:``port``; returns the listener."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    threading.Thread(target=_serve, args=(listener, lambda: socket.create_connection(("127.0.0.1", port))),
                     daemon=True).start()
    return listener


def relay_tcp_to_unix(port: int, path: str) -> socket.socket:
    """Kernel side: listen on 127.0.0.1:``port`` and send each connection to the Unix socket ``path``."""

    def connect() -> socket.socket:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(path)
        return upstream

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    threading.Thread(target=_serve, args=(listener, connect), daemon=True).start()
    return listener
