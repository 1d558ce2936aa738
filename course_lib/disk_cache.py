"""Artifacts that take seconds to rebuild, kept on disk so the next process reads them in milliseconds.

Some things in this course are slow to make and the same every time: the ``stdlib-docstrings``
corpus (parsing about 700 source files with ``ast``, about 5 s), the metadata of SmolLM2's GGUF
file (its header holds 49,152 tokens and 48,900 merges: about 3 s to parse) and its weights
dequantized to fp32 (about 1 s). Every notebook kernel, test process and grader used to make its
own copy; with this cache the first one writes it and the others read it in milliseconds.

Where: ``$COURSE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/llm-inference-course``, else
``~/.cache/llm-inference-course``. Delete the folder at any time; it is rebuilt on demand.

What makes an entry valid is its *key*: a hash of everything the artifact is made from (the
library's own source that makes it, the input file's path, size and modification time, the
versions involved). A changed input gives a new key, so an entry is never stale; it is never
half-written either (each entry is written to a temporary file and renamed into place), and a
text entry carries the SHA-256 of its content, checked on every read.

A folder that cannot be written (a read-only view, as graded student kernels get) is only read:
nothing fails, the artifact is built in memory as if there were no cache.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["CACHE_ENVIRONMENT", "cache_folder", "cached_array", "cached_text", "file_fingerprint", "fingerprint",
           "holds_array", "read_array", "read_text"]

CACHE_ENVIRONMENT = "COURSE_CACHE_DIR"
_TEXT_MAGIC = b"course-cache-text-v1\n"
_ENTRY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # a file name, never a path


def cache_folder() -> Path:
    """The cache folder (see the module docstring); it may not exist yet."""
    explicit = os.environ.get(CACHE_ENVIRONMENT)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llm-inference-course"


def fingerprint(*parts: object) -> str:
    """A short hex key made from ``parts`` (their ``repr``s, in order)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode("utf-8", errors="backslashreplace"))
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def file_fingerprint(path: str | os.PathLike) -> tuple[str, int, int]:
    """What identifies a large input file cheaply: its resolved path, size and modification time (ns)."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return (str(resolved), stat.st_size, stat.st_mtime_ns)


def _entry(kind: str, name: str, key: str, suffix: str) -> Path:
    if not _ENTRY_NAME.fullmatch(name):
        raise ValueError(f"name must be letters, digits, '-', '_' or '.', got {name!r}")
    return cache_folder() / kind / f"{name}-{key}{suffix}"


def _write_atomically(path: Path, write: Callable[[object], None]) -> None:
    """Write through a temporary file in the same folder, then rename; give up quietly if not allowed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    except OSError:
        return  # a read-only or missing folder: the caller keeps what it built
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
        os.replace(temporary, path)
    except OSError:
        pass
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    _remove_older_versions(path)


def _remove_older_versions(path: Path) -> None:
    """Entries of the same name under other keys (a reinstalled model, a new Python) are stale: at most
    one version of each artifact stays, so the folder does not grow with every change."""
    name = path.name.rpartition("-")[0]
    pattern = re.compile(re.escape(name) + r"-[0-9a-f]{32}" + re.escape(path.suffix))
    for sibling in path.parent.iterdir():
        if sibling != path and pattern.fullmatch(sibling.name):
            try:
                sibling.unlink()
            except OSError:
                pass


def read_text(name: str, key: str) -> str | None:
    """The text stored as ``name`` under ``key``, or None if there is none (or it is damaged)."""
    return _read_text(_entry("text", name, key, ".txt"))


def cached_text(name: str, key: str, build: Callable[[], str]) -> str:
    """The text stored as ``name`` under ``key``, or ``build()``'s result (stored for next time)."""
    path = _entry("text", name, key, ".txt")
    text = _read_text(path)
    if text is not None:
        return text
    text = build()
    data = text.encode("utf-8")

    def write(file) -> None:
        file.write(_TEXT_MAGIC + hashlib.sha256(data).hexdigest().encode("ascii") + b"\n" + data)

    _write_atomically(path, write)
    return text


def _read_text(path: Path) -> str | None:
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if not raw.startswith(_TEXT_MAGIC):
        return None
    header_end = raw.find(b"\n", len(_TEXT_MAGIC))
    if header_end < 0:
        return None
    expected, data = raw[len(_TEXT_MAGIC):header_end], raw[header_end + 1:]
    if hashlib.sha256(data).hexdigest().encode("ascii") != expected:
        return None  # damaged: rebuilt (and rewritten) by the caller
    return data.decode("utf-8")


def cached_array(name: str, key: str, build: Callable[[], np.ndarray]) -> np.ndarray:
    """The array stored as ``name`` under ``key``, or ``build()``'s result (stored for next time).

    The array read back is a fresh, writable copy in memory (``np.load`` without memory-mapping), so
    callers may hand it to ``torch.from_numpy`` as they would the built one.
    """
    path = _entry("arrays", name, key, ".npy")
    array = _read_array(path)
    if array is not None:
        return array
    array = np.ascontiguousarray(build())
    _write_atomically(path, lambda file: np.save(file, array, allow_pickle=False))
    return array


def holds_array(name: str, key: str) -> bool:
    """Whether an array is stored as ``name`` under ``key`` (without reading it: a damaged entry is
    found, and rebuilt, by the reader)."""
    return _entry("arrays", name, key, ".npy").is_file()


def read_array(name: str, key: str) -> np.ndarray | None:
    """The array stored as ``name`` under ``key`` (a fresh, writable copy), or None if there is none."""
    return _read_array(_entry("arrays", name, key, ".npy"))


def _read_array(path: Path) -> np.ndarray | None:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):  # missing, or damaged (a size that does not match its header)
        return None
