"""Tiny models for fast tests: Llama configurations (random weights, a few layers, the real code paths)
and a byte tokenizer to serve them with."""

from __future__ import annotations

from collections.abc import Sequence

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


class ByteTokenizer:
    """Token i is the byte i % 256 (ids 256.. repeat them): enough to test text handling."""

    def __init__(self, eos_token_id=None) -> None:
        self.eos_token_id = eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode_token_bytes(self, token_id: int) -> bytes:
        return bytes([token_id % 256])

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.decode_token_bytes(i) for i in ids).decode("utf-8", errors="replace")
