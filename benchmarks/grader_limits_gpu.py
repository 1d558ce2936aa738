"""Does CUDA work under the grading process's own memory limit? One probe for a GPU machine.

The grading process runs the test cells with a data limit (RLIMIT_DATA, ``KernelLimits.grader_memory``,
8 GiB by default: ``autograde/grader_limits.py``). On a GPU worker the same process starts CUDA for
the GPU cells' checks, and CUDA maps a great deal of address space when it starts. This probe runs,
in a child process with no limit and in one with the grader's limit, what a GPU cell's check does:
start CUDA, allocate on the GPU and in pinned host memory, compile and launch a Triton kernel, and
check its result. It prints one line per step and case, and exits 1 if the limited case fails where
the unlimited one passes (2: no GPU here, or CUDA fails without a limit too).

    PYTHONPATH=. python3 benchmarks/grader_limits_gpu.py        # on a machine with a CUDA GPU
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from course_lib.runner.limits import KernelLimits

PROBE = r"""
import json, resource, sys, time
limit = int(sys.argv[1])
if limit:
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
steps = []
def step(name, fn):
    started = time.perf_counter()
    try:
        detail = fn()
        steps.append({"step": name, "ok": True, "s": round(time.perf_counter() - started, 3), "detail": detail})
        return True
    except BaseException as error:   # a probe: every failure is the answer
        steps.append({"step": name, "ok": False, "error": f"{type(error).__name__}: {str(error)[:300]}"})
        return False

import torch, triton, triton.language as tl

@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out + offsets, tl.load(x + offsets, mask=mask) + tl.load(y + offsets, mask=mask), mask=mask)

def triton_add():
    x = torch.randn(1 << 20, device="cuda"); y = torch.randn_like(x); out = torch.empty_like(x)
    add[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    return f"max error {float((out - (x + y)).abs().max()):.1e}"

def vm_data():
    for line in open("/proc/self/status"):
        if line.startswith("VmData"):
            return line.split(":")[1].strip()

ok = (step("cuda init", lambda: (torch.cuda.init(), torch.cuda.get_device_name())[1])
      and step("2 GiB on the GPU", lambda: str(torch.empty(1 << 29, device="cuda").fill_(1).sum().item()))
      and step("256 MiB pinned host memory", lambda: str(torch.empty(1 << 26).pin_memory().is_pinned()))
      and step("Triton compile and launch", triton_add)
      and step("matmul (cuBLAS)", lambda: str(tuple((torch.randn(2048, 2048, device="cuda") @ torch.randn(2048, 2048, device="cuda")).shape))))
steps.append({"step": "VmData at the end", "ok": True, "detail": vm_data()})
print(json.dumps(steps))
"""


def run_case(limit: int) -> list[dict]:
    """The probe's steps in a fresh process with data limit ``limit`` bytes (0: none)."""
    with tempfile.TemporaryDirectory() as folder:   # Triton reads a kernel's source from its file
        script = Path(folder) / "probe.py"
        script.write_text(PROBE)
        done = subprocess.run([sys.executable, str(script), str(limit)], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    if not lines:
        return [{"step": "the probe process", "ok": False,
                 "error": f"exit {done.returncode}: {done.stderr.strip()[-400:]}"}]
    return json.loads(lines[-1])


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("grader_limits_gpu: refused: this machine has no CUDA GPU (the probe asks how CUDA behaves under "
              "the grader's limit); nothing was run", file=sys.stderr)
        return 2
    limit = KernelLimits().grader_memory
    results = {"no data limit": run_case(0), f"data limit {limit / 2**30:g} GiB (grader_memory)": run_case(limit)}
    for case, steps in results.items():
        for step in steps:
            shown = step.get("detail") if step["ok"] else step["error"]
            print(f"{case:<36} {step['step']:<30} {'ok' if step['ok'] else 'FAILED':<7} {shown}")
    unlimited, limited = (all(step["ok"] for step in steps) for steps in results.values())
    if unlimited and not limited:
        print("grader_limits_gpu: CUDA fails under the grader's data limit: GPU cells could not be graded")
        return 1
    print("grader_limits_gpu: " + ("CUDA works under the grader's data limit" if limited else
                                   "CUDA fails without any limit too: this machine's GPU stack is broken"))
    return 0 if limited else 2


if __name__ == "__main__":
    sys.exit(main())
