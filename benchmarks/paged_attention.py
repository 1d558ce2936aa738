"""Benchmark: the Triton paged decode-attention kernel against two SDPA baselines, on a GPU.

For every head shape x batch x context (all sequences of one batch share the context length), with
the KV cache in a paged pool reached through shuffled block tables:

- **Triton**: ``paged_decode_attention`` (split count chosen by its own rule), median time from
  ``triton.testing.do_bench`` (which flushes the L2 cache between runs).
- **achieved bandwidth** = bytes that must be read / time, where the bytes are K and V of every
  cached token, the queries, the block tables and seq_lens (the output write is left out).
- **% of copy**: that bandwidth as a share of the device's copy bandwidth, measured in the same run
  as (bytes read + bytes written) / time of a 1 GiB device-to-device ``copy_``.
- **SDPA contiguous**: ``torch.nn.functional.scaled_dot_product_attention`` on K/V already gathered
  into contiguous ``[batch, kv_heads, context, head_dim]`` tensors: a bound that ignores paging.
  The query heads of one KV head's group become the query rows of that KV head (decode has no mask),
  so SDPA's fastest kernels apply without GQA support.
- **gather+SDPA**: copy each sequence's blocks out of the pool, then SDPA: what a paged engine
  without a paged kernel does on every layer of every step.

Targets (issue 5): at batch 64, context 4096, (32, 8, 128) bf16, at least 70% of the copy
bandwidth; faster than gather+SDPA at every size measured. The script prints whether they are met.

Configurations whose pool plus copies would not fit in the GPU's free memory are skipped with a note.

``--dry-run`` runs everything at toy sizes on the CPU under Triton's interpreter (or on the GPU
when there is one), asserts the kernel's output against ``paged_decode_attention_ref`` with one and
with several splits, and uses a toy memory budget so the skip path runs too. Its timings measure
numpy, not a GPU, and are labelled meaningless.

Run: ``course bench kernel`` (or ``python benchmarks/paged_attention.py``) on a machine with a CUDA
GPU; add ``--out benchmarks/paged_attention_<gpu>.md`` to keep the report.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import course_lib.kernels  # noqa: F401  (turns on Triton's interpreter when there is no GPU)
from course_lib.kernels import tolerances
from course_lib.kernels.paged_attention import (
    RUNS_ON_INTERPRETER,
    choose_num_splits,
    paged_decode_attention,
    paged_decode_attention_ref,
)

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class HeadShape:
    label: str
    num_q_heads: int
    num_kv_heads: int
    head_dim: int


HEAD_SHAPES = {
    "llama": HeadShape("32q/8kv/128", 32, 8, 128),  # Llama-3-8B's attention
    "smollm2": HeadShape("SmolLM2 9q/3kv/64", 9, 3, 64),
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

GPU_BATCHES = (1, 16, 64, 256)
GPU_CONTEXTS = (512, 2048, 4096, 8192)  # 4096 is where the bandwidth target is set
GPU_COPY_BYTES = GIB
DRY_RUN_BATCHES = (1, 2)
DRY_RUN_CONTEXTS = (20, 70)  # 70 positions: two tiles of the kernel's loop
DRY_RUN_COPY_BYTES = 8 * MIB
DRY_RUN_MEMORY_BUDGET = 1.5 * MIB  # small enough that the largest toy configuration is skipped
DRY_RUN_FORCED_SPLITS = 3  # the interpreter's rule picks 1 split; check the merge path as well

TARGET_SHAPE, TARGET_BATCH, TARGET_CONTEXT, TARGET_SHARE = "llama", 64, 4096, 0.70
TOLERANCES = {  # kernel vs the fp32 reference from the same inputs: the course's one table
    dtype: tolerance.as_kwargs() for dtype, tolerance in tolerances.TOLERANCES.items()
}


@dataclass
class Row:
    shape: str
    batch: int
    context: int
    num_splits: int | None = None
    triton_ms: float | None = None
    bytes_read: int = 0
    sdpa_ms: float | None = None
    gather_sdpa_ms: float | None = None
    note: str = ""

    @property
    def bandwidth(self) -> float | None:
        return self.bytes_read / (self.triton_ms * 1e-3) if self.triton_ms else None


def format_bytes(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.2f} GiB" if num_bytes >= GIB else f"{num_bytes / MIB:.2f} MiB"


# ---------------------------------------------------------------------------------------------
# Timing.
# ---------------------------------------------------------------------------------------------


def median_ms(fn, dry_run: bool) -> float:
    """Median milliseconds of ``fn()``: do_bench on a GPU; in a dry run, one wall-clock run after
    one warm-up (the interpreter is slow, and its timings mean nothing anyway)."""
    if not dry_run:
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    fn()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def copy_bandwidth(device: torch.device, num_bytes: int, dry_run: bool) -> float:
    """Bytes per second of a large copy, counting the bytes read and the bytes written."""
    source = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    destination = torch.empty_like(source)
    milliseconds = median_ms(lambda: destination.copy_(source), dry_run)
    return 2 * num_bytes / (milliseconds * 1e-3)


# ---------------------------------------------------------------------------------------------
# One configuration.
# ---------------------------------------------------------------------------------------------


def bytes_needed(shape: HeadShape, batch: int, context: int, block_size: int, dtype: torch.dtype) -> int:
    """Device memory one configuration needs: the pool, its contiguous copy, the gather's copy."""
    element = torch.finfo(dtype).bits // 8
    slots = batch * math.ceil(context / block_size) * block_size
    kv = 2 * slots * shape.num_kv_heads * shape.head_dim * element
    queries = 2 * batch * shape.num_q_heads * shape.head_dim * element  # q and the output
    return 3 * kv + queries


