"""Plots for Lab 0.1, chapter 2: what training and inference keep in memory, and which GPU holds it.

Both functions take byte counts computed elsewhere (``course_lib.memory`` or the student's own
calculator) and return a ``matplotlib.figure.Figure``. Sizes are drawn in GB = 10**9 bytes, the
unit GPU boxes are labelled in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course_lib.memory import GB, GPU_MEMORY_GB
from course_lib.viz import BLUE, GREEN, GREY, LIGHT_GREY, ORANGE, PURPLE, SKY, VERMILLION, YELLOW, _new_figure

__all__ = ["gpu_fit_grid", "memory_breakdown_bars", "memory_explorer"]

# One colour per component, the same in every chart of the chapter.
COMPONENT_COLOURS = {
    "weights": BLUE,
    "gradients": ORANGE,
    "optimizer": VERMILLION,
    "activations": PURPLE,
    "kv_cache": GREEN,
}
_SPARE_COLOURS = (SKY, YELLOW, GREY)


def memory_breakdown_bars(
    breakdowns: Mapping[str, Mapping[str, float]],
    *,
    title: str = "What the GPU must hold",
    gpu_lines: Mapping[str, float] | None = None,
) -> Figure:
    """Stacked bars, one per scenario, of bytes by component (drawn in GB).

    breakdowns: {bar label: {component: bytes}}, e.g. {"13B training": {"weights": ..., ...}}.
    gpu_lines: {GPU name: memory in GB} drawn as dashed horizontal lines (default: none).
    """
    if not breakdowns:
        raise ValueError("breakdowns must hold at least one bar")
    fig, ax = _new_figure(width=8.5, height=4.2)
    colours = dict(COMPONENT_COLOURS)
    labelled: set[str] = set()
    tops = []
    for x, (label, parts) in enumerate(breakdowns.items()):
        bottom = 0.0
        for component, size in parts.items():
            if size < 0:
                raise ValueError(f"breakdowns[{label!r}][{component!r}] must be >= 0 bytes, got {size}")
            if component not in colours:
                colours[component] = _SPARE_COLOURS[(len(colours) - len(COMPONENT_COLOURS)) % len(_SPARE_COLOURS)]
            height = size / GB
            if height == 0:
                continue
            ax.bar(x, height, bottom=bottom, color=colours[component], edgecolor="white", width=0.65,
                   label=None if component in labelled else component.replace("_", " "))
            labelled.add(component)
            bottom += height
        tops.append(bottom)
        ax.text(x, bottom, f"{bottom:,.1f} GB", ha="center", va="bottom", fontsize=8)
    for name, capacity in (gpu_lines or {}).items():
        ax.axhline(capacity, color=GREY, linestyle="--", linewidth=0.8)
        ax.text(len(breakdowns) - 0.5, capacity, f" {name} ({capacity:g} GB)", fontsize=7, va="bottom",
                ha="right", color="black")
    ax.set_xticks(range(len(breakdowns)), list(breakdowns), fontsize=8)
    ax.set_xlabel("scenario")
    ax.set_ylabel("memory (GB = 10^9 bytes)")
    ax.set_ylim(0, max(tops + list((gpu_lines or {}).values())) * 1.15)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper right")
    return fig


def gpu_fit_grid(totals: Mapping[str, float], gpus: Mapping[str, float] | None = None) -> Figure:
    """A grid of scenarios x GPUs: green where the scenario's bytes fit in the GPU's memory, red where not.

    totals: {scenario label: total bytes}; gpus: {GPU name: memory in GB}, default ``GPU_MEMORY_GB``.
    Each cell shows the share of the GPU's memory the scenario needs (over 100%: does not fit).
    """
    gpus = dict(GPU_MEMORY_GB if gpus is None else gpus)
    if not totals or not gpus:
        raise ValueError("totals and gpus must each hold at least one entry")
    fig, ax = _new_figure(width=1.3 * len(gpus) + 3.5, height=0.45 * len(totals) + 1.6)
    ax.grid(False)
    for row, (label, size) in enumerate(totals.items()):
        for column, (gpu, capacity) in enumerate(gpus.items()):
            share = size / (capacity * GB)
            colour = GREEN if share <= 1 else (VERMILLION if share > 2 else ORANGE)
            ax.add_patch(_cell(column, row, colour))
            ax.text(column + 0.5, row + 0.5, f"{share:.0%}" if share < 10 else f"{share:.0f}x", ha="center",
                    va="center", fontsize=8, color="white" if share <= 1 or share > 2 else "black")
    ax.set_xlim(0, len(gpus))
    ax.set_ylim(len(totals), 0)
    ax.set_xticks([column + 0.5 for column in range(len(gpus))],
                  [f"{gpu}\n{capacity:g} GB" for gpu, capacity in gpus.items()], fontsize=8)
    ax.set_yticks([row + 0.5 for row in range(len(totals))],
                  [f"{label} ({size / GB:,.1f} GB)" for label, size in totals.items()], fontsize=8)
    ax.set_xlabel("GPU (memory on the label, GB = 10^9 bytes)")
    ax.set_ylabel("scenario (memory needed)")
    ax.set_title("Share of each GPU's memory needed (green: fits; orange: up to 2x too big; red: more)", fontsize=10)
    return fig


def _cell(column: int, row: int, colour: str):
    return Rectangle((column, row), 1, 1, facecolor=colour, edgecolor=LIGHT_GREY, linewidth=1.5)


def memory_explorer(inference_memory: Callable[..., Mapping[str, float]],
                    models: Mapping[str, tuple[object, int]],
                    gpu_lines: Mapping[str, float] | None = None):
    """Sliders for batch size and context length, dropdowns for the precisions: serving memory per model.

    inference_memory: yours (``inference_memory(num_parameters, precision, config, batch_size, seq_len,
    kv_precision)``). models: {name: (config, num_parameters)}.
    """
    from course_lib.viz.widgets import FigureExplorer, choice, int_slider

    lines = dict(gpu_lines or {"L4": 24, "A100/H100": 80, "H200": 141})

    def draw(batch_size: int, seq_len: int, precision: str, kv_precision: str) -> Figure:
        bars = {name: dict(inference_memory(num_parameters, precision, config, batch_size, seq_len, kv_precision))
                for name, (config, num_parameters) in models.items()}
        return memory_breakdown_bars(bars, gpu_lines=lines, title=(
            f"Serving {batch_size} requests of {seq_len:,} tokens: weights in {precision}, KV cache in {kv_precision}"))

    return FigureExplorer(draw, {
        "batch_size": int_slider("requests at once", 1, 256, 8),
        "seq_len": choice("tokens per request", [512, 1024, 2048, 4096, 8192, 16384, 32768], 2048),
        "precision": choice("weights", ["fp16", "int8", "int4"], "fp16"),
        "kv_precision": choice("KV cache", ["fp16", "int8"], "fp16"),
    }, name="serving memory explorer")
