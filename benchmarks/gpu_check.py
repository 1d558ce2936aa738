"""One prepared run on a machine with a GPU: what the course can only check there, in under 8 minutes.

Run it from the repository root with ``bash benchmarks/gpu_check.sh`` (which sets ``PYTHONPATH=.`` and
unbuffered output and calls this file) on a machine that has a CUDA GPU, PyTorch and Triton: nothing
of this project installed, no model file, no network. Everything it imports is this repository,
PyTorch, Triton, numpy and pytest (``tests/test_gpu_check.py`` holds it to that).

The steps, each in a process of its own with a time budget (``STEPS``), the whole run within
``MAX_SECONDS``; a step that runs out of time is stopped and reported, and the next one starts:

1. **gpu tests**: ``pytest -m "gpu and not slow"`` on the test files with GPU tests (larger shapes,
   half precision, pools past 2**31 elements). The one slow GPU test needs the SmolLM2 model file,
   which this machine does not have; step 5 checks the engine on a GPU instead.
2. **Lab 0.3 GPU cells**: the checks of the lab's three GPU test cells (``check_vector_add_speed``,
   ``check_fused_rmsnorm_speed``, ``check_decode_speed``, with their hidden variants) on the reference
   answers of ``solutions/lab03-kernels``, as the grader would run them on a GPU worker.
3. **benchmarks/paged_attention.py**: the reference decode kernel against SDPA (batches 1, 16, 64 at
   contexts 1,024 and 4,096; the bandwidth target's configuration among them).
4. **benchmarks/lab03_kernels.py**: what the lab's speed checks compare, for the course's own code.
5. **engine on the GPU**: the engine's decode with the Triton kernels on the GPU against the engine on
   the CPU with the torch backend, greedy tokens of SmolLM2-shaped random weights (fp32, no TF32).

It prints each step's output as it runs, then one table (step, result, seconds, details), last; the
table goes to ``$OUT/gpu_check.md`` (``$OUT`` set) or ``./gpu_check.md``, with each step's full log
and the benchmarks' reports beside it. Exit code: 0 when every step passed, 1 otherwise.

Without a CUDA GPU it refuses in one line (exit code 2) and runs nothing. ``COURSE_GPU_CHECK_PRETEND=1``
is a **test hook**, never for real use: it runs every step on the CPU at toy sizes (the interpreter,
dry-run benchmarks, a tiny model) so the tests can exercise this script's own code; its table says
PRETEND in its title and its numbers measure nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_SECONDS = 450
PRETEND = os.environ.get("COURSE_GPU_CHECK_PRETEND") == "1"   # test hook (module docstring)
RESULT = "RESULT: "


@dataclass
class Outcome:
    """One step's line of the table."""

    step: str
    result: str = "not run"
    seconds: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.result == "passed"


# ---------------------------------------------------------------------------------------------
# The refusal
# ---------------------------------------------------------------------------------------------


def refusal() -> str | None:
    """The one line that explains why this machine cannot run the check; None when it can."""
    try:
        import torch
    except ImportError as error:
        return f"gpu_check: refused: PyTorch cannot be imported by {sys.executable} ({error}); nothing was run"
    if PRETEND:
        return None
    if not torch.cuda.is_available():
        return ("gpu_check: refused: no CUDA GPU on this machine (torch.cuda.is_available() is False); "
                "it checks what only a GPU shows; nothing was run")
    return None


# ---------------------------------------------------------------------------------------------
# Steps that run in this file (a child process each)
# ---------------------------------------------------------------------------------------------


def step_cells() -> int:
    """Lab 0.3's GPU cells' checks on the reference answers; one RESULT line per check."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lab03_answers import chapter, solution_backend

    from course_lib.checks import CheckFailed, NeedsGPU
    from course_lib.checks import kernels as checks
    from course_lib.checks import kernels_engine

    vector_add = chapter("01_triton_basics").vector_add
    fused = chapter("02_fused_rmsnorm").fused_add_rmsnorm
    runs = [
        ("chapter 1: vector_add within 0.8 of torch.add", lambda: checks.check_vector_add_speed(vector_add)),
        ("chapter 1 hidden: 2**24 elements", lambda: checks.check_vector_add_speed(vector_add, 1 << 24)),
        ("chapter 2: fused_add_rmsnorm 1.5x the unfused", lambda: checks.check_fused_rmsnorm_speed(fused)),
        ("chapter 5: KernelBackend decode within 3x of the reference",
         lambda: kernels_engine.check_decode_speed(solution_backend())),
        ("chapter 5 hidden: batch 2, context 16384",
         lambda: kernels_engine.check_decode_speed(solution_backend(), num_seqs=2, context=16384)),
    ]
    failed = 0
    for name, run in runs:
        started = time.perf_counter()
        try:
            run()
            verdict = "passed"
        except NeedsGPU as skipped:
            verdict = str(skipped)   # "skipped: needs a GPU (...)"
        except CheckFailed as error:
            verdict = "FAILED: " + " / ".join(line.strip() for line in str(error).splitlines())
            failed += 1
        print(f"{RESULT}{name}: {verdict} ({time.perf_counter() - started:.1f} s)", flush=True)
    return 1 if failed else 0


SMOLLM2_SHAPE = dict(num_layers=30, hidden_size=576, num_q_heads=9, num_kv_heads=3, head_dim=64, vocab_size=49152,
                     intermediate_size=1536, max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5)
TINY_SHAPE = dict(SMOLLM2_SHAPE, num_layers=2, hidden_size=64, num_q_heads=4, num_kv_heads=2, head_dim=16,
                  vocab_size=256, intermediate_size=128, max_position_embeddings=256)
NEAR_TIE = 1e-3   # logits this close: a rounding difference may pick either token, and both are right


class TokenIdsOnly:
    """The engine's tokenizer for prompts given as token ids: random weights have no vocabulary."""

    eos_token_id = None

    def decode_token_bytes(self, token_id: int) -> bytes:
        return b""

    def encode(self, text: str):
        raise TypeError("this check gives the engine token ids, not text")


