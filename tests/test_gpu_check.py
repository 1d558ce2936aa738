"""benchmarks/gpu_check.sh, the prepared run for a GPU machine, checked here without one.

It must refuse on a CPU in one line, having run nothing; and what it runs on the GPU machine must import
with nothing but PyTorch, Triton, numpy and pytest (and this repository on PYTHONPATH): the tests below
block every other third-party package, as that machine lacks them. The Python parts also run here under
the script's test hook (``COURSE_GPU_CHECK_PRETEND=1``: the steps on the CPU at toy sizes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"

# What the GPU machine has besides the standard library: PyTorch (and what it imports), Triton, numpy,
# pytest (and its plugins' modules), hypothesis; and this repository's own packages and scripts.
AVAILABLE = {
    "torch", "torchgen", "functorch", "triton", "numpy", "typing_extensions", "sympy", "mpmath", "networkx",
    "jinja2", "markupsafe", "filelock", "fsspec", "setuptools", "pkg_resources", "_distutils_hack",
    "pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "hypothesis", "sortedcontainers", "attr",
    "attrs", "exceptiongroup", "tomli", "pytest_timeout", "pygments",
    "course_lib", "tests", "benchmarks", "lab03_answers", "paged_attention", "lab03_kernels", "gpu_check",
    "sitecustomize",
}
BLOCKER = textwrap.dedent(f"""
    import sys

    class GpuMachineOnly:
        '''Refuse a third-party module the GPU machine does not have, as if it were not installed.'''

        allowed = {sorted(AVAILABLE)!r}

        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top in sys.stdlib_module_names or top in self.allowed or top.startswith("_"):
                return None
            raise ModuleNotFoundError(f"No module named {{name!r}} (not on the GPU machine)", name=name)

    sys.meta_path.insert(0, GpuMachineOnly())
""")


def _environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    blocker = tmp_path / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    environment = {name: value for name, value in os.environ.items() if not name.startswith("COURSE_GPU_CHECK")}
    environment.update(PYTHONPATH=str(blocker), PYTHON=sys.executable, OUT=str(tmp_path / "out"), **extra)
    return environment


def test_on_a_cpu_it_refuses_in_one_line_and_runs_nothing(tmp_path):
    started = time.monotonic()
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=_environment(tmp_path),
                            timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: refused: no CUDA GPU"), result.stderr
    assert not (tmp_path / "out").exists() and time.monotonic() - started < 60


def test_without_its_python_it_refuses_in_one_line(tmp_path):
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                            env={**_environment(tmp_path), "PYTHON": str(tmp_path / "no-python-here")})
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "refused" in result.stderr


IMPORTS = """
import runpy, sys
sys.path.insert(0, "benchmarks")
import gpu_check, lab03_answers, paged_attention, lab03_kernels
import course_lib.checks.kernels, course_lib.checks.kernels_engine, course_lib.checks.kernels_paged
import course_lib.engine, course_lib.model, course_lib.sampling, course_lib.kernels.tolerances
for name in ("01_triton_basics", "02_fused_rmsnorm"):
    lab03_answers.chapter(name)
lab03_answers.solution_backend()
for path in gpu_check.gpu_test_files():
    __import__("tests." + path.split("/")[-1].removesuffix(".py"))
print("imported", len(gpu_check.gpu_test_files()), "GPU test files")
"""


def test_everything_it_runs_imports_with_only_torch_triton_numpy_and_pytest(tmp_path):
    result = subprocess.run([sys.executable, "-c", IMPORTS], cwd=ROOT, capture_output=True, text=True,
                            env={**_environment(tmp_path), "PYTHONPATH": f"{tmp_path / 'blocker'}:{ROOT}"},
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "imported 3 GPU test files" in result.stdout   # the paged-attention, basics and RMSNorm tests


def test_the_blocker_blocks(tmp_path):
    """The import test above would prove nothing if the blocker let a missing package through."""
    result = subprocess.run([sys.executable, "-c", "import nbformat"], cwd=ROOT, capture_output=True, text=True,
                            env={**_environment(tmp_path), "PYTHONPATH": str(tmp_path / "blocker")}, timeout=60)
    assert result.returncode != 0 and "not on the GPU machine" in result.stderr


def test_every_step_runs_under_the_test_hook_and_the_table_comes_last(tmp_path):
    """On the CPU (the test hook): the GPU tests collected and skipped, the GPU cells' checks skipped on the
    reference answers, the benchmarks' dry runs, and the engine step on a tiny random model (the Triton
    backend under the interpreter against the torch backend); all within the blocker's imports."""
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=900,
                            env=_environment(tmp_path, COURSE_GPU_CHECK_PRETEND="1"))
    out = tmp_path / "out"
    table = (out / "gpu_check.md").read_text()
    assert result.stdout.rstrip().endswith(f"(written to {out / 'gpu_check.md'})"), result.stdout[-3000:]
    assert "PRETEND" in table and table in result.stdout
    rows = {row.split(" | ")[0].lstrip("| "): row for row in table.splitlines()
            if row.startswith("| ") and "---" not in row and not row.startswith("| step")}
    assert list(rows) == ["gpu tests (pytest -m gpu)", "Lab 0.3 GPU cells, reference answers",
                          "benchmarks/paged_attention.py", "benchmarks/lab03_kernels.py",
                          "engine: Triton decode on the GPU vs the CPU's tokens"], table
    tests, cells, paged, lab03, engine = rows.values()
    assert "| skipped |" in tests and " skipped, " in tests, tests
    assert "| skipped |" in cells and cells.count("skipped: needs a GPU") == 5, cells
    assert "| passed |" in paged and "| passed |" in lab03, table
    assert "| passed |" in engine and engine.count("the same 4 tokens") == 3, engine
    assert (out / "paged_attention_gpu.md").exists() and (out / "lab03_kernels_gpu.md").exists()
    assert result.returncode == 1   # skipped steps are not passed ones


def test_the_grader_limits_probe_refuses_on_a_cpu_in_one_line():
    """benchmarks/grader_limits_gpu.py (CUDA under the grader's data limit) runs only where there is a GPU."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the probe runs instead of refusing (benchmarks/RESULTS.md)")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "grader_limits_gpu.py")], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0 and "refused: this machine has no CUDA GPU" in done.stderr
