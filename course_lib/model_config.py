"""The sizes of a Llama model (``ModelConfig``), read from a GGUF file's header or written out.

Its own module because two concepts need it without needing each other: the model
(``course_lib.model``) builds its layers from it, and the KV cache (``course_lib.kv_cache``) counts
its bytes from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from course_lib.exercises import exercise
from course_lib.gguf_file import gguf_path, read_metadata, read_tokenizer_metadata

__all__ = ["ModelConfig"]


@dataclass(frozen=True)
class ModelConfig:
    """The sizes of a Llama model (SmolLM2-135M: 30 layers, hidden 576, 9 query / 3 KV heads of 64)."""

    num_layers: int
    hidden_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "num_layers",
            "hidden_size",
            "num_q_heads",
            "num_kv_heads",
            "head_dim",
            "vocab_size",
            "intermediate_size",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.num_q_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"ModelConfig.num_q_heads ({self.num_q_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"ModelConfig.head_dim must be even for RoPE, got {self.head_dim}")
        if self.rope_theta <= 0 or self.rms_norm_eps <= 0:
            raise ValueError(
                f"ModelConfig.rope_theta and rms_norm_eps must be > 0, got {self.rope_theta}, {self.rms_norm_eps}"
            )

    @classmethod
    def from_gguf(cls, path=None) -> ModelConfig:
        """Read the sizes from a GGUF file's ``llama.*`` metadata (default: the SmolLM2 file)."""
        metadata = read_metadata(path)  # from the disk cache after the first parse of the header
        architecture = metadata.get("general.architecture")
        if architecture != "llama":
            raise ValueError(f"expected a llama GGUF file, got general.architecture={architecture!r}")

        def field(key):
            value = metadata.get(f"llama.{key}")
            if value is None:
                raise ValueError(f"GGUF file {path or gguf_path()} has no llama.{key} field")
            return value

        hidden_size = int(field("embedding_length"))
        num_q_heads = int(field("attention.head_count"))
        tokenizer = read_tokenizer_metadata(path)
        # Older files omit llama.vocab_size; the vocabulary's length is the same number.
        vocab_size = metadata.get("llama.vocab_size") or len(tokenizer.tokens)
        return cls(
            num_layers=int(field("block_count")),
            hidden_size=hidden_size,
            num_q_heads=num_q_heads,
            num_kv_heads=int(field("attention.head_count_kv")),
            head_dim=int(metadata.get("llama.rope.dimension_count") or hidden_size // num_q_heads),
            vocab_size=int(vocab_size),
            intermediate_size=int(field("feed_forward_length")),
            max_position_embeddings=int(field("context_length")),
            rope_theta=float(metadata.get("llama.rope.freq_base", 10000.0)),
            rms_norm_eps=float(field("attention.layer_norm_rms_epsilon")),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )

    @exercise("lab01-text-to-tensors", "03_kv_cache", "kv_cache_bytes_per_token")
    def kv_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of KV cache one token needs: 2 (K and V) x layers x kv_heads x head_dim x element size."""
        element_size = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element_size