def step_engine() -> int:
    """Greedy tokens of the engine: Triton kernels on the GPU against the torch backend on the CPU."""
    import torch

    import course_lib.kernels  # noqa: F401  (the interpreter, when pretending on a CPU)
    from course_lib.engine import LLMEngine
    from course_lib.kernels.tolerances import full_fp32_matmul
    from course_lib.model import LlamaModel, random_weights
    from course_lib.model_config import ModelConfig
    from course_lib.sampling import SamplingParams

    config = ModelConfig(**(TINY_SHAPE if PRETEND else SMOLLM2_SHAPE))
    device = "cpu" if PRETEND else "cuda"
    weights = random_weights(config, seed=0)
    generator = torch.Generator().manual_seed(1)
    lengths = (3, 9, 24) if PRETEND else (5, 17, 33, 64, 100)
    prompts = [torch.randint(3, config.vocab_size, (length,), generator=generator).tolist() for length in lengths]
    params = SamplingParams(temperature=0.0, max_tokens=4 if PRETEND else 16, ignore_eos=True)
    with full_fp32_matmul():
        cpu_model = LlamaModel(config, weights).eval()
        on_cpu = LLMEngine(cpu_model, TokenIdsOnly(), attention_backend="torch").generate(prompts, params)
        gpu_model = LlamaModel(config, {name: tensor.to(device) for name, tensor in weights.items()}).eval()
        on_gpu = LLMEngine(gpu_model, TokenIdsOnly(), attention_backend="triton").generate(prompts, params)
        failed = 0
        for prompt, expected, got in zip(prompts, on_cpu, on_gpu):
            expected, got = list(expected.token_ids), list(got.token_ids)
            if expected == got:
                print(f"{RESULT}prompt of {len(prompt)} tokens: the same {len(got)} tokens", flush=True)
                continue
            step = next(i for i, (a, b) in enumerate(zip(expected, got)) if a != b)
            with torch.no_grad():
                logits = cpu_model(torch.tensor(prompt + expected[:step]))[-1]
            top = logits.topk(2).values
            margin = float(top[0] - top[1])
            near_tie = margin < NEAR_TIE
            failed += not near_tie
            print(f"{RESULT}prompt of {len(prompt)} tokens: differs at token {step} ({expected[step]} on the CPU, "
                  f"{got[step]} on the GPU); the CPU's top two logits are {margin:.2g} apart: "
                  f"{'a near-tie, either is right' if near_tie else 'FAILED'}", flush=True)
    print(f"{RESULT}{config.num_layers} layers, {len(prompts)} prompts, {params.max_tokens} tokens each, "
          f"{'CPU (pretend)' if PRETEND else torch.cuda.get_device_name()} against the CPU", flush=True)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# Running the steps
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    name: str
    budget: float
    command: list[str]
    details: str          # a regular expression: output lines that go in the table


def gpu_test_files() -> list[str]:
    """Test files that hold GPU tests (``pytest.mark.gpu``)."""
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").glob("test_*.py")
                  if "pytest.mark.gpu" in path.read_text(encoding="utf-8"))


