"""Plots for Lab 0.2 (prefill vs decode): rooflines, intensity curves, attention timings.

Every function returns a matplotlib ``Figure`` with labelled axes and units (show it with
``display(fig)`` in a notebook, or let it be the cell's last expression).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from course_lib.roofline import Machine
from course_lib.viz import BLUE, GREEN, GREY, ORANGE, PALETTE, PURPLE, SKY, VERMILLION, _new_figure

__all__ = ["attention_versions_figure", "intensity_figure", "roofline_explorer", "roofline_figure", "tile_figure", "tile_stepper"]


def _flops_unit(peak_flops: float) -> tuple[float, str]:
    """A unit that keeps the numbers on a roofline readable: (divisor, name)."""
    return (1e12, "TFLOP/s") if peak_flops >= 1e12 else (1e9, "GFLOP/s")


def _check_machines(machines: Sequence[Machine]) -> None:
    if not machines or not all(isinstance(machine, Machine) for machine in machines):
        raise TypeError("machines must be a non-empty sequence of course_lib.roofline.Machine")


def roofline_figure(
    machines: Sequence[Machine],
    points: Mapping[str, float],
    measured: Mapping[str, tuple[float, float]] | None = None,
) -> Figure:
    """One log-log roofline panel per machine, with the same workloads placed on each.

    machines: the machines to draw (e.g. this CPU, measured, and an H100 from its datasheet).
    points: {label: arithmetic intensity in FLOP/byte}; each is drawn on every machine's roof at
        its attainable FLOP/s = min(peak, intensity * bandwidth).
    measured: optional {label: (intensity, achieved FLOP/s)} measured on ``machines[0]``: drawn
        as crosses on the first panel, to compare with the roof above them.
    """
    _check_machines(machines)
    if not points:
        raise ValueError("points must hold at least one {label: intensity} entry")
    for label, intensity in points.items():
        if not intensity > 0:
            raise ValueError(f"points[{label!r}] must be an intensity > 0, got {intensity!r}")
    fig, axes = _new_figure(1, len(machines), width=6.2 * len(machines), height=4.6)
    axes = np.atleast_1d(axes)
    intensities = [*points.values(), *(value[0] for value in (measured or {}).values())]
    low = min(min(intensities), min(machine.ridge_point for machine in machines)) / 4
    high = max(max(intensities), max(machine.ridge_point for machine in machines)) * 4
    x = np.logspace(np.log10(low), np.log10(high), 200)
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(points))]
    for panel, (ax, machine) in enumerate(zip(axes, machines)):
        scale, unit = _flops_unit(machine.peak_flops)
        roof = np.minimum(machine.peak_flops, x * machine.memory_bandwidth) / scale
        ax.loglog(x, roof, color="black", linewidth=1.6, label="roofline")
        ridge = machine.ridge_point
        ax.axvline(ridge, color=GREY, linestyle="--", linewidth=0.9)
        floor = low * machine.memory_bandwidth / scale / 2
        ax.text(ridge * 1.15, machine.peak_flops / scale / 5, f"ridge point\n{ridge:.3g} FLOP/B", fontsize=8,
                color=GREY)
        ax.text(x[0] * 1.2, machine.peak_flops / scale * 1.25, "memory-bound", fontsize=9, color=BLUE)
        ax.text(ridge * 1.6, machine.peak_flops / scale * 1.25, "compute-bound", fontsize=9, color=VERMILLION)
        for (label, intensity), colour in zip(points.items(), colours):
            attainable = min(machine.peak_flops, intensity * machine.memory_bandwidth) / scale
            ax.plot([intensity], [attainable], "o", color=colour, markersize=7,
                    label=f"{label} ({intensity:.3g} FLOP/B)")
        if panel == 0 and measured:
            for label, (intensity, achieved) in measured.items():
                ax.plot([intensity], [achieved / scale], "x", color="black", markersize=8, markeredgewidth=1.5)
                ax.annotate(label, (intensity, achieved / scale), xytext=(4, -12), textcoords="offset points",
                            fontsize=7)
        ax.set_ylim(floor, machine.peak_flops / scale * 3)
        ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
        ax.set_ylabel(f"attainable throughput ({unit})")
        bandwidth = (f"{machine.memory_bandwidth / 1e12:.3g} TB/s" if machine.memory_bandwidth >= 1e12
                     else f"{machine.memory_bandwidth / 1e9:.3g} GB/s")
        ax.set_title(f"{machine.name}\n{machine.peak_flops / scale:.3g} {unit} peak, {bandwidth} memory",
                     fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
    return fig


def intensity_figure(
    sizes: Sequence[float],
    curves: Mapping[str, Sequence[float]],
    machines: Sequence[Machine],
    *,
    xlabel: str = "tokens in the pass",
) -> Figure:
    """Arithmetic intensity against a size (prompt length, batch size), with each machine's ridge point.

    sizes [n]: the x values; curves: {label: n intensities in FLOP/byte}; machines: their ridge
    points are drawn as horizontal lines (above a line the work is compute-bound on that machine).
    """
    _check_machines(machines)
    sizes = np.asarray(sizes, dtype=float)
    if sizes.ndim != 1 or len(sizes) == 0 or (sizes <= 0).any():
        raise ValueError("sizes must be a non-empty 1-D sequence of positive numbers")
    fig, ax = _new_figure(width=7.5, height=4.2)
    for (label, values), colour in zip(curves.items(), (BLUE, ORANGE, GREEN, PURPLE, SKY)):
        values = np.asarray(values, dtype=float)
        if values.shape != sizes.shape:
            raise ValueError(f"curves[{label!r}] has {values.shape[0]} values for {len(sizes)} sizes")
        ax.loglog(sizes, values, marker="o", color=colour, label=label)
    for machine, colour in zip(machines, (VERMILLION, GREY, PURPLE)):
        ax.axhline(machine.ridge_point, color=colour, linestyle="--", linewidth=1,
                   label=f"ridge of {machine.name}: {machine.ridge_point:.3g} FLOP/B")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("arithmetic intensity (FLOP per byte)")
    ax.set_title("Arithmetic intensity: above a ridge line the work is compute-bound there")
    ax.legend(fontsize=8)
    return fig


def attention_versions_figure(
    seq_lens: Sequence[int],
    seconds: Mapping[str, Sequence[float]],
    bytes_moved: Mapping[str, Sequence[float]],
) -> Figure:
    """Two panels against sequence length: measured time and modelled bytes moved, per attention version.

    seq_lens [n]; seconds: {version: n times in seconds}; bytes_moved: {version: n byte counts}.
    """
    seq_lens = np.asarray(seq_lens, dtype=float)
    if seq_lens.ndim != 1 or len(seq_lens) == 0:
        raise ValueError("seq_lens must be a non-empty 1-D sequence")
    fig, (ax_time, ax_bytes) = _new_figure(1, 2, width=11, height=4)
    colours = (VERMILLION, BLUE, GREEN, ORANGE)
    for (label, values), colour in zip(seconds.items(), colours):
        if len(values) != len(seq_lens):
            raise ValueError(f"seconds[{label!r}] has {len(values)} values for {len(seq_lens)} lengths")
        ax_time.loglog(seq_lens, np.asarray(values) * 1e3, marker="o", color=colour, label=label)
    for (label, values), colour in zip(bytes_moved.items(), colours):
        if len(values) != len(seq_lens):
            raise ValueError(f"bytes_moved[{label!r}] has {len(values)} values for {len(seq_lens)} lengths")
        ax_bytes.loglog(seq_lens, np.asarray(values) / 2**20, marker="o", color=colour, label=label)
    for ax in (ax_time, ax_bytes):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length S (tokens, q_len = kv_len = S)")
        ax.legend(fontsize=8)
    ax_time.set_ylabel("time per call (ms, best of a few)")
    ax_time.set_title("Measured on this machine")
    ax_bytes.set_ylabel("memory traffic (MiB)")
    ax_bytes.set_title("Bytes moved to and from memory (model)")
    return fig


def _tile_visits(q_len: int, kv_len: int, block_q: int, block_k: int, causal: bool) -> list[tuple[int, int]]:
    """(query block, key block) in the order the tiled loop visits them, skipping tiles above the diagonal."""
    visits = []
    offset = kv_len - q_len
    for q_block, q_start in enumerate(range(0, q_len, block_q)):
        last_key = offset + min(q_start + block_q, q_len) - 1 if causal else kv_len - 1
        for k_block, _ in enumerate(range(0, last_key + 1, block_k)):
            visits.append((q_block, k_block))
    return visits


def tile_figure(q_len: int, kv_len: int, block_q: int, block_k: int, visit: int, *, causal: bool = True) -> Figure:
    """The score matrix as tiles: those computed so far (light), the current one (orange), skipped ones (white)."""
    from matplotlib.patches import Rectangle

    visits = _tile_visits(q_len, kv_len, block_q, block_k, causal)
    visit = max(0, min(visit, len(visits) - 1))
    fig, axes = _new_figure(width=5.2, height=5.0)
    for index, (q_block, k_block) in enumerate(visits[: visit + 1]):
        colour = ORANGE if index == visit else SKY
        axes.add_patch(Rectangle((k_block * block_k, q_block * block_q), min(block_k, kv_len - k_block * block_k),
                                 min(block_q, q_len - q_block * block_q), facecolor=colour, edgecolor="white"))
    if causal:
        offset = kv_len - q_len
        axes.plot([offset + 0.5, kv_len], [0.5, q_len], color=GREY, linewidth=1, label="causal diagonal")
    axes.set(xlim=(0, kv_len), ylim=(q_len, 0), xlabel="key position", ylabel="query position")
    q_block, k_block = visits[visit]
    axes.set_title(f"tile {visit + 1} of {len(visits)}: queries block {q_block}, keys block {k_block}\n"
                   f"scores held now: {block_q} x {block_k}, never all {q_len} x {kv_len}", fontsize=10)
    return fig


def tile_stepper(q_len: int = 256, kv_len: int = 256, block_q: int = 64, block_k: int = 64, *, causal: bool = True):
    """A slider over the tiles a FlashAttention-style loop computes, in the order it computes them."""
    from course_lib.viz.widgets import FigureExplorer, int_slider

    num_visits = len(_tile_visits(q_len, kv_len, block_q, block_k, causal))
    return FigureExplorer(lambda visit: tile_figure(q_len, kv_len, block_q, block_k, visit, causal=causal),
                          {"visit": int_slider("tile", 0, num_visits - 1, min(4, num_visits - 1))},
                          name="tile stepper")


def roofline_explorer(machine: Machine, decode_step_cost, config, bytes_per_element: float = 2):
    """Sliders for batch size and context length: where one decode step sits on ``machine``'s roofline.

    decode_step_cost: yours (``decode_step_cost(config, batch_size, context_len, bytes_per_element)``
    -> (flops, bytes)).
    """
    from course_lib.viz.widgets import FigureExplorer, choice

    def draw(batch_size: int, context_len: int) -> Figure:
        points = {}
        for label, batch in ((f"decode, batch {batch_size}", batch_size), ("decode, batch 1", 1)):
            flops, moved = decode_step_cost(config, batch, context_len, bytes_per_element)
            points[label] = flops / moved
        fig = roofline_figure([machine], points)
        fig.suptitle(f"One decode step with {context_len:,} tokens of context per sequence", fontsize=10)
        return fig

    return FigureExplorer(draw, {
        "batch_size": choice("batch size", [1, 4, 16, 64, 256, 1024], 64),
        "context_len": choice("context (tokens)", [128, 1024, 4096, 16384], 1024),
    }, name="roofline explorer")
