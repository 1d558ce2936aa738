"""A contiguous KV cache for one sequence: the simplest thing that makes decoding linear instead of quadratic.

Without a cache, generating token t means running all t previous tokens through the model
again. With one, each layer keeps the keys and values of every token it has seen, and a decode
step runs only the newest token: its query attends over the cached keys.

Storage per layer is one tensor ``[max_seq_len, num_kv_heads, head_dim]`` for keys and one for
values, reserved up front for the longest sequence the request may reach. That up-front
reservation is what paging (``course_lib.paged``) improves on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from course_lib.attention import sdpa_attention
from course_lib.exercises import exercise

if TYPE_CHECKING:
    from course_lib.model_config import ModelConfig

__all__ = ["KVCache", "kv_cache_bytes", "kv_cache_bytes_mha", "kv_cache_bytes_per_token", "tokens_through_model"]


@exercise("lab01-text-to-tensors", "03_kv_cache", "kv_cache_bytes_per_token")
def kv_cache_bytes_per_token(config: ModelConfig, dtype: torch.dtype = torch.float16) -> int:
    """Bytes one token's keys and values take across all layers.

    2 (a key and a value) x num_layers x num_kv_heads x head_dim x bytes per element. With grouped-query
    attention only the KV heads count: the query heads share them. SmolLM2-135M in fp32:
    2 x 30 x 3 x 64 x 4 = 46,080 bytes (45 KiB); Llama-3-8B in fp16: 2 x 32 x 8 x 128 x 2 = 128 KiB.
    """
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype (e.g. torch.float16), got {dtype!r}")
    element_size = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * element_size


@exercise("lab01-text-to-tensors", "03_kv_cache", "kv_cache_bytes")
def kv_cache_bytes(config: ModelConfig, seq_len: int, batch_size: int = 1, dtype: torch.dtype = torch.float16) -> int:
    """Bytes of keys and values for ``batch_size`` sequences of ``seq_len`` tokens each.

    Grows linearly in both: bytes per token x seq_len x batch_size. This is what the cache *holds*;
    a contiguous cache reserves it for the longest length a request may reach (``KVCache.nbytes``).
    """
    for name, value in (("seq_len", seq_len), ("batch_size", batch_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return kv_cache_bytes_per_token(config, dtype) * seq_len * batch_size


@exercise("lab02-prefill-vs-decode", "03_decode", "kv_cache_bytes_mha")
def kv_cache_bytes_mha(num_layers: int, hidden_size: int, num_tokens: int, bytes_per_element: float) -> int | float:
    """Bytes of the KV cache of ``num_tokens`` tokens for a model with full multi-head attention.

    Without grouped-query attention there are as many KV heads as query heads, so every layer keeps,
    per token, one key and one value of ``hidden_size`` numbers: 2 x num_layers x hidden_size x
    num_tokens x bytes_per_element. A 32-layer model 5,120 wide in fp16 (2 bytes): 640 KiB a token,
    2.5 GiB for 4,096 tokens. ``bytes_per_element`` may be a fraction (0.5 for int4); the result is an
    int when it is whole. A negative ``num_tokens`` raises ValueError.
    """
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    total = 2 * num_layers * hidden_size * num_tokens * bytes_per_element
    return int(total) if float(total).is_integer() else total


@exercise("lab01-text-to-tensors", "03_kv_cache", "tokens_through_model")
def tokens_through_model(prompt_len: int, num_new_tokens: int, use_cache: bool) -> int:
    """Token positions the model runs to generate ``num_new_tokens`` tokens, one per step.

    With a cache the prompt runs once and each later step runs the token just made:
    prompt_len + num_new_tokens - 1. Without one, step i (from 0) runs prompt_len + i tokens.
    """
    if use_cache:
        return prompt_len + num_new_tokens - 1
    return sum(prompt_len + step for step in range(num_new_tokens))


class KVCache:
    """Per-request contiguous KV cache; an ``AttentionContext`` for ``LlamaModel.forward``.

    Usage, one forward per step (prompt first, then one token at a time)::

        cache = KVCache(model.config, max_seq_len=len(prompt) + max_new_tokens)
        logits = model(ids, cache.next_positions(len(ids)), cache)

    Each ``attend(layer_index, q, k, v)`` appends k and v at that layer's current end and lets
    the queries attend over everything stored so far, causally with the bottom-right offset (the
    new tokens are the last ones of the sequence). ``attention_fn`` is one of
    ``course_lib.attention``'s functions (default: torch SDPA) or a student's with the same signature.
    """

    def __init__(
        self,
        config: ModelConfig,
        max_seq_len: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        *,
        attention_fn=sdpa_attention,
    ) -> None:
        if not isinstance(max_seq_len, int) or max_seq_len < 1:
            raise ValueError(f"max_seq_len must be an int >= 1, got {max_seq_len!r}")
        if max_seq_len > config.max_position_embeddings:
            raise ValueError(
                f"max_seq_len ({max_seq_len}) exceeds the model's max_position_embeddings "
                f"({config.max_position_embeddings})"
            )
        self.num_layers = config.num_layers
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.max_seq_len = max_seq_len
        self.attention_fn = attention_fn
        shape = (max_seq_len, config.num_kv_heads, config.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        # Each layer appends on its own; after a complete forward pass all lengths agree.
        self._layer_lengths = [0] * config.num_layers

    @property
    def seq_len(self) -> int:
        """Tokens that have passed through every layer (the last layer's length)."""
        return self._layer_lengths[-1]

    @property
    def nbytes(self) -> int:
        """Bytes reserved for keys and values across all layers (used or not)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def next_positions(self, num_tokens: int) -> Tensor:
        """Positions [num_tokens] of the next tokens to run: seq_len, seq_len + 1, ..."""
        return torch.arange(self.seq_len, self.seq_len + num_tokens, device=self.keys[0].device)

    def reset(self) -> None:
        """Forget every token (the storage is kept and overwritten by the next request)."""
        self._layer_lengths = [0] * self.num_layers

    def truncate(self, num_tokens: int) -> None:
        """Forget every token from position ``num_tokens`` on (speculative decoding drops rejected drafts)."""
        if not isinstance(num_tokens, int) or not 0 <= num_tokens <= self.seq_len:
            raise ValueError(f"num_tokens must be an integer in [0, {self.seq_len}], got {num_tokens!r}")
        self._layer_lengths = [num_tokens] * self.num_layers

    def attend(self, layer_index: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Store k, v for this layer and attend over the whole cached sequence.

        q [num_tokens, num_q_heads, head_dim], k/v [num_tokens, num_kv_heads, head_dim]
        -> [num_tokens, num_q_heads, head_dim].
        """
        if not 0 <= layer_index < self.num_layers:
            raise ValueError(f"layer_index must lie in [0, {self.num_layers}), got {layer_index}")
        expected = (q.shape[0], self.num_kv_heads, self.head_dim)
        if tuple(k.shape) != expected or tuple(v.shape) != expected:
            raise ValueError(
                f"k and v must have shape {expected} [num_tokens, num_kv_heads, head_dim], "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        start = self._layer_lengths[layer_index]
        end = start + k.shape[0]
        if end > self.max_seq_len:
            raise ValueError(
                f"KV cache overflow: {start} tokens cached + {k.shape[0]} new > max_seq_len ({self.max_seq_len})"
            )
        self.keys[layer_index][start:end] = k
        self.values[layer_index][start:end] = v
        self._layer_lengths[layer_index] = end
        return self.attention_fn(q, self.keys[layer_index][:end], self.values[layer_index][:end], causal=True)