def bytes_to_read(shape: HeadShape, batch: int, context: int, max_blocks: int, dtype: torch.dtype) -> int:
    """What decode attention must read at least: K and V of every token, q, block tables, seq_lens."""
    element = torch.finfo(dtype).bits // 8
    kv = 2 * batch * context * shape.num_kv_heads * shape.head_dim * element
    queries = batch * shape.num_q_heads * shape.head_dim * element
    tables = batch * max_blocks * 4 + batch * 4
    return kv + queries + tables


def build_inputs(shape, batch, context, block_size, dtype, device, seed):
    """A full pool of random K/V reached through shuffled block tables, and random queries.

    Returns q ``[batch, num_q_heads, head_dim]``, k_cache and v_cache ``[num_blocks, block_size,
    num_kv_heads, head_dim]``, block_tables ``[batch, max_blocks]`` int32, seq_lens ``[batch]`` int32.
    """
    generator = torch.Generator(device=device).manual_seed(seed)
    max_blocks = math.ceil(context / block_size)
    num_blocks = batch * max_blocks
    cache_shape = (num_blocks, block_size, shape.num_kv_heads, shape.head_dim)
    k_cache = torch.randn(cache_shape, generator=generator, device=device, dtype=dtype)
    v_cache = torch.randn(cache_shape, generator=generator, device=device, dtype=dtype)
    # A shuffled pool: each sequence's blocks are scattered, as after a while of serving.
    permutation = torch.randperm(num_blocks, generator=generator, device=device)
    block_tables = permutation.view(batch, max_blocks).to(torch.int32)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    q = torch.randn(batch, shape.num_q_heads, shape.head_dim, generator=generator, device=device, dtype=dtype)
    return q, k_cache, v_cache, block_tables, seq_lens


def gather_contiguous(k_cache, v_cache, block_tables, context):
    """Each sequence's K/V copied out of the pool: two ``[batch, num_kv_heads, context, head_dim]``."""
    blocks = block_tables.long()

    def gather(cache):
        per_sequence = cache[blocks].flatten(1, 2)[:, :context]  # [batch, context, kv_heads, head_dim]
        return per_sequence.transpose(1, 2).contiguous()

    return gather(k_cache), gather(v_cache)


