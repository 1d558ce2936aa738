"""Tiny Llama configurations for fast tests: random weights, a few layers, the real code paths."""

from __future__ import annotations

from course_lib.model import ModelConfig


def tiny_config(**overrides) -> ModelConfig:
    """A 2-layer GQA model (4 query heads sharing 2 KV heads); ``overrides`` change any field."""
    sizes = dict(
        num_layers=2,
        hidden_size=32,
        num_q_heads=4,
        num_kv_heads=2,
        head_dim=8,
        vocab_size=50,
        intermediate_size=64,
        max_position_embeddings=64,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
    )
    sizes.update(overrides)
    return ModelConfig(**sizes)
