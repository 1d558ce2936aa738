"""Figures and the widget of Lab 0.1 chapters 3 and 4: each returns a Figure with labelled axes, and the
paging explorer redraws on a step change and carries a static picture for viewers without widgets."""

from __future__ import annotations

import base64

import pytest
import torch
from matplotlib.figure import Figure

from course_lib.checks import kv_cache as kv_checks
from course_lib.kv_cache import kv_cache_bytes
from course_lib.sim.fragmentation import random_workload, simulate_contiguous, simulate_paged
from course_lib.viz import kv_cache as kv_viz
from course_lib.viz import paging as paging_viz

PNG_MAGIC = b"\x89PNG"


def _assert_labelled(figure: Figure, num_axes: int | None = None) -> None:
    assert isinstance(figure, Figure)
    axes = [a for a in figure.axes if a.get_visible() and a.axison]
    if num_axes is not None:
        assert len(axes) == num_axes
    for a in axes:
        assert a.get_title(), "every panel needs a title"
        assert a.get_xlabel() or not a.get_xticks().size, "every axis with ticks needs a label"
        assert a.get_ylabel() or not a.get_yticks().size


@pytest.fixture(scope="module")
def traces():
    workload = random_workload(30, seed=1, mean_prompt_len=20, mean_output_len=30, max_tokens_choices=(64, 128))
    return workload, simulate_contiguous(workload, pool_slots=1024), simulate_paged(workload, 64, 16)


def test_kv_cache_growth_uses_the_given_function():
    calls = []

    def size_fn(config, seq_len, batch_size, dtype):
        calls.append((seq_len, batch_size))
        return kv_cache_bytes(config, seq_len, batch_size, dtype)

    figure = kv_viz.kv_cache_growth(size_fn, {"Llama-3-8B": kv_checks.LLAMA3_8B}, max_seq_len=2048,
                                    batch_sizes=(1, 64), dtype=torch.float16)
    _assert_labelled(figure, 2)
    assert (2048, 64) in calls
    right_line = figure.axes[1].lines[0]
    assert right_line.get_ydata()[-1] == pytest.approx(16.0)  # 2,048 tokens x 64 = 16 GiB


def test_cache_vs_recompute_and_bad_lengths():
    _assert_labelled(kv_viz.cache_vs_recompute([2, 4], [0.1, 0.2], [0.2, 0.6], [3, 5], [4, 14]), 2)
    with pytest.raises(ValueError, match="one entry per length"):
        kv_viz.cache_vs_recompute([2, 4], [0.1], [0.2, 0.6], [3, 5], [4, 14])


def test_contiguous_pool_and_waste_over_time(traces):
    _assert_labelled(kv_viz.contiguous_pool(*kv_checks.example_pool()), 1)
    _, contiguous, paged = traces
    _assert_labelled(kv_viz.waste_over_time(contiguous), 1)
    with pytest.raises(ValueError, match="contiguous trace"):
        kv_viz.waste_over_time(paged)


def test_paging_plots(traces):
    workload, contiguous, paged = traces
    _assert_labelled(paging_viz.utilization_comparison(contiguous, paged), 2)
    _assert_labelled(paging_viz.paged_waste_vs_bound(paged), 1)
    _assert_labelled(paging_viz.block_size_tradeoff([r.final_len for r in workload]), 2)
    with pytest.raises(ValueError, match="contiguous trace first"):
        paging_viz.utilization_comparison(paged, contiguous)


def test_block_pool_draws_every_block(traces):
    _, _, paged = traces
    busiest = max(paged.snapshots, key=lambda s: len(s.block_tables))
    figure = paging_viz.block_pool(busiest, 64, 16)
    pool_axes = figure.axes[0]
    assert pool_axes.get_title().startswith(f"Step {busiest.step}:")
    texts = [t.get_text() for t in pool_axes.texts]
    assert len(texts) == 64
    held = {block for table in busiest.block_tables.values() for block in table}
    for block in held:
        assert "\nr" in texts[block]  # a held block is labelled with its owner


def test_explorer_redraws_and_falls_back_to_a_picture(traces):
    _, _, paged = traces
    explorer = paging_viz.PagingExplorer(paged, num_blocks=64, step=3)
    first = bytes(explorer.image.value)
    assert first.startswith(PNG_MAGIC)
    explorer.slider.value = paged.num_steps // 2
    assert bytes(explorer.image.value) != first
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]) == bytes(explorer.image.value)
    with pytest.raises(ValueError, match="pool_slots"):
        paging_viz.PagingExplorer(paged, num_blocks=10)
