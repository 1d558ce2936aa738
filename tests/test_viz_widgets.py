"""The chapters' explorers: each builds, redraws when a control moves, and carries the picture of its
current setting for viewers that cannot run widgets (a static notebook, the book)."""

from __future__ import annotations

import base64

import pytest
import torch
from matplotlib.figure import Figure

from course_lib import memory, roofline, sampling
from course_lib.scheduler import build_batch
from course_lib.sim import batching as sim
from course_lib.sim.fragmentation import random_workload, simulate_contiguous, waste_breakdown
from course_lib.tokenizer import merge_pair, train_bpe
from course_lib.viz import autoregression, batching, chunked_prefill, kv_cache, roofline_plots
from course_lib.viz import memory as memory_viz
from course_lib.viz import sampling as sampling_viz
from course_lib.viz import tokenization
from course_lib.viz.widgets import FigureExplorer, choice, int_slider

CAT = "the cat sat on the mat; the cat ate the rat"


def _decode_step_cost(config, batch_size, context_len, bytes_per_element):
    cost = roofline.forward_cost(config, batch_size, 1, context_len, bytes_per_element)
    return cost.flops, cost.bytes


def _run_steps(budget, chunked):
    batches, decodes, queue = [], [], [["A", 40]]
    decoding = ["u1", "u2"]
    for _ in range(4):
        batch = build_batch(decoding, [tuple(entry) for entry in queue], budget, chunked)
        batches.append(batch)
        decodes.append(list(decoding))
        for request_id, num_tokens in batch[len(decoding):]:
            queue[0][1] -= num_tokens
        queue = [entry for entry in queue if entry[1] > 0]
    return batches, decodes


def _explorers():
    model_config = roofline.Machine("a laptop", 1e11, 2e10)
    trace = simulate_contiguous(random_workload(30, seed=0), pool_slots=4096)
    workload = sim.poisson_workload(12, 15.0, seed=1)
    results = {"static": sim.simulate(workload, sim.static_policy, max_batch_size=4),
               "continuous": sim.simulate(workload, sim.continuous_policy, max_batch_size=4)}
    logits = torch.randn(1, 200, generator=torch.Generator().manual_seed(0)) * 3
    return {
        "merge stepper": (tokenization.merge_stepper(CAT, train_bpe(CAT, 266), merge_pair), "step", 6),
        "memory": (memory_viz.memory_explorer(memory.inference_memory, {"Llama-2-7B": (memory.LLAMA2_7B, 6_738_415_616)}),
                   "batch_size", 64),
        "contiguous pool": (kv_cache.contiguous_explorer(trace, waste_breakdown), "step", 1),
        "filters": (sampling_viz.filter_explorer(logits, str, sampling.apply_temperature, sampling.top_k_filter,
                                                 sampling.top_p_filter, sampling.min_p_filter), "top_k", 5),
        "generation time": (autoregression.generation_time_explorer([8, 128, 512], [0.02, 0.1, 0.4], [0.02, 0.021, 0.024]),
                            "new_tokens", 40),
        "tiles": (roofline_plots.tile_stepper(128, 128, 32, 32), "visit", 7),
        "roofline": (roofline_plots.roofline_explorer(model_config, _decode_step_cost, memory.LLAMA2_7B), "batch_size", 1),
        "timeline": (batching.timeline_stepper(results), "step", 2),
        "budget": (chunked_prefill.budget_explorer(_run_steps, budgets=(8, 16, 32)), "token_budget", 8),
    }


@pytest.fixture(scope="module")
def explorers():
    return _explorers()


@pytest.mark.parametrize("name", ["merge stepper", "memory", "contiguous pool", "filters", "generation time", "tiles",
                                  "roofline", "timeline", "budget"])
def test_explorer_redraws_and_falls_back_to_a_picture(explorers, name):
    explorer, control, new_value = explorers[name]
    assert isinstance(explorer, FigureExplorer)
    before = bytes(explorer.image.value)
    explorer.controls[control].value = new_value
    assert bytes(explorer.image.value) != before, f"{name}: moving {control} did not redraw"
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]) == bytes(explorer.image.value)
    assert f"{control}={new_value!r}" in bundle["text/plain"]
    assert isinstance(explorer.figure(), Figure)


def test_the_merge_stepper_runs_the_students_merge_pair():
    calls = []

    def counting_merge_pair(ids, pair, new_id):
        calls.append(pair)
        return merge_pair(ids, pair, new_id)

    merges = train_bpe(CAT, 260)
    tokenization.merge_stepper(CAT, merges, counting_merge_pair)
    assert set(calls) == set(merges)


def test_controls_reject_values_out_of_range():
    with pytest.raises(ValueError, match="must lie in"):
        int_slider("step", 0, 3, 5)
    with pytest.raises(ValueError, match="must be one of"):
        choice("policy", ["a", "b"], "c")
    with pytest.raises(ValueError, match="at least one control"):
        FigureExplorer(lambda: Figure(), {})
