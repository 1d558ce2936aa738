"""course_lib.roofline (FLOPs, bytes, intensity, the roofline, measured peaks) and its plots.

FLOP counts are checked by hand on small numbers and against torch's own FlopCounterMode (an
implementation outside the course) on the tiny model and on naive attention's matrix products.
"""

from __future__ import annotations

import math

import pytest
import torch
from matplotlib.figure import Figure
from torch.utils.flop_counter import FlopCounterMode

from course_lib import roofline
from course_lib.attention import naive_attention
from course_lib.model import LlamaModel, random_weights
from course_lib.viz import roofline_plots
from tests.tiny_models import tiny_config


def test_linear_cost_worked_example():
    cost = roofline.linear_cost(512, 576, 1536, 2)  # the notebook's worked example
    assert cost.flops == 905_969_664
    assert cost.bytes == 3_932_160
    assert cost.intensity == pytest.approx(230.4, rel=1e-3)


def test_decode_linear_layer_is_about_half_a_flop_per_byte_in_fp32():
    assert roofline.linear_cost(1, 4096, 4096, 4).intensity == pytest.approx(0.5, rel=1e-3)
    intensities = [roofline.linear_cost(batch, 4096, 4096, 2).intensity for batch in (1, 8, 64, 256)]
    assert intensities == sorted(intensities)
    assert intensities[-1] == pytest.approx(256 * 4096 * 4096 * 2 / ((4096 * 4096 + 2 * 256 * 4096) * 2))


def test_attention_cost_by_hand():
    cost = roofline.attention_cost(2, 3, 4, 2, 5, 2)
    assert cost.flops == 4 * 2 * 3 * 4 * 5
    assert cost.bytes == (2 * 2 * 4 + 2 * 3 * 2) * 5 * 2
    naive = roofline.attention_cost(2, 3, 4, 2, 5, 2, materialize_scores=True)
    assert naive.flops == cost.flops
    assert naive.bytes - cost.bytes == 4 * 4 * 2 * 3 * 2


def test_attention_flops_match_torch_flop_counter_on_naive_attention():
    q = torch.randn(16, 4, 8)
    k = torch.randn(16, 2, 8)
    with FlopCounterMode(display=False) as counter:
        naive_attention(q, k, k.clone())
    assert counter.get_total_flops() == roofline.attention_cost(16, 16, 4, 2, 8, 4).flops


def test_forward_cost_linear_flops_match_torch_flop_counter():
    config = tiny_config()
    model = LlamaModel(config, random_weights(config)).eval()
    prompt_len = 10
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(torch.arange(prompt_len), logits_indices=torch.tensor([-1]))
    attention = roofline.attention_cost(prompt_len, prompt_len, config.num_q_heads, config.num_kv_heads,
                                        config.head_dim, 4)
    expected = roofline.forward_cost(config, 1, prompt_len, prompt_len, 4).flops
    # torch's fused CPU attention kernel has no FLOP formula, so the counter sees the linear layers only.
    assert counter.get_total_flops() == expected - config.num_layers * attention.flops


def test_forward_cost_batching_shares_weights_not_caches():
    config = tiny_config()
    one = roofline.forward_cost(config, 1, 1, 32, 2)
    many = roofline.forward_cost(config, 8, 1, 32, 2)
    assert many.flops == pytest.approx(8 * one.flops)
    assert many.bytes < 8 * one.bytes
    assert many.intensity > one.intensity
    prefill = roofline.forward_cost(config, 1, 32, 32, 2)
    assert prefill.intensity > one.intensity


def test_forward_cost_rejects_more_new_tokens_than_context():
    with pytest.raises(ValueError, match="q_len"):
        roofline.forward_cost(tiny_config(), 1, 5, 4, 2)


@pytest.mark.parametrize("arguments", [(0, 4, 4, 2), (1, 4, 4, 0), (1.5, 4, 4, 2)])
def test_linear_cost_rejects_bad_input(arguments):
    with pytest.raises((ValueError, TypeError)):
        roofline.linear_cost(*arguments)


def test_attention_cost_rejects_heads_that_do_not_group():
    with pytest.raises(ValueError, match="multiple"):
        roofline.attention_cost(1, 4, 9, 2, 8, 2)


def test_roofline_is_min_of_the_two_roofs():
    machine = roofline.Machine("toy", peak_flops=100.0, memory_bandwidth=10.0)
    assert machine.ridge_point == 10.0
    assert roofline.attainable_flops(2.0, machine) == 20.0
    assert roofline.attainable_flops(10.0, machine) == 100.0
    assert roofline.attainable_flops(1000.0, machine) == 100.0


def test_datasheet_machines():
    assert roofline.H100_SXM.ridge_point == pytest.approx(989 / 3.35)
    assert 100 <= roofline.A100_SXM.ridge_point <= 160
    with pytest.raises(ValueError, match="peak_flops"):
        roofline.Machine("broken", peak_flops=0, memory_bandwidth=1.0)


def test_measurements_return_positive_rates():
    bandwidth = roofline.measure_memory_bandwidth(4 * 2**20, repeats=1)
    flops = roofline.measure_matmul_flops(64, repeats=1)
    assert math.isfinite(bandwidth) and bandwidth > 0
    assert math.isfinite(flops) and flops > 0
    with pytest.raises(ValueError, match="num_bytes"):
        roofline.measure_memory_bandwidth(10)


def _assert_labelled(fig):
    assert isinstance(fig, Figure)
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


def test_roofline_figure():
    cpu = roofline.Machine("cpu", peak_flops=5e10, memory_bandwidth=1e10)
    fig = roofline_plots.roofline_figure([cpu, roofline.H100_SXM], {"decode": 0.5, "prefill": 300.0},
                                         measured={"linear, batch 1": (0.5, 4e9)})
    _assert_labelled(fig)
    assert len(fig.axes) == 2
    assert "TFLOP/s" in fig.axes[1].get_ylabel() and "GFLOP/s" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match="points"):
        roofline_plots.roofline_figure([cpu], {})
    with pytest.raises(TypeError, match="machines"):
        roofline_plots.roofline_figure([], {"decode": 1.0})


def test_intensity_and_attention_figures():
    _assert_labelled(roofline_plots.intensity_figure([16, 32], {"linear": [10.0, 20.0]}, [roofline.A100_SXM]))
    _assert_labelled(roofline_plots.attention_versions_figure([128, 256], {"naive": [0.01, 0.04]},
                                                              {"naive": [1e6, 4e6]}))
    with pytest.raises(ValueError, match="curves"):
        roofline_plots.intensity_figure([16, 32], {"linear": [10.0]}, [roofline.A100_SXM])
