"""Benchmark: Lab 0.3's kernels on a GPU, to calibrate the lab's speed checks and fill its tables.

Three comparisons, each as the median of paired, alternated runs (CUDA events, the checks' own
timer, ``course_lib.checks.kernels.paired_median_seconds``), with the achieved bandwidth as a share
of the copy bandwidth measured in the same run, and every output checked before it is timed:

1. **vector add** (chapter 1): the reference ``vector_add`` against ``torch.add``, float32, 2**26
   elements (12 bytes per element).
2. **residual add + RMSNorm** (chapter 2): the fused reference kernel against the unfused torch
   version, bf16, [8192, 4096]; bytes by ``add_rmsnorm_traffic``.
3. **decode attention** (chapters 3-5): the chapter-5 *solution* backend (the student-style kernel:
   one block per loop step, products by broadcasting, splits by the chapter's rule), the course's
   reference kernel (tl.dot on 64-position tiles), and torch SDPA on the padded batch, for batch
   1, 8 and 64 at context 4096, Llama-3-8B heads (32 / 8 / 128) and SmolLM2 heads (9 / 3 / 64),
   bf16; bytes by ``decode_attention_traffic`` (K, V, q and the output).

The lab's GPU checks require: vector_add within 0.8 of torch.add's speed, the fused kernel 1.5x the
unfused torch version, the student's decode within 3x of the reference kernel's time. The script
prints the same ratios for the solution code, so the thresholds can be checked against a real GPU.

``--dry-run`` runs everything at toy sizes on the CPU under Triton's interpreter (with wall-clock
timing instead of CUDA events) to exercise every path; its timings are meaningless. Outputs are checked
within ``course_lib.kernels.tolerances`` (bfloat16's). It needs PyTorch, Triton and this repository on
``PYTHONPATH`` only (``lab03_answers`` reads the solution notebooks as JSON), as on the machine that
runs ``benchmarks/gpu_check.sh``.

Run on a CUDA machine: ``python benchmarks/lab03_kernels.py --out benchmarks/lab03_kernels_gpu.md``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import course_lib.kernels  # noqa: F401  (the interpreter turns on before any kernel is defined)
from course_lib.checks.kernels_paged import paged_case
from course_lib.kernels.paged_attention import RUNS_ON_INTERPRETER, decode_attention_traffic, paged_decode_attention
from course_lib.kernels.rmsnorm import add_rmsnorm_ref, add_rmsnorm_traffic, fused_add_rmsnorm, unfused_add_rmsnorm
from course_lib.kernels.tolerances import assert_close
from course_lib.kernels.vector_add import vector_add
from course_lib.model_runner import paged_decode_attention_torch
from lab03_answers import solution_backend

HEADS = {"Llama-3-8B 32/8/128": (32, 8, 128), "SmolLM2 9/3/64": (9, 3, 64)}


def paired_seconds(first, second, dry_run: bool, repeats: int = 30) -> tuple[float, float]:
    if not dry_run:
        from course_lib.checks.kernels import paired_median_seconds

        return paired_median_seconds(first, second, repeats=repeats)
    times: tuple[list[float], list[float]] = ([], [])
    for pair in range(2):
        for index, run in ((0, first), (1, second)) if pair % 2 == 0 else ((1, second), (0, first)):
            start = time.perf_counter()
            run()
            times[index].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def copy_rate(device: torch.device, dry_run: bool) -> float:
    from course_lib.kernels.timing import copy_bandwidth

    return copy_bandwidth(device, 2**23 if dry_run else 2**30, repeats=3 if dry_run else 20)


def row(name: str, seconds: float, num_bytes: float, copy: float) -> str:
    return f"| {name} | {seconds * 1e6:.1f} | {num_bytes / seconds / 1e9:.1f} | {num_bytes / seconds / copy:.0%} |"


def bench_vector_add(device, dry_run, copy) -> list[str]:
    n = 4096 if dry_run else 2**26
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    assert torch.equal(vector_add(x, y), x + y)
    ours, theirs = paired_seconds(lambda: vector_add(x, y), lambda: torch.add(x, y), dry_run)
    moved = 12 * n
    return [f"**vector add**, {n:,} float32 (ratio torch / ours = {theirs / ours:.2f}; the check needs >= 0.8)", "",
            "| kernel | us | GB/s | % of copy |", "| --- | ---: | ---: | ---: |",
            row("reference vector_add", ours, moved, copy), row("torch.add", theirs, moved, copy), ""]


def bench_rmsnorm(device, dry_run, copy) -> list[str]:
    tokens, hidden = (4, 576) if dry_run else (8192, 4096)
    generator = torch.Generator().manual_seed(0)
    x, residual = (torch.randn(tokens, hidden, generator=generator).to(device, torch.bfloat16) for _ in range(2))
    weight = (torch.rand(hidden, generator=generator) + 0.5).to(device, torch.bfloat16)
    out, _ = fused_add_rmsnorm(x, residual, weight, 1e-5)
    expected, _ = add_rmsnorm_ref(x.double().cpu(), residual.double().cpu(), weight.double().cpu(), 1e-5)
    assert_close(out, expected, torch.bfloat16)
    ours, theirs = paired_seconds(lambda: fused_add_rmsnorm(x, residual, weight, 1e-5),
                                  lambda: unfused_add_rmsnorm(x, residual, weight, 1e-5), dry_run)
    unfused_bytes, fused_bytes = add_rmsnorm_traffic(tokens, hidden, 2)
    return [f"**residual add + RMSNorm**, [{tokens}, {hidden}] bf16 (speed-up {theirs / ours:.2f}x; the check needs "
            f">= 1.5x; bytes ratio {unfused_bytes / fused_bytes:.2f}x)", "",
            "| kernel | us | GB/s | % of copy |", "| --- | ---: | ---: | ---: |",
            row("fused reference kernel", ours, fused_bytes, copy),
            row("unfused torch (6 kernels)", theirs, unfused_bytes, copy), ""]


def bench_decode(device, dry_run, copy) -> list[str]:
    backend = solution_backend()
    batches, context = ((1, 2), 40) if dry_run else ((1, 8, 64), 4096)
    lines = [f"**decode attention**, context {context}, bf16 (the check needs the solution within 3x of the "
             "reference's time)", "", "| heads | batch | solution backend | reference kernel | torch SDPA, padded | "
             "solution / reference time |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, (q_heads, kv_heads, head_dim) in HEADS.items():
        for batch in batches:
            case = paged_case([context] * batch, q_heads, kv_heads, head_dim, 16, dtype=torch.bfloat16, spare_blocks=0)
            q, k_cache, v_cache, tables, lens, scale = (t.to(device) if torch.is_tensor(t) else t for t in case.args())
            k_cache.nan_to_num_(0.0), v_cache.nan_to_num_(0.0)
            reference = paged_decode_attention(q, k_cache, v_cache, tables, lens, scale)
            assert_close(backend.decode(q, k_cache, v_cache, tables, lens, scale), reference, torch.bfloat16)
            ours, theirs = paired_seconds(lambda: backend.decode(q, k_cache, v_cache, tables, lens, scale),
                                          lambda: paged_decode_attention(q, k_cache, v_cache, tables, lens, scale),
                                          dry_run)
            torch_path, _ = paired_seconds(
                lambda: paged_decode_attention_torch(q, k_cache, v_cache, tables, lens, scale),
                lambda: None, dry_run)
            moved, _ = decode_attention_traffic([context] * batch, 16, q_heads, kv_heads, head_dim, 2)
            cells = [f"{s * 1e6:.0f} us ({moved / s / copy:.0%})" for s in (ours, theirs, torch_path)]
            lines.append(f"| {label} | {batch} | {' | '.join(cells)} | {ours / theirs:.2f} |")
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lab03_kernels.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU interpreter; timings meaningless")
    parser.add_argument("--out", type=Path, help="also write the report (markdown) to this file")
    args = parser.parse_args(argv)
    has_gpu = torch.cuda.is_available() and not RUNS_ON_INTERPRETER
    if not has_gpu and not args.dry_run:
        print("lab03_kernels.py: timing needs a CUDA GPU; use --dry-run on a CPU.", file=sys.stderr)
        return 2
    device = torch.device("cuda" if has_gpu else "cpu")
    copy = copy_rate(device, args.dry_run)
    machine = torch.cuda.get_device_name(device) if has_gpu else f"{platform.processor() or platform.machine()} CPU"
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines = [f"# Lab 0.3 kernels{' (DRY RUN: timings meaningless)' if args.dry_run else ''}", "",
             f"Machine: {machine}, torch {torch.__version__}. Date: {when}. Copy bandwidth (read + write): "
             f"{copy / 1e9:.1f} GB/s.", ""]
    lines += bench_vector_add(device, args.dry_run, copy)
    lines += bench_rmsnorm(device, args.dry_run, copy)
    lines += bench_decode(device, args.dry_run, copy)
    report = "\n".join(lines)
    print(report)
    if args.out is not None:
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
