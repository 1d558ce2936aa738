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

__all__ = ["attention_versions_figure", "intensity_figure", "roofline_figure"]


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
