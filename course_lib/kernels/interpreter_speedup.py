"""Make Triton's CPU interpreter call ``@triton.jit`` helper functions without re-patching the language.

When a kernel calls a helper that is itself a ``@triton.jit`` function (``tl.sum``, ``tl.max``,
``tl.cdiv``, ``tl.maximum`` are all such helpers in ``triton.language.standard``), Triton 3's
interpreter first re-patches the whole ``triton.language`` namespace for the helper's module,
walking every member of several modules: about 7 ms per call on a laptop, whatever the helper
does. A decode-attention kernel calls four of them per block of the cache, so most of its
interpreted time went there.

Within one launch the patch is already in place after the first call from a module (the
interpreter leaves it in place until the launch ends), so ``install()`` skips the repeats: the
first helper call from each module in a launch patches as before, later ones go straight to the
helper. Results are unchanged; chapter-5 engine runs become several times faster.
"""

from __future__ import annotations

import threading

__all__ = ["install", "is_installed"]

_installed = False


class _Patched(threading.local):
    def __init__(self) -> None:
        self.modules: set[int] | None = None  # ids of helper modules patched in the current launch


_patched = _Patched()


def is_installed() -> bool:
    return _installed


def install() -> None:
    """Patch the interpreter's launch and helper-call paths (idempotent)."""
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter

    if not (hasattr(interpreter, "GridExecutor") and hasattr(interpreter, "InterpretedFunction")):
        return  # another Triton than the pinned 3.9: leave its interpreter as it is
    original_call = interpreter.GridExecutor.__call__
    original_helper_call = interpreter.InterpretedFunction.__call__

    def launch(self, *args, **kwargs):
        previous, _patched.modules = _patched.modules, set()
        try:
            return original_call(self, *args, **kwargs)
        finally:
            _patched.modules = previous

    def helper_call(self, *args, **kwargs):
        modules = _patched.modules
        key = id(self.fn.__globals__)
        if modules is None or key not in modules:
            if modules is not None:
                modules.add(key)
            return original_helper_call(self, *args, **kwargs)
        function = self.rewrite()
        try:
            return function(*args, **kwargs)
        except Exception as error:
            raise interpreter.InterpreterError(repr(error)) from error

    interpreter.GridExecutor.__call__ = launch
    interpreter.InterpretedFunction.__call__ = helper_call
    _installed = True
