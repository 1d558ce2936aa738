"""course_lib.memory against the real model: SmolLM2's file, our forward, transformers, and the KV cache.

The parameter count must equal what three outside sources hold: the tensors in the GGUF file,
the parameters of our ``LlamaModel`` (which fuses q/k/v and gate/up, so the names differ but the
numbers may not), and transformers' LlamaForCausalLM. The Llama-2 counts are the published ones.
"""

from __future__ import annotations

import math

import pytest
import torch
from matplotlib.figure import Figure

from course_lib import memory
from course_lib.checks.memory import small_config, smollm2_tensor_shapes
from course_lib.kv_cache import KVCache, kv_cache_bytes
from course_lib.model import ModelConfig
from course_lib.viz.memory import gpu_fit_grid, memory_breakdown_bars

SMOLLM2_PARAMETERS = 134_515_008


@pytest.fixture(scope="module")
def smollm2_config():
    return ModelConfig.from_gguf()


def test_tensor_shapes_match_the_gguf_file(smollm2_config):
    assert memory.tensor_shapes(smollm2_config, tied_embeddings=True) == smollm2_tensor_shapes()


def test_count_matches_the_gguf_file(smollm2_config):
    assert memory.count_parameters(smollm2_config, tied_embeddings=True) == SMOLLM2_PARAMETERS
    assert sum(math.prod(shape) for shape in smollm2_tensor_shapes().values()) == SMOLLM2_PARAMETERS


@pytest.mark.slow
def test_count_matches_our_model(smollm2):
    model, _ = smollm2
    assert sum(parameter.numel() for parameter in model.parameters()) == \
        memory.count_parameters(model.config, tied_embeddings=True)


@pytest.mark.slow
def test_count_and_shapes_match_transformers(hf_model, smollm2_config):
    assert hf_model.config.tie_word_embeddings
    # parameters() lists the shared embedding/lm_head tensor once, as a tied model stores it.
    assert sum(parameter.numel() for parameter in hf_model.parameters()) == \
        memory.count_parameters(smollm2_config, tied_embeddings=True)
    hf_shapes = {name: tuple(parameter.shape) for name, parameter in hf_model.named_parameters()}
    ours = memory.tensor_shapes(smollm2_config, tied_embeddings=True)
    assert hf_shapes["model.layers.0.self_attn.k_proj.weight"] == ours["layers.0.k_proj"]
    assert hf_shapes["model.layers.29.mlp.down_proj.weight"] == ours["layers.29.down_proj"]
    assert hf_shapes["model.embed_tokens.weight"] == ours["embed_tokens"]


def test_published_llama2_counts():
    assert memory.count_parameters(memory.LLAMA2_7B, tied_embeddings=False) == 6_738_415_616
    assert memory.count_parameters(memory.LLAMA2_13B, tied_embeddings=False) == 13_015_864_320


def test_outline_figures_for_a_13b_model():
    num_parameters = memory.count_parameters(memory.LLAMA2_13B, tied_embeddings=False)
    assert memory.inference_memory(num_parameters, "fp16", memory.LLAMA2_13B, 1, 0)["weights"] / memory.GB == \
        pytest.approx(26.0, abs=0.1)
    assert memory.inference_memory(num_parameters, "int4", memory.LLAMA2_13B, 1, 0)["weights"] / memory.GB == \
        pytest.approx(6.5, abs=0.05)
    # Adam: two more tensors per weight, in fp32 (plus the master copy in mixed precision).
    fp32 = memory.training_memory(num_parameters, "fp32", 0)
    assert fp32["optimizer"] == 2 * fp32["weights"]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_training_keeps_sixteen_bytes_per_parameter(precision):
    parts = memory.training_memory(1_000, precision, activations=7.0)
    assert parts["weights"] + parts["gradients"] + parts["optimizer"] == 16_000
    assert parts["activations"] == 7.0


