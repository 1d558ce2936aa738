"""Every Triton kernel of course_lib/kernels, compiled for an A100 (sm_80) and an H100 (sm_90) on this CPU.

The interpreter proves the kernels compute the right numbers; these tests prove a GPU can run them:
each configuration the reference wrappers launch for the labs' and the engine's shapes
(``course_lib.kernels.gpu_builds``) must compile within its time limit, fit the target's shared
memory and registers per block, spill no register, and keep float32 products in float32 (no TF32).
A failure names the kernel, the target, the configuration and the compiler's reason.

The machinery has tests of its own here: kernel sources read without running them
(``kernel_source``), the cubin's register count against ptxas's own report (``cubin``), and a runaway
compile that is stopped at its time limit while the next configuration still compiles (``gpu_compile``).
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from course_lib.kernels.gpu_compile import BuildReport, KernelBuild, compile_kernels
from course_lib.kernels.gpu_targets import A100, CI_TARGETS, H100
from course_lib.kernels.kernel_source import KernelSourceError, kernel_module

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "course_lib" / "kernels"
REFERENCE_KERNELS = ("_add_kernel", "_softmax_kernel", "_fused_add_rmsnorm_kernel", "_paged_decode_kernel",
                     "_merge_splits_kernel", "_store_kv_kernel")
REFERENCE_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def references():
    from course_lib.kernels.gpu_builds import reference_builds

    return {reference.kernel: reference for reference in reference_builds()}


@pytest.mark.parametrize("target", CI_TARGETS, ids=lambda target: target.sm)
@pytest.mark.parametrize("kernel", REFERENCE_KERNELS)
def test_the_reference_kernel_compiles_and_fits_without_spilling(references, kernel, target):
    reference = references[kernel]
    reports = compile_kernels(reference.module, reference.builds, target, timeout=REFERENCE_TIMEOUT_S)
    wrong = [report.verdict() for report in reports if not report.fits]
    wrong += [f"{report.verdict()}: spills registers" for report in reports
              if report.fits and (report.spill_stores or report.spill_loads)]
    wrong += [f"{report.verdict()}: float32 tl.dot in TF32: {report.tf32_products[0]}" for report in reports
              if report.tf32_products]
    assert not wrong, f"{kernel} on the {target}:\n" + "\n".join(wrong)
    assert len(reports) == len(reference.builds) >= 1


def _jit_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
            and any(ast.unparse(d).endswith("jit") for d in node.decorator_list)}


def test_every_jit_function_of_course_lib_kernels_is_compiled(references):
    """A kernel added to course_lib/kernels without a shape in gpu_builds would go unchecked: this fails."""
    written = set().union(*(_jit_functions(path) for path in KERNELS.glob("*.py")))
    compiled = set().union(*(reference.module.kernels for reference in references.values()))
    assert set(references) == set(REFERENCE_KERNELS)
    assert written <= compiled, f"jit functions no shape of gpu_builds launches: {sorted(written - compiled)}"


def test_the_builds_are_what_the_wrappers_launch_on_a_gpu(references):
    """Captured from the wrappers themselves; the interpreter-only switch takes its GPU value."""
    decode = references["_paged_decode_kernel"].builds
    assert {build.constexprs["DOT_IN_FP32"] for build in decode} == {False}
    assert {build.num_warps for build in decode} == {8}
    assert {(build.signature["q_ptr"], build.constexprs["HEAD_DIM_PAD"], build.constexprs["TILE"])
            for build in decode} >= {("*bf16", 128, 64), ("*fp32", 128, 32), ("*fp32", 64, 64), ("*bf16", 256, 32),
                                     ("*fp32", 256, 16)}
    softmax = {build.constexprs["BLOCK"]: build.num_warps for build in references["_softmax_kernel"].builds}
    assert softmax[16384] == 8 and softmax[8192] == 4


# ---------------------------------------------------------------------------------------------
# The machinery
# ---------------------------------------------------------------------------------------------

ADD = """
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)
"""
ADD_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


def test_the_kernel_module_keeps_the_last_definition_and_literal_constants_only():
    cells = [ADD.replace("x + y", "x"), "import os\nSCALE = tl.constexpr(2.0)\nOFFSET = os.getpid()\n" + ADD
             + "\n@triton.jit\ndef twice(x):\n    return x * SCALE + OFFSET\n", "add_kernel2 = 3"]
    module = kernel_module(cells, ["twice"])
    assert module.kernels == ("twice",) and module.constants == ("SCALE",)
    assert "@triton.jit" not in module.text and "os.getpid" not in module.text
    module = kernel_module(cells, ["add_kernel"])
    assert module.parameters["add_kernel"] == ("x_ptr", "y_ptr", "out_ptr", "n", "BLOCK")
    assert module.constexprs["add_kernel"] == ("BLOCK",)
    with pytest.raises(KernelSourceError, match="bound last by something else"):
        kernel_module([ADD, "from course_lib.kernels.vector_add import _add_kernel as add_kernel"], ["add_kernel"])
    with pytest.raises(KernelSourceError, match="bound last by something else"):
        kernel_module([ADD, "add_kernel = make_kernel()"], ["add_kernel"])
    with pytest.raises(KernelSourceError, match="no @triton.jit definition"):
        kernel_module(["exec(text)"], ["add_kernel"])


@pytest.mark.parametrize("body, refused", [
    ("getattr(tl, 'load')(x_ptr)", "getattr is Python"),
    ("tl.core.builtins.exec('1')", "module builtins"),
    ("x_ptr.__class__", "underscore"),
    ("triton.runtime.driver", "module triton.runtime"),
    ("open('/etc/passwd')", "open is Python"),
])
def test_a_kernel_that_reaches_past_triton_into_python_is_refused_before_any_compile(body, refused):
    source = f"@triton.jit\ndef sneaky(x_ptr):\n    {body}\n"
    with pytest.raises(KernelSourceError, match=refused):
        kernel_module([source], ["sneaky"])
    with pytest.raises(KernelSourceError, match="default"):
        kernel_module(["@triton.jit\ndef k(x_ptr, n=print('hi')):\n    pass\n"], ["k"])


def test_limits_of_a_target_make_a_compiled_kernel_not_fit():
    build = KernelBuild("k", {})
    assert BuildReport(build, H100, True, shared_memory=227 * 1024, registers=255, threads=256).fits
    too_much = BuildReport(build, H100, True, shared_memory=227 * 1024 + 1, registers=64, threads=128)
    assert not too_much.fits and "232,449 bytes of shared memory" in too_much.problems[0]
    assert not BuildReport(build, A100, True, shared_memory=0, registers=255, threads=512).fits
    assert not BuildReport(build, H100, False, error="boom").fits


RUNAWAY = """
@triton.jit
def runaway(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.cumsum(tl.load(x_ptr + offsets), axis=0))
"""


def test_a_runaway_compile_fails_at_its_time_limit_and_the_next_build_still_compiles():
    """The interpreter runs a 131,072-lane cumulative sum at once; a GPU compile of it does not finish."""
    module = kernel_module([RUNAWAY + ADD], ["runaway", "add_kernel"])
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    timeout = 15.0
    started = time.monotonic()
    runaway, add = compile_kernels(module, [KernelBuild("runaway", signature, {"BLOCK": 131072}),
                                            KernelBuild("add_kernel", ADD_SIGNATURE, {"BLOCK": 1024})],
                                   H100, timeout=timeout)
    assert runaway.timed_out and not runaway.compiled and "did not finish compiling within 15 s" in runaway.error
    assert add.fits, add.verdict()
    assert time.monotonic() - started < 2 * timeout + 20


def test_registers_read_from_the_cubin_agree_with_ptxas_and_a_compile_error_names_the_line():
    module = kernel_module([ADD, "BLOCK_SIZE = 1024\n" + ADD.replace("add_kernel", "global_kernel")
                            .replace("tl.arange(0, BLOCK)", "tl.arange(0, BLOCK_SIZE)")], ["add_kernel", "global_kernel"])
    compiled, refused = compile_kernels(module, [KernelBuild("add_kernel", ADD_SIGNATURE, {"BLOCK": 1024}),
                                                 KernelBuild("global_kernel", ADD_SIGNATURE, {"BLOCK": 1024})], A100)
    assert compiled.fits and 8 <= compiled.registers <= 64 and compiled.spill_stores == 0
    assert compiled.registers == compiled.ptxas_registers
    assert compiled.shared_memory == 0 and compiled.threads == 128
    assert not refused.compiled and "Cannot access global variable BLOCK_SIZE" in refused.error
    assert "does not compile" in refused.verdict() and "global_kernel" in refused.verdict()
