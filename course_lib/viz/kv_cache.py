"""Plots for Lab 0.1, chapter 3 (the KV cache): how it grows, what it saves, what contiguous storage wastes.

Every function returns a ``matplotlib.figure.Figure`` built without pyplot's global state.
Memory is in binary units (KiB, MiB, GiB = 2**10, 2**20, 2**30 bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from course_lib.sim.fragmentation import WASTE_KINDS, Reservation, SimTrace, summarize_waste, waste_breakdown

__all__ = ["WASTE_COLOURS", "cache_vs_recompute", "contiguous_explorer", "contiguous_pool", "kv_cache_growth", "waste_over_time"]

GIB = 2**30

# One colour per kind of slot, shared by every figure of chapters 3 and 4.
WASTE_COLOURS = {
    "used": "#2b8cbe",
    "reserved_unused": "#a6bddb",
    "internal": "#fdae6b",
    "external": "#e34a33",
    "free": "#f0f0f0",
}
WASTE_LABELS = {
    "used": "used (holds a token)",
    "reserved_unused": "reserved for tokens still to come",
    "internal": "internal fragmentation (past the final length)",
    "external": "external fragmentation (hole too small)",
    "free": "free, usable",
}


def kv_cache_growth(size_fn: Callable, configs: Mapping[str, object], *, max_seq_len: int = 8192,
                    batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), batch_seq_len: int = 2048,
                    dtype: torch.dtype = torch.float16) -> Figure:
    """KV-cache size against sequence length (batch 1) and against batch size (at ``batch_seq_len``).

    size_fn(config, seq_len, batch_size, dtype) -> bytes: the reference or a student's function.
    configs: name -> model config, one line per model.
    """
    if max_seq_len < 1 or batch_seq_len < 1 or not batch_sizes:
        raise ValueError("max_seq_len and batch_seq_len must be >= 1 and batch_sizes non-empty")
    figure = Figure(figsize=(11, 4), layout="constrained")
    by_length, by_batch = figure.subplots(1, 2)
    seq_lens = [max(1, round(max_seq_len * k / 32)) for k in range(33)]
    for name, config in configs.items():
        by_length.plot(seq_lens, [size_fn(config, n, 1, dtype) / GIB for n in seq_lens], label=name)
        by_batch.plot(list(batch_sizes), [size_fn(config, batch_seq_len, b, dtype) / GIB for b in batch_sizes],
                      marker="o", label=name)
    dtype_name = str(dtype).replace("torch.", "")
    by_length.set(xlabel="sequence length (tokens)", ylabel="KV cache (GiB)",
                  title=f"One sequence, {dtype_name}: linear in length")
    by_batch.set(xlabel="batch size (sequences)", ylabel="KV cache (GiB)",
                 title=f"{batch_seq_len:,} tokens each, {dtype_name}: linear in batch")
    for axes in (by_length, by_batch):
        axes.grid(alpha=0.3)
        axes.legend()
    return figure


def cache_vs_recompute(num_new_tokens: Sequence[int], seconds_with_cache: Sequence[float],
                       seconds_without_cache: Sequence[float], tokens_with_cache: Sequence[int],
                       tokens_without_cache: Sequence[int]) -> Figure:
    """Measured time (left) and tokens run through the model (right), with and without the cache."""
    lengths = list(num_new_tokens)
    if not (len(lengths) == len(seconds_with_cache) == len(seconds_without_cache) == len(tokens_with_cache)
            == len(tokens_without_cache)):
        raise ValueError("all sequences must have one entry per length in num_new_tokens")
    figure = Figure(figsize=(11, 4), layout="constrained")
    timing, work = figure.subplots(1, 2)
    timing.plot(lengths, seconds_without_cache, marker="o", color="#e34a33", label="recompute the prefix")
    timing.plot(lengths, seconds_with_cache, marker="o", color="#2b8cbe", label="KV cache")
    timing.set(xlabel="new tokens generated", ylabel="wall time (s)", title="Measured on SmolLM2 (CPU)")
    work.plot(lengths, tokens_without_cache, marker="o", color="#e34a33", label="recompute: grows like T²")
    work.plot(lengths, tokens_with_cache, marker="o", color="#2b8cbe", label="KV cache: grows like T")
    work.set(xlabel="new tokens generated", ylabel="tokens run through the model", title="Work, counted")
    for axes in (timing, work):
        axes.grid(alpha=0.3)
        axes.legend()
    return figure


def contiguous_pool(reservations: Sequence[Reservation], pool_slots: int, request_slots: int,
                    *, title: str | None = None) -> Figure:
    """The pool as one strip of slots, coloured by what each slot does (one reservation per box).

    A reservation may also be a ``(request_id, start, size, num_tokens, final_len)`` tuple."""
    reservations = [r if isinstance(r, Reservation) else Reservation(*r) for r in reservations]
    figure = Figure(figsize=(11, 2.8), layout="constrained")
    axes = figure.subplots()
    for r in reservations:
        pieces = (("used", r.num_tokens), ("reserved_unused", r.final_len - r.num_tokens),
                  ("internal", r.size - r.final_len))
        cursor = r.start
        for kind, length in pieces:
            axes.barh(0, length, left=cursor, color=WASTE_COLOURS[kind], height=0.8)
            cursor += length
        axes.barh(0, r.size, left=r.start, fill=False, edgecolor="black", height=0.8)
        axes.text(r.start + r.size / 2, 0, f"req {r.request_id}", ha="center", va="center", fontsize=8)
    # The free runs, found slot by slot here (free_holes is a Lab 0.1 answer, a stub in the kit until it unlocks).
    taken = [False] * pool_slots
    for r in reservations:
        if r.start < 0 or r.start + r.size > pool_slots or any(taken[r.start:r.start + r.size]):
            raise ValueError(f"reservation of request {r.request_id} overlaps another or leaves the pool of {pool_slots}")
        taken[r.start:r.start + r.size] = [True] * r.size
    run_start = None
    for slot in range(pool_slots + 1):
        if slot < pool_slots and not taken[slot]:
            run_start = slot if run_start is None else run_start
            continue
        if run_start is not None:
            length, kind = slot - run_start, "external" if slot - run_start < request_slots else "free"
            axes.barh(0, length, left=run_start, color=WASTE_COLOURS[kind], height=0.8,
                      hatch="//" if kind == "external" else None)
            run_start = None
    used = sum(r.num_tokens for r in reservations)
    axes.set(xlim=(0, pool_slots), yticks=[], xlabel="slot (one token's K and V in every layer)",
             title=title or f"Contiguous pool of {pool_slots} slots: {used} hold a token ({used / pool_slots:.0%})")
    figure.legend(handles=[Patch(facecolor=WASTE_COLOURS[k], edgecolor="#bdbdbd", label=WASTE_LABELS[k],
                                 hatch="//" if k == "external" else None) for k in WASTE_KINDS],
                  loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    return figure


def waste_over_time(trace: SimTrace, breakdown=None) -> Figure:
    """Stacked shares of the pool per step of a contiguous simulation, and the time-averaged totals.

    breakdown: counts one state (``waste_breakdown``'s signature); pass yours from the exercise.
    """
    breakdown = breakdown or waste_breakdown
    if trace.kind != "contiguous":
        raise ValueError(f"waste_over_time needs a contiguous trace, got a {trace.kind!r} one")
    steps = [snapshot.step for snapshot in trace.snapshots]
    shares = {kind: [] for kind in WASTE_KINDS}
    for snapshot in trace.snapshots:
        counts = dict(breakdown(list(snapshot.reservations), trace.pool_slots, snapshot.next_request_slots or 1))
        counts["free"] -= counts["external"]  # stack usable free and external separately
        for kind in WASTE_KINDS:
            shares[kind].append(counts[kind] / trace.pool_slots)
    figure = Figure(figsize=(11, 4), layout="constrained")
    axes = figure.subplots()
    axes.stackplot(steps, *[shares[kind] for kind in WASTE_KINDS], colors=[WASTE_COLOURS[k] for k in WASTE_KINDS],
                   labels=[WASTE_LABELS[k] for k in WASTE_KINDS])
    summary = summarize_waste(trace, breakdown)
    held = summary["used"] + summary["reserved_unused"] + summary["internal"]
    axes.set(xlabel="step (one decode iteration)", ylabel="share of the pool", ylim=(0, 1), xlim=(0, steps[-1]),
             title=f"Contiguous reservation: on average {summary['used'] / held:.0%} of the reserved slots hold a token")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return figure


def contiguous_explorer(trace: SimTrace, breakdown=None):
    """A slider over the steps of a contiguous simulation: the pool, slot by slot, at that step.

    breakdown: counts one state (``waste_breakdown``'s signature); pass yours from the exercise.
    """
    from course_lib.viz.widgets import FigureExplorer, int_slider

    if trace.kind != "contiguous":
        raise ValueError(f"contiguous_explorer needs a contiguous trace, got a {trace.kind!r} one")
    breakdown = breakdown or waste_breakdown

    def draw(step: int) -> Figure:
        snapshot = trace.snapshots[step]
        request_slots = snapshot.next_request_slots or 1
        counts = breakdown(list(snapshot.reservations), trace.pool_slots, request_slots)
        waiting = (f", the next request needs {snapshot.next_request_slots} in one piece"
                   if snapshot.next_request_slots else ", nobody waits")
        return contiguous_pool(snapshot.reservations, trace.pool_slots, request_slots, title=(
            f"step {snapshot.step}: {counts['used']} of {trace.pool_slots} slots hold a token, "
            f"{counts['external']} free but useless{waiting}"))

    busiest = max(range(len(trace.snapshots)), key=lambda index: len(trace.snapshots[index].reservations))
    return FigureExplorer(draw, {"step": int_slider("step", 0, len(trace.snapshots) - 1, busiest)},
                          name="contiguous pool explorer")
