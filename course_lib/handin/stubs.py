"""What a student sees when a cell reaches an exercise that is not written yet.

A released answer cell holds nbgrader's placeholder, ``raise NotImplementedError()``. When a test
cell calls it, the plain traceback runs through the checks' own files and ends in a bare
``NotImplementedError:`` that says nothing. In the student kit (the student edition of
``course_lib``, in a Jupyter kernel) ``install`` replaces that one case with the course's usual
failure message, and shows only the frames of the notebook's own cells::

    NotImplementedError: BlockAllocator.__init__ is not written yet.
      expected: your code in place of `raise NotImplementedError()` (Cell In[6], line 13)
      got:      the placeholder the notebook was released with
      hint: write BlockAllocator.__init__, run its cell (Shift+Enter), then run this cell again.

Every other error, a ``NotImplementedError`` with a message included (the library's own stubs
say where the exercise lives), is shown exactly as IPython shows it. The error stays an error:
the cell fails, "Run All" stops there, ``course check`` and the grader see a NotImplementedError.

How it gets into the kernel: this module is an IPython extension that the kit's kernels load
(``c.InteractiveShellApp.extensions`` in ``<environment>/etc/ipython/ipython_kernel_config.py``,
written by ``python -m course_lib.handin.stubs``, which the kit's ``make setup`` runs). It acts
only in the student edition; the grader's kernels load no extension.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

__all__ = ["install", "load_ipython_extension", "placeholder_message", "write_kernel_config"]

KERNEL_CONFIG = "ipython_kernel_config.py"

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


def _frames(tb) -> list:
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    return frames


def _cell_name(shell, filename: str) -> str | None:
    """"Cell In[6]" for code a notebook cell defined, None for any other file."""
    formatted = shell.compile.format_code_name(filename) if hasattr(shell.compile, "format_code_name") else None
    return " ".join(formatted) if formatted else None


def placeholder_message(qualname: str, where: str) -> str:
    """The course's failure message for an exercise whose placeholder is still in place."""
    return (f"{qualname} is not written yet.\n"
            f"  expected: your code in place of `raise NotImplementedError()` ({where})\n"
            f"  got:      the placeholder the notebook was released with\n"
            f"  hint: write {qualname}, run its cell (Shift+Enter), then run this cell again.")


def _only_cell_frames(shell, tb):
    """The traceback without the frames of library files (rebuilt, innermost last); None if nothing is left."""
    kept = [frame for frame in _frames(tb) if _cell_name(shell, frame.tb_frame.f_code.co_filename)]
    rebuilt = None
    for frame in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return rebuilt


def _handler(shell, etype, value, tb, tb_offset=None):
    frames = _frames(tb)
    innermost = frames[-1] if frames else None
    where = _cell_name(shell, innermost.tb_frame.f_code.co_filename) if innermost else None
    if value.args or where is None:   # not the release's bare placeholder in a notebook cell
        return shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
    code = innermost.tb_frame.f_code
    qualname = getattr(code, "co_qualname", code.co_name)
    if qualname == "<module>":
        qualname = "this exercise"
    friendly = etype(placeholder_message(qualname, f"{where}, line {innermost.tb_lineno}"))
    trimmed = _only_cell_frames(shell, tb) or tb
    return shell.showtraceback((etype, friendly.with_traceback(trimmed), trimmed), running_compiled_code=True)


def install(shell=None) -> bool:
    """Show the placeholder's message in this IPython kernel (see the module docstring); True if installed.

    Does nothing outside a kernel, or where a custom handler is already set (never replaces one).
    """
    if shell is None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "set_custom_exc") or getattr(shell, "custom_exceptions", ()):
        return False
    shell.set_custom_exc((NotImplementedError,), _handler)
    return True


def load_ipython_extension(ipython) -> None:
    """IPython's hook (``%load_ext course_lib.handin.stubs``, or the kernel config): install in the kit."""
    from course_lib.exercises import is_student_edition

    if is_student_edition():
        install(ipython)


def write_kernel_config(folder: Path | None = None) -> Path:
    """Write the IPython kernel config that loads this extension into ``folder``; returns the file.

    Default folder: ``<sys.prefix>/etc/ipython``, which IPython reads for every kernel of this
    environment. An existing config file is kept, with the line added if it is missing.
    """
    folder = Path(folder) if folder is not None else Path(sys.prefix) / "etc" / "ipython"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / KERNEL_CONFIG
    line = 'c.InteractiveShellApp.extensions.append("course_lib.handin.stubs")'
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if line not in text:
        comment = ("# The course kit: an exercise that is not written yet fails with the course's message "
                   "(course_lib.handin.stubs).\n")
        path.write_text(text + ("\n" if text and not text.endswith("\n") else "") + comment + line + "\n",
                        encoding="utf-8")
    return path


if __name__ == "__main__":
    print(f"kernel config: {write_kernel_config()}")