def sdpa_decode(q, keys, values, scale):
    """Decode attention with SDPA: the group's query heads become query rows of their KV head.

    q ``[batch, num_q_heads, head_dim]``; keys/values ``[batch, num_kv_heads, context, head_dim]``.
    Returns ``[batch, num_q_heads, head_dim]``.
    """
    batch, num_q_heads, head_dim = q.shape
    num_kv_heads = keys.shape[1]
    grouped = q.view(batch, num_kv_heads, num_q_heads // num_kv_heads, head_dim)
    out = F.scaled_dot_product_attention(grouped, keys, values, scale=scale)
    return out.reshape(batch, num_q_heads, head_dim)


def run_config(shape, batch, context, args, device, budget) -> Row:
    row = Row(shape.label, batch, context)
    dtype = DTYPES[args.dtype]
    needed = bytes_needed(shape, batch, context, args.block_size, dtype)
    if needed > budget:
        row.note = f"skipped: needs {format_bytes(needed)}, {format_bytes(budget)} available"
        return row
    q, k_cache, v_cache, block_tables, seq_lens = build_inputs(
        shape, batch, context, args.block_size, dtype, device, args.seed
    )
    scale = shape.head_dim**-0.5
    row.bytes_read = bytes_to_read(shape, batch, context, block_tables.shape[1], dtype)
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
    max_context = block_tables.shape[1] * args.block_size
    row.num_splits = choose_num_splits(batch, shape.num_kv_heads, max_context, sms)

    def triton_call():
        return paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale)

    with tolerances.full_fp32_matmul():   # the reference in full float32 on a GPU too (no TF32)
        expected = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, scale).float()
    torch.testing.assert_close(triton_call().float(), expected, **TOLERANCES[dtype])
    if args.dry_run:
        forced = paged_decode_attention(
            q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits=DRY_RUN_FORCED_SPLITS
        )
        torch.testing.assert_close(forced.float(), expected, **TOLERANCES[dtype])
    row.triton_ms = median_ms(triton_call, args.dry_run)

    keys, values = gather_contiguous(k_cache, v_cache, block_tables, context)
    torch.testing.assert_close(sdpa_decode(q, keys, values, scale).float(), expected, **TOLERANCES[dtype])
    row.sdpa_ms = median_ms(lambda: sdpa_decode(q, keys, values, scale), args.dry_run)
    del keys, values

    def gather_then_sdpa():
        return sdpa_decode(q, *gather_contiguous(k_cache, v_cache, block_tables, context), scale)

    row.gather_sdpa_ms = median_ms(gather_then_sdpa, args.dry_run)
    return row


# ---------------------------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------------------------


def machine_description(device: torch.device) -> str:
    import triton

    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        what = (
            f"{properties.name}, {properties.multi_processor_count} SMs, "
            f"{properties.total_memory / GIB:.0f} GiB"
        )
    else:
        what = f"CPU: {cpu_model_name()}, {os.cpu_count()} cores, {platform.system()}"
        what += ", Triton interpreter" if RUNS_ON_INTERPRETER else ""
    return f"{what}; torch {torch.__version__}, triton {triton.__version__}"


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def format_table(rows: list[Row], copy_bytes_per_s: float) -> str:
    header = (
        "| head shape | batch | context | splits | Triton µs | GB/s | % of copy | SDPA contiguous µs "
        "| gather+SDPA µs | Triton vs gather+SDPA |"
    )
    lines = [header, "|" + " --- |" * 10]
    for row in rows:
        if row.triton_ms is None:
            lines.append(f"| {row.shape} | {row.batch} | {row.context} | {row.note} | | | | | | |")
            continue
        lines.append(
            f"| {row.shape} | {row.batch} | {row.context} | {row.num_splits} | {row.triton_ms * 1e3:.1f} "
            f"| {row.bandwidth / 1e9:.1f} | {100 * row.bandwidth / copy_bytes_per_s:.0f}% "
            f"| {row.sdpa_ms * 1e3:.1f} | {row.gather_sdpa_ms * 1e3:.1f} "
            f"| {row.gather_sdpa_ms / row.triton_ms:.2f}x |"
        )
    return "\n".join(lines)


