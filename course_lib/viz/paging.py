"""Plots and a widget for Lab 0.1, chapter 4 (paging the KV cache).

Figures are built on ``matplotlib.figure.Figure`` (no pyplot state). ``PagingExplorer`` is an
ipywidgets view that steps through a paged simulation; it draws each step as a PNG, so the same
picture appears where widgets do not run (a rendered book, a static notebook viewer).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import ipywidgets as widgets
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course_lib.sim.fragmentation import PagedSnapshot, SimTrace, paged_waste_bound

__all__ = [
    "PagingExplorer",
    "block_pool",
    "block_size_tradeoff",
    "paged_waste_vs_bound",
    "utilization_comparison",
]

_OWNER_COLOURS = colormaps["tab20"]
_FREE_COLOUR = "#f0f0f0"


def utilization_comparison(contiguous: SimTrace, paged: SimTrace) -> Figure:
    """Share of held memory that holds tokens (left) and requests running (right), per step, for both."""
    if contiguous.kind != "contiguous" or paged.kind != "paged":
        raise ValueError("pass a contiguous trace first and a paged trace second")
    figure = Figure(figsize=(11, 4), layout="constrained")
    utilization, running = figure.subplots(1, 2)
    for trace, colour, name in ((contiguous, "#e34a33", "contiguous"), (paged, "#2b8cbe", f"paged ({paged.slots_per_unit}-token blocks)")):
        steps = [s.step for s in trace.stats]
        utilization.plot(steps, [s.utilization for s in trace.stats], color=colour, lw=1,
                         label=f"{name}: {trace.mean_utilization:.0%} on average")
        running.plot(steps, [s.num_running for s in trace.stats], color=colour, lw=1,
                     label=f"{name}: all done at step {trace.num_steps}")
    utilization.set(xlabel="step (one decode iteration)", ylabel="used slots / held slots", ylim=(0, 1.05),
                    title="How much of the held KV memory holds tokens")
    running.set(xlabel="step (one decode iteration)", ylabel="requests running",
                title=f"Same pool ({paged.pool_slots:,} slots), same workload")
    for axes in (utilization, running):
        axes.grid(alpha=0.3)
        axes.legend(loc="lower right" if axes is utilization else "upper right", fontsize=8)
    return figure


def paged_waste_vs_bound(paged: SimTrace) -> Figure:
    """Held-but-unused slots of a paged run per step, against the bound (block_size - 1) x running requests."""
    if paged.kind != "paged":
        raise ValueError(f"paged_waste_vs_bound needs a paged trace, got a {paged.kind!r} one")
    steps = [s.step for s in paged.stats]
    figure = Figure(figsize=(11, 3.5), layout="constrained")
    axes = figure.subplots()
    axes.plot(steps, [paged_waste_bound(snapshot, paged.slots_per_unit) for snapshot in paged.snapshots],
              color="#636363", lw=1, label=f"bound: ({paged.slots_per_unit} - 1) x running requests")
    axes.plot(steps, [s.held_slots - s.used_slots for s in paged.stats], color="#2b8cbe", lw=1,
              label="held but unused (the empty tails of last blocks)")
    axes.set(xlabel="step (one decode iteration)", ylabel="slots",
             title="Paging wastes at most one partial block per request")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def block_size_tradeoff(final_lens: Sequence[int], block_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128)) -> Figure:
    """For sequences of the given lengths: wasted share of the held slots and block-table entries, per block size."""
    lengths = [int(n) for n in final_lens]
    if not lengths or min(lengths) < 1:
        raise ValueError("final_lens must hold at least one length, all >= 1")
    waste, entries = [], []
    for block_size in block_sizes:
        blocks = [-(-n // block_size) for n in lengths]
        held = sum(blocks) * block_size
        waste.append((held - sum(lengths)) / held)
        entries.append(sum(blocks) / len(lengths))
    figure = Figure(figsize=(11, 3.8), layout="constrained")
    left, right = figure.subplots(1, 2)
    left.plot(block_sizes, waste, marker="o", color="#fdae6b")
    left.set(xscale="log", xlabel="block size (tokens)", ylabel="held slots with no token",
             title="Bigger blocks waste more of the last block")
    left.set_xticks(list(block_sizes), [str(b) for b in block_sizes])
    right.plot(block_sizes, entries, marker="o", color="#2b8cbe")
    right.set(xscale="log", yscale="log", xlabel="block size (tokens)", ylabel="block-table entries per request",
              title="Smaller blocks need longer tables (more lookups per step)")
    right.set_xticks(list(block_sizes), [str(b) for b in block_sizes])
    for axes in (left, right):
        axes.grid(alpha=0.3)
    return figure


def _owners(snapshot: PagedSnapshot) -> dict[int, list[int]]:
    owners: dict[int, list[int]] = {}
    for request_id, table in snapshot.block_tables.items():
        for block in table:
            owners.setdefault(block, []).append(request_id)
    return owners


def _tokens_in_block(snapshot: PagedSnapshot, request_id: int, index: int, block_size: int) -> int:
    return max(0, min(block_size, snapshot.num_tokens[request_id] - index * block_size))


def block_pool(snapshot: PagedSnapshot, num_blocks: int, block_size: int, *, columns: int = 16,
               title: str | None = None) -> Figure:
    """The physical pool (one square per block, coloured by owner, filled as far as it holds tokens)
    and every running request's block table."""
    owners = _owners(snapshot)
    fill: dict[int, int] = {}
    for request_id, table in snapshot.block_tables.items():
        for index, block in enumerate(table):
            fill[block] = max(fill.get(block, 0), _tokens_in_block(snapshot, request_id, index, block_size))
    rows = -(-num_blocks // columns)
    table_lines = max(1, len(snapshot.block_tables))
    figure = Figure(figsize=(11, 1.0 + 0.55 * rows + 0.22 * table_lines), layout="constrained")
    pool_axes, table_axes = figure.subplots(2, 1, height_ratios=[0.55 * rows + 0.4, 0.22 * table_lines + 0.3])
    for block in range(num_blocks):
        x, y = block % columns, rows - 1 - block // columns
        holders = owners.get(block, [])
        pool_axes.add_patch(Rectangle((x, y), 0.92, 0.85, facecolor=_FREE_COLOUR, edgecolor="#bdbdbd"))
        if holders:
            colour = _OWNER_COLOURS(holders[0] % 20)
            used = fill[block] / block_size
            pool_axes.add_patch(Rectangle((x, y), 0.92, 0.85, facecolor=colour, alpha=0.3, edgecolor=colour))
            pool_axes.add_patch(Rectangle((x, y), 0.92 * used, 0.85, facecolor=colour, edgecolor="none",
                                          hatch="xx" if len(holders) > 1 else None))
        label = f"{block}" + (f"\nr{holders[0]}" if holders else "")
        pool_axes.text(x + 0.46, y + 0.42, label, ha="center", va="center", fontsize=6.5)
    pool_axes.set(xlim=(0, columns), ylim=(0, rows), xticks=[], yticks=[])
    used_blocks = len(owners)
    events = [f"{name}: {', '.join(f'r{r}' for r in ids)}" for name, ids in
              (("admitted", snapshot.admitted), ("finished", snapshot.finished), ("preempted", snapshot.preempted)) if ids]
    pool_axes.set_title(title or (f"Step {snapshot.step}: {used_blocks} of {num_blocks} blocks held "
                                  f"(block size {block_size}; dark = slots holding tokens)"
                                  + (f"\n{'; '.join(events)}" if events else "")), fontsize=10)
    table_axes.axis("off")
    if not snapshot.block_tables:
        table_axes.text(0, 0.5, "no request is running", fontsize=9, va="center")
    for line, (request_id, table) in enumerate(sorted(snapshot.block_tables.items())):
        y = 1 - (line + 0.5) / table_lines
        table_axes.add_patch(Rectangle((0, y - 0.3 / table_lines), 0.012, 0.6 / table_lines,
                                       facecolor=_OWNER_COLOURS(request_id % 20), transform=table_axes.transAxes))
        table_axes.text(0.02, y, f"r{request_id} ({snapshot.num_tokens[request_id]} tokens): block table {table}",
                        fontsize=8, va="center", family="monospace", transform=table_axes.transAxes)
    return figure


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    return buffer.getvalue()


class PagingExplorer(widgets.VBox):
    """Step through a paged simulation: a slider (and play button) over steps, the pool and block tables.

    trace: a paged ``SimTrace`` (``simulate_paged``). num_blocks: blocks in its pool. Each step is
    drawn as a PNG; in a static view (no widget support) the current step shows as that image.
    """

    def __init__(self, trace: SimTrace, num_blocks: int, *, step: int = 0) -> None:
        if trace.kind != "paged":
            raise ValueError(f"PagingExplorer needs a paged trace, got a {trace.kind!r} one")
        if num_blocks * trace.slots_per_unit != trace.pool_slots:
            raise ValueError(f"num_blocks ({num_blocks}) x block size ({trace.slots_per_unit}) must equal the "
                             f"trace's pool_slots ({trace.pool_slots})")
        self.trace = trace
        self.num_blocks = num_blocks
        last = len(trace.snapshots) - 1
        self.slider = widgets.IntSlider(value=min(max(step, 0), last), min=0, max=last, description="step",
                                        continuous_update=False, layout=widgets.Layout(width="70%"))
        self.play = widgets.Play(value=self.slider.value, min=0, max=last, interval=400, description="play")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.image = widgets.Image(format="png")
        self.slider.observe(self._on_step, names="value")
        super().__init__([widgets.HBox([self.play, self.slider]), self.image])
        self._draw()

    def figure(self, step: int | None = None) -> Figure:
        """The figure of one step (default: the slider's)."""
        index = self.slider.value if step is None else step
        return block_pool(self.trace.snapshots[index], self.num_blocks, self.trace.slots_per_unit)

    def _draw(self) -> None:
        self.image.value = _png(self.figure())

    def _on_step(self, change) -> None:
        self._draw()

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        # Viewers that cannot run widgets fall back on the picture of the current step.
        bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        bundle["text/plain"] = f"PagingExplorer(step {self.slider.value} of {self.slider.max})"
        return bundle
