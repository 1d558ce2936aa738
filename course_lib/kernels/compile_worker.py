"""The process that compiles Triton kernels for a GPU target: ``python -I compile_worker.py < request.json``.

Started by ``course_lib.kernels.gpu_compile`` (locally) or by the grader (in a sandbox), one per
batch of compiles, so a compile that runs away is stopped by killing this process and nothing else.
It imports only the standard library and Triton, so it runs where the course's package is not
installed (inside the grader's sandbox it is hidden).

The request (JSON on stdin): ``source``, a kernel module (``kernel_source.kernel_module``'s text: jit
functions without decorators and literal constants, so executing it runs no code of its author);
``kernels``, the names of its functions to wrap with ``triton.jit``; ``target``, ``{"arch": 90,
"warp_size": 32}``; ``builds``, each ``{"kernel", "signature", "constexprs", "options"}``; and
``limits`` (bytes of memory and written files, CPU seconds), applied before anything else.

For each build, in order, one JSON line on the result stream: ``{"index", "ok", "error", "shared",
"num_warps", "cubin" (base64), "ptxas_log", "dots", "seconds"}``; ``dots`` are the ``tt.dot`` lines of
the Triton IR (their input precision: TF32 or IEEE fp32). The result stream is the original stdout;
anything else printed here (Triton's messages, MLIR's diagnostics) goes to stderr.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import linecache
import os
import resource
import sys
import time
import traceback

MAX_ERROR_CHARS = 6000
MAX_LOG_CHARS = 20000


def _apply_limits(limits: dict) -> None:
    """Memory (data segment), CPU seconds and file size of this process and the ptxas it starts."""

    def set_limit(which: int, soft: int, hard: int) -> None:
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(which, (soft, hard))

    for which, key, grace in ((resource.RLIMIT_DATA, "memory", 0), (resource.RLIMIT_CPU, "cpu", 5),
                              (resource.RLIMIT_FSIZE, "file", 0)):
        value = limits.get(key)
        if isinstance(value, int) and value > 0:
            set_limit(which, value, value + grace)
    set_limit(resource.RLIMIT_CORE, 0, 0)


def _error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + " [...]"


def _define(source: str, kernels: list[str]) -> dict:
    import triton

    filename = "<kernels>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict = {"__name__": "course_kernels"}
    exec(compile(source, filename, "exec"), namespace)  # definitions only (see the module docstring)
    for name in kernels:
        namespace[name] = triton.jit(namespace[name])
    return namespace


def _compile(namespace: dict, build: dict, target) -> dict:
    import triton
    from triton.compiler import ASTSource

    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        source = ASTSource(namespace[build["kernel"]], build["signature"], build.get("constexprs") or {})
        compiled = triton.compile(source, target=target, options=build.get("options") or {})
    dots = [line.strip()[:400] for line in compiled.asm.get("ttir", "").splitlines() if "tt.dot" in line][:64]
    return {"ok": True, "error": None, "shared": int(compiled.metadata.shared),
            "num_warps": int(compiled.metadata.num_warps),
            "cubin": base64.b64encode(compiled.asm["cubin"]).decode("ascii"),
            "ptxas_log": log.getvalue()[-MAX_LOG_CHARS:], "dots": dots}


def main() -> int:
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)          # whatever else writes to stdout (C++ diagnostics) cannot break the result lines
    sys.stdout = sys.stderr
    request = json.loads(sys.stdin.read())
    _apply_limits(request.get("limits") or {})
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", int(request["target"]["arch"]), int(request["target"].get("warp_size", 32)))
    try:
        namespace = _define(request["source"], list(request["kernels"]))
        defined = None
    except Exception as error:  # noqa: BLE001 - every build reports it
        namespace, defined = {}, _error_text(error)
    for index, build in enumerate(request["builds"]):
        started = time.perf_counter()
        if defined is not None:
            result = {"ok": False, "error": defined}
        else:
            try:
                result = _compile(namespace, build, target)
            except Exception as error:  # noqa: BLE001 - the compiler's reason is the result
                result = {"ok": False, "error": _error_text(error)}
                traceback.print_exc(limit=3)
        result.update(index=index, seconds=round(time.perf_counter() - started, 3))
        results.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
