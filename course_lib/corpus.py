"""Real text that is available offline, for training tokenizers and measuring them.

Two corpora, both deterministic (same text, same order, on every machine with the same files):

- ``"python-docs"``: the reStructuredText sources of the Python 3.11 documentation, as Debian's
  ``python3.11-doc`` package installs them (497 files, about 11 MB of English prose, code
  samples and markup). Needs ``apt-get install python3.11-doc``.
- ``"stdlib-docstrings"``: the docstrings of the modules, classes and functions of the Python
  standard library that runs this code, read from its source files with ``ast`` (nothing is
  imported), 734 files in sorted order. Always available; about 1.8 MB on Python 3.11. Parsing
  everything takes a few seconds, so the full text is kept in the disk cache
  (:mod:`course_lib.disk_cache`) for the next process; a ``max_bytes`` prefix is cut from it when
  it is there, and otherwise parses only the files it needs (the same text either way). Notebooks
  that must run anywhere use this one.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path

from course_lib import disk_cache

__all__ = ["CORPUS_NAMES", "PYTHON_DOCS_DIR", "CorpusMissing", "load_corpus"]

CORPUS_NAMES = ("python-docs", "stdlib-docstrings")
# Where Debian's python3.11-doc puts the documentation sources (Sphinx's copies of the .rst files).
PYTHON_DOCS_DIR = Path("/usr/share/doc/python3.11/html/_sources")
# Separates documents, so no word runs from the end of one file into the start of the next.
DOCUMENT_SEPARATOR = "\n\n"
# Parts of the standard library that are tests, vendored packages or not prose.
_SKIPPED_STDLIB_PARTS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


class CorpusMissing(FileNotFoundError):
    """The files a corpus is read from are not installed; the message says how to install them."""


def load_corpus(name: str, max_bytes: int | None = None) -> str:
    """The text of corpus ``name`` (one of :data:`CORPUS_NAMES`), cut to ``max_bytes`` UTF-8 bytes.

    The cut never splits a character, so the result may be up to 3 bytes shorter than asked.
    """
    if name not in CORPUS_NAMES:
        raise ValueError(f"name must be one of {CORPUS_NAMES}, got {name!r}")
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0):
        raise ValueError(f"max_bytes must be None or an int >= 0, got {max_bytes!r}")
    text = _python_docs() if name == "python-docs" else _stdlib_docstrings(max_bytes)
    if max_bytes is None:
        return text
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


@lru_cache(maxsize=1)
def _python_docs() -> str:
    files = sorted(PYTHON_DOCS_DIR.rglob("*.rst.txt")) if PYTHON_DOCS_DIR.is_dir() else []
    if not files:
        raise CorpusMissing(
            f"The 'python-docs' corpus needs the Python 3.11 documentation sources in {PYTHON_DOCS_DIR}. "
            "Install them (Debian/Ubuntu) with:\n    apt-get install python3.11-doc\n"
            "or use load_corpus('stdlib-docstrings'), which is always available."
        )
    return DOCUMENT_SEPARATOR.join(path.read_text(encoding="utf-8") for path in files)


@lru_cache(maxsize=8)
def _stdlib_docstrings(max_bytes: int | None) -> str:
    """All docstrings, or a text that starts with at least the first ``max_bytes`` bytes of them all."""
    key = _stdlib_docstrings_key()
    if max_bytes is None:
        return disk_cache.cached_text("stdlib-docstrings", key, lambda: _parse_stdlib_docstrings(None))
    return disk_cache.read_text("stdlib-docstrings", key) or _parse_stdlib_docstrings(max_bytes)


@lru_cache(maxsize=1)
def _stdlib_docstrings_key() -> str:
    """What the corpus is made from: this Python's standard library and this module's code."""
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return disk_cache.fingerprint(sys.version, sysconfig.get_paths()["stdlib"], code)


def _parse_stdlib_docstrings(max_bytes: int | None) -> str:
    """The docstrings joined, parsing files only until the text has ``max_bytes`` bytes (None: all).

    It stops once the joined text is that long, so its first ``max_bytes`` bytes are exactly those
    of the full text (a cut of either gives the same corpus).
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docstrings: list[str] = []
    joined_bytes = -len(DOCUMENT_SEPARATOR)  # n docstrings have n - 1 separators
    for path in sorted(stdlib.rglob("*.py")):
        if _SKIPPED_STDLIB_PARTS.intersection(path.relative_to(stdlib).parts):
            continue
        for docstring in _docstrings_of(path):
            docstrings.append(docstring)
            joined_bytes += len(docstring.encode("utf-8")) + len(DOCUMENT_SEPARATOR)
        if max_bytes is not None and joined_bytes >= max_bytes:
            break
    return DOCUMENT_SEPARATOR.join(docstrings)


def _docstrings_of(path: Path) -> list[str]:
    """The docstrings in one source file, the module's first, then breadth-first (none if it does not parse)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return []
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = []
    for node in ast.walk(tree):
        if isinstance(node, documented):
            docstring = ast.get_docstring(node, clean=True)
            if docstring:
                docstrings.append(docstring)
    return docstrings