def test_tied_embeddings_store_the_table_once(smollm2_config):
    untied = memory.count_parameters(smollm2_config, tied_embeddings=False)
    assert untied - SMOLLM2_PARAMETERS == smollm2_config.vocab_size * smollm2_config.hidden_size


@pytest.mark.parametrize("precision, dtype", [("fp32", torch.float32), ("fp16", torch.float16),
                                              ("bf16", torch.bfloat16)])
def test_kv_cache_memory_matches_the_kv_cache_module(smollm2_config, precision, dtype):
    for config in (smollm2_config, memory.LLAMA2_13B, small_config()):
        assert memory.kv_cache_memory(config, 3, 100, precision) == kv_cache_bytes(config, 100, 3, dtype)


def test_kv_cache_memory_matches_a_real_cache():
    config = small_config()
    cache = KVCache(config, max_seq_len=37, dtype=torch.float16)
    assert memory.kv_cache_memory(config, 1, 37, "fp16") == cache.nbytes
    assert memory.kv_cache_memory(config, 1, 37, "int4") == cache.nbytes / 4


def test_activations_grow_quadratically_in_length():
    config = small_config()
    short = memory.activation_bytes(config, 1, 1_000, 2)
    long = memory.activation_bytes(config, 1, 2_000, 2)
    scores_short = config.num_layers * config.num_q_heads * 1_000 * 1_000 * 2
    assert long - 2 * short == pytest.approx(2 * scores_short)   # the extra is the doubled score rows
    assert memory.activation_bytes(config, 4, 1_000, 2) == 4 * short


def test_fits_on_uses_decimal_gigabytes():
    assert memory.fits_on(80 * 10**9, 80)
    assert not memory.fits_on(80 * 10**9 + 1, 80)
    assert not memory.fits_on(80 * 2**30, 80)   # 80 GiB is 85.9 GB


def test_bad_inputs_raise_clear_errors(smollm2_config):
    with pytest.raises(ValueError, match="precision must be one of"):
        memory.training_memory(10, "int8", 0)
    with pytest.raises(ValueError, match="precision must be one of"):
        memory.inference_memory(10, "fp3", smollm2_config, 1, 1)
    with pytest.raises(ValueError, match="seq_len must be an int >= 1"):
        memory.activation_bytes(smollm2_config, 1, 0, 2)
    with pytest.raises(ValueError, match="batch_size must be an int >= 0"):
        memory.kv_cache_memory(smollm2_config, -1, 10)
    with pytest.raises(TypeError, match="tied_embeddings must be a bool"):
        memory.tensor_shapes(smollm2_config, tied_embeddings="yes")
    with pytest.raises(TypeError, match="ModelConfig"):
        memory.count_parameters({"num_layers": 2}, tied_embeddings=True)
    with pytest.raises(ValueError, match="gpu_memory_gb must be > 0"):
        memory.fits_on(1, 0)


def _labelled(fig: Figure) -> bool:
    ax = fig.axes[0]
    return bool(ax.get_xlabel() and ax.get_ylabel() and ax.get_title())


def test_memory_breakdown_bars_draws_every_component():
    parts = {"train": memory.training_memory(10**9, "bf16", 5e9),
             "serve": memory.inference_memory(10**9, "int4", small_config(), 2, 100)}
    fig = memory_breakdown_bars(parts, gpu_lines={"L4": 24})
    assert isinstance(fig, Figure) and _labelled(fig)
    legend = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert legend == ["weights", "gradients", "optimizer", "activations", "kv cache"]
    with pytest.raises(ValueError, match="at least one bar"):
        memory_breakdown_bars({})


def test_gpu_fit_grid_marks_what_fits():
    fig = gpu_fit_grid({"small": 10 * memory.GB, "huge": 500 * memory.GB})
    assert isinstance(fig, Figure) and _labelled(fig)
    cell_texts = [text.get_text() for text in fig.axes[0].texts]
    assert "62%" in cell_texts   # 10 GB on a T4 (16 GB)
    assert len(cell_texts) == 2 * len(memory.GPU_MEMORY_GB)