def steps(out: Path) -> list[Step]:
    python = [sys.executable]
    try:   # plugins are not loaded by themselves (run_step): this one is asked for by name, when present
        import pytest_timeout  # noqa: F401
        per_test = ["-p", "pytest_timeout", "--timeout=100"]
    except ImportError:
        per_test = []
    dry = ["--dry-run"] if PRETEND else []
    paged = ["--batches", "1", "2", "--contexts", "20", "--shapes", "smollm2"] if PRETEND else \
        ["--batches", "1", "16", "64", "--contexts", "1024", "4096"]
    return [
        Step("gpu tests (pytest -m gpu)", 110,
             python + ["-m", "pytest", *gpu_test_files(), "-m", "gpu and not slow", "-q", "-rfs", "-p",
                       "no:cacheprovider", "-o", "addopts=", *per_test],
             r"^(\d+ (passed|failed|skipped|errors?)\b.*|FAILED .*|ERROR .*)$"),
        Step("Lab 0.3 GPU cells, reference answers", 100, python + [__file__, "--step", "cells"], f"^{RESULT}"),
        Step("benchmarks/paged_attention.py", 75,
             python + ["benchmarks/paged_attention.py", *dry, *paged, "--out", str(out / "paged_attention_gpu.md")],
             r"^- (Bandwidth target|Faster than)"),
        Step("benchmarks/lab03_kernels.py", 90,
             python + ["benchmarks/lab03_kernels.py", *dry, "--out", str(out / "lab03_kernels_gpu.md")],
             r"^\*\*"),
        Step("engine: Triton decode on the GPU vs the CPU's tokens", 60, python + [__file__, "--step", "engine"],
             f"^{RESULT}"),
    ]


def run_step(step: Step, deadline: float, log: Path) -> Outcome:
    """Run one step, its output streamed to this terminal and to ``log``, stopped at its budget."""
    outcome = Outcome(step.name)
    budget = min(step.budget, deadline - time.monotonic())
    if budget < 10:
        outcome.result = "not run: the run's time was spent"
        return outcome
    print(f"\n=== {step.name} (at most {budget:.0f} s) ===", flush=True)
    started = time.monotonic()
    # PYTEST_DISABLE_PLUGIN_AUTOLOAD: whatever pytest plugins the machine has installed stay out of the tests.
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "benchmarks"),
                                                              os.environ.get("PYTHONPATH")]))
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen(step.command, cwd=ROOT, env=environment, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        pattern = re.compile(step.details)
        timed_out = _stream(process, started + budget, sink, outcome.details, pattern)
    outcome.seconds = time.monotonic() - started
    if timed_out:
        outcome.result = f"TIMED OUT after {budget:.0f} s"
    elif process.returncode == 0:
        outcome.result = "passed"
        if outcome.details and all("skipped" in line for line in outcome.details):
            outcome.result = "skipped"
    else:
        outcome.result = f"FAILED (exit code {process.returncode})"
    return outcome


def _stream(process: subprocess.Popen, deadline: float, sink, details: list[str], pattern) -> bool:
    """Copy the process's output line by line until it ends (False) or the deadline passes (True, killed)."""
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                _kill(process)
                return True
            if not selector.select(min(left, 1.0)):
                continue
            chunk = os.read(process.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                print(line, flush=True)
                sink.write(line + "\n")
                if pattern.search(line):
                    details.append(line.removeprefix(RESULT).strip())
    process.wait()
    return False


def _kill(process: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def machine() -> str:
    import torch
    import triton

    where = torch.cuda.get_device_name() if torch.cuda.is_available() else f"{platform.machine()} CPU"
    return (f"{where}, torch {torch.__version__}, triton {triton.__version__}, Python {platform.python_version()}, "
            f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")


def table(outcomes: list[Outcome]) -> str:
    title = "GPU check" + (" (PRETEND: a test hook ran it on a CPU; no number here measures a GPU)" if PRETEND else "")
    lines = [f"# {title}", "", f"Machine: {machine()}. Command: `bash benchmarks/gpu_check.sh`.", "",
             "| step | result | seconds | details |", "| --- | --- | ---: | --- |"]
    for outcome in outcomes:
        details = "<br>".join(detail.replace("|", "/") for detail in outcome.details[:12]) or " "
        lines.append(f"| {outcome.step} | {outcome.result} | {outcome.seconds:.0f} | {details} |")
    passed = sum(outcome.passed for outcome in outcomes)
    lines += ["", f"{passed} of {len(outcomes)} steps passed."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", choices=("cells", "engine"), help=argparse.SUPPRESS)   # a child process's part
    parser.add_argument("--only", nargs="+", type=int, metavar="N",
                        help="run only these steps (1 to 5, in the order of the module docstring)")
    args = parser.parse_args(argv)
    reason = refusal()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    if args.step is not None:
        return {"cells": step_cells, "engine": step_engine}[args.step]()
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else Path.cwd()
    out.mkdir(parents=True, exist_ok=True)
    report = out / "gpu_check.md"
    print(f"gpu_check: {machine()}; the table goes to {report}", flush=True)
    deadline = time.monotonic() + MAX_SECONDS
    outcomes = []
    for number, step in enumerate(steps(out), 1):
        if args.only and number not in args.only:
            continue
        outcomes.append(run_step(step, deadline, out / f"gpu_check_step{number}.log"))
    text = table(outcomes)
    report.write_text(text, encoding="utf-8")
    print(f"\n{text}\n(written to {report})", flush=True)
    return 0 if all(outcome.passed for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