def target_lines(rows: list[Row], copy_bytes_per_s: float) -> list[str]:
    measured = [row for row in rows if row.triton_ms is not None]
    lines = []
    target = [
        row
        for row in measured
        if (row.shape, row.batch, row.context)
        == (HEAD_SHAPES[TARGET_SHAPE].label, TARGET_BATCH, TARGET_CONTEXT)
    ]
    if target:
        share = target[0].bandwidth / copy_bytes_per_s
        verdict = "met" if share >= TARGET_SHARE else "NOT met"
        lines.append(
            f"- Bandwidth target ({HEAD_SHAPES[TARGET_SHAPE].label}, batch {TARGET_BATCH}, context "
            f"{TARGET_CONTEXT}: >= {TARGET_SHARE:.0%} of copy): {share:.0%}, {verdict}."
        )
    else:
        lines.append("- Bandwidth target: its configuration was not measured in this run.")
    slower = [row for row in measured if row.triton_ms >= row.gather_sdpa_ms]
    verdict = "met" if not slower else f"NOT met in {len(slower)} of {len(measured)} configurations"
    lines.append(f"- Faster than gather+SDPA everywhere measured: {verdict}.")
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paged_attention.py",
        description="Time the Triton paged decode-attention kernel against SDPA on contiguous K/V "
        "and gather-then-SDPA, with achieved bandwidth as a share of the measured copy bandwidth.",
    )
    parser.add_argument("--dry-run", action="store_true",
                        help="toy sizes (on the CPU interpreter without a GPU); checks every path, "
                        "timings meaningless")
    parser.add_argument("--out", type=Path, help="also write the report (markdown) to this file")
    parser.add_argument("--batches", type=int, nargs="+",
                        help=f"default {GPU_BATCHES} ({DRY_RUN_BATCHES} dry)")
    parser.add_argument("--contexts", type=int, nargs="+",
                        help=f"tokens per sequence; default {GPU_CONTEXTS} ({DRY_RUN_CONTEXTS} dry)")
    parser.add_argument("--shapes", nargs="+", choices=sorted(HEAD_SHAPES), default=list(HEAD_SHAPES),
                        help="head shapes: llama = 32 q / 8 kv heads / 128, smollm2 = 9 / 3 / 64")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--memory-budget-gib", type=float,
                        help="skip configurations needing more; default: 90%% of the GPU's free memory "
                        f"({DRY_RUN_MEMORY_BUDGET / MIB:.2f} MiB in a dry run)")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    has_gpu = torch.cuda.is_available() and not RUNS_ON_INTERPRETER
    if not has_gpu and not args.dry_run:
        print("paged_attention.py: timing the kernel needs a CUDA GPU; use --dry-run on a CPU.",
              file=sys.stderr)
        return 2
    if args.block_size < 1:
        print("paged_attention.py: --block-size must be >= 1", file=sys.stderr)
        return 2
    device = torch.device("cuda" if has_gpu else "cpu")
    batches = args.batches or (DRY_RUN_BATCHES if args.dry_run else GPU_BATCHES)
    contexts = args.contexts or (DRY_RUN_CONTEXTS if args.dry_run else GPU_CONTEXTS)
    if args.memory_budget_gib is not None:
        budget = args.memory_budget_gib * GIB
    elif args.dry_run:
        budget = DRY_RUN_MEMORY_BUDGET
    else:
        budget = 0.9 * torch.cuda.mem_get_info(device)[0]

    copy_bytes = DRY_RUN_COPY_BYTES if args.dry_run else GPU_COPY_BYTES
    copy_bytes_per_s = copy_bandwidth(device, copy_bytes, args.dry_run)
    rows = []
    for shape_name in args.shapes:
        for batch in batches:
            for context in contexts:
                row = run_config(HEAD_SHAPES[shape_name], batch, context, args, device, budget)
                rows.append(row)
                if device.type == "cuda":
                    torch.cuda.empty_cache()

    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    title = "Paged decode attention: Triton vs SDPA"
    lines = [f"# {title}{' (DRY RUN)' if args.dry_run else ''}", ""]
    lines.append(f"Machine: {machine_description(device)}. Date: {when}.")
    arguments = " ".join(argv if argv is not None else sys.argv[1:])
    lines.append(f"Command: `python benchmarks/paged_attention.py {arguments}`.")
    lines.append(
        f"dtype {args.dtype}, block size {args.block_size}, shuffled block tables, every sequence of a "
        f"batch at the full context. Copy bandwidth (read + write of a {copy_bytes / MIB:.0f} MiB copy): "
        f"{copy_bytes_per_s / 1e9:.1f} GB/s."
    )
    if args.dry_run:
        lines.append(
            "Dry run: toy sizes, outputs checked against paged_decode_attention_ref (auto and "
            f"{DRY_RUN_FORCED_SPLITS} splits) and SDPA, and a toy memory budget of "
            f"{format_bytes(budget)} so that the skip path runs. The timings below are meaningless "
            "(Triton's interpreter runs the kernel in numpy on the CPU)."
        )
    lines += ["", format_table(rows, copy_bytes_per_s), ""]
    if not args.dry_run:
        lines += target_lines(rows, copy_bytes_per_s)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
