"""Causal attention three ways: the textbook formula, the tiled FlashAttention algorithm, and torch's fused kernel.

All three functions take the engine's flattened layout for one sequence:

    q  [q_len,  num_q_heads,  head_dim]      the queries of the tokens being run now
    k  [kv_len, num_kv_heads, head_dim]      keys of every token the queries may look at
    v  [kv_len, num_kv_heads, head_dim]      values, same layout as k
    -> [q_len,  num_q_heads,  head_dim]

and agree to within floating-point rounding.

Grouped-query attention (GQA): several query heads share one key/value head, which shrinks the
KV cache by ``num_q_heads / num_kv_heads``. Query head ``h`` reads kv head ``h // group_size`` with
``group_size = num_q_heads // num_kv_heads`` (the layout Llama and transformers use).

Causal masking is *bottom-right aligned*: the queries are the last ``q_len`` tokens of a
``kv_len``-token sequence, so query ``i`` sits at absolute position ``kv_len - q_len + i`` and
sees keys ``0 .. kv_len - q_len + i``. With ``q_len == kv_len`` this is the usual triangle; with
``q_len == 1`` (decode) the single query sees every key; in between it is a chunk of a prompt
whose earlier chunks are already in the cache (chunked prefill).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from course_lib.exercises import exercise

__all__ = [
    "AttentionContext",
    "UncachedAttention",
    "causal_mask",
    "flash_attention",
    "naive_attention",
    "repeat_kv_heads",
    "sdpa_attention",
]


class AttentionContext(Protocol):
    """Where the model's attention layers keep their keys and values.

    The model calls ``attend`` once per layer, in layer order, with the q/k/v of the tokens it is
    running now (RoPE already applied). The context stores k and v in its cache, attends over
    everything the queries may see, and returns the result.
    """

    def attend(self, layer_index: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [num_tokens, num_q_heads, head_dim], k/v [num_tokens, num_kv_heads, head_dim]
        -> [num_tokens, num_q_heads, head_dim]."""
        ...


def _check_attention_inputs(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> None:
    """Raise a clear error unless q, k, v have the shapes documented at the top of this module."""
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 3:
            raise ValueError(
                f"{name} must have 3 dimensions [tokens, heads, head_dim], got shape {tuple(tensor.shape)}"
            )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads, kv_head_dim = k.shape
    if kv_head_dim != head_dim:
        raise ValueError(f"q has head_dim {head_dim} but k/v have head_dim {kv_head_dim}")
    if num_kv_heads == 0 or num_q_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_q_heads ({num_q_heads}) must be a positive multiple of num_kv_heads ({num_kv_heads})"
        )
    if kv_len == 0:
        raise ValueError("k and v must hold at least one token (kv_len >= 1)")
    if causal and q_len > kv_len:
        raise ValueError(
            f"with causal=True the queries are the last q_len of kv_len tokens, so q_len ({q_len}) "
            f"must be <= kv_len ({kv_len})"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")


def _default_scale(head_dim: int, scale: float | None) -> float:
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def repeat_kv_heads(kv: Tensor, group_size: int) -> Tensor:
    """[kv_len, num_kv_heads, head_dim] -> [kv_len, num_kv_heads * group_size, head_dim].

    Each kv head is repeated ``group_size`` times in a row, so query head ``h`` lines up with
    kv head ``h // group_size``.
    """
    if group_size == 1:
        return kv
    return kv.repeat_interleave(group_size, dim=1)


def causal_mask(q_len: int, kv_len: int, device: torch.device | str | None = None) -> Tensor:
    """Boolean [q_len, kv_len] mask, True where query i may see key j (bottom-right aligned).

    Query i sits at absolute position ``kv_len - q_len + i`` and sees keys ``j <= that position``.
    """
    query_positions = torch.arange(kv_len - q_len, kv_len, device=device)
    key_positions = torch.arange(kv_len, device=device)
    return key_positions[None, :] <= query_positions[:, None]


@exercise("lab02-prefill-vs-decode", "02_prefill", "naive_attention")
def naive_attention(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = True, scale: float | None = None
) -> Tensor:
    """Attention straight from the formula softmax(q k^T * scale + mask) v, with the full score matrix.

    q [q_len, num_q_heads, head_dim], k/v [kv_len, num_kv_heads, head_dim]
    -> [q_len, num_q_heads, head_dim] in q's dtype (computed in fp32).

    Memory grows with q_len * kv_len per head: fine for teaching, the reason FlashAttention exists.
    """
    _check_attention_inputs(q, k, v, causal)
    q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads, _ = k.shape
    scale = _default_scale(head_dim, scale)
    group_size = num_q_heads // num_kv_heads

    # Heads first so each head is one matrix product: [heads, tokens, head_dim].
    queries = q.float().transpose(0, 1)
    keys = repeat_kv_heads(k.float(), group_size).transpose(0, 1)
    values = repeat_kv_heads(v.float(), group_size).transpose(0, 1)

    scores = queries @ keys.transpose(1, 2) * scale  # [heads, q_len, kv_len]
    if causal:
        scores = scores.masked_fill(~causal_mask(q_len, kv_len, q.device), float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # each row sums to 1 over the keys it may see
    output = weights @ values  # [heads, q_len, head_dim]
    return output.transpose(0, 1).to(q.dtype)


@exercise("lab02-prefill-vs-decode", "02_prefill", "flash_attention")
def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = True,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
) -> Tensor:
    """The FlashAttention algorithm: tiles of queries and keys, online softmax, no full score matrix.

    q [q_len, num_q_heads, head_dim], k/v [kv_len, num_kv_heads, head_dim]
    -> [q_len, num_q_heads, head_dim] in q's dtype (accumulated in fp32).

    For each block of ``block_q`` queries we walk over blocks of ``block_k`` keys and keep, per
    query row, three running quantities:

        row_max  m   the largest score seen so far
        row_sum  l   sum of exp(score - m) over the keys seen so far
        acc          sum of exp(score - m) * value over the keys seen so far

    When a new tile raises the maximum from m to m', everything accumulated so far was scaled by
    exp(-m) instead of exp(-m'), so we multiply l and acc by exp(m - m') before adding the tile.
    At the end ``acc / l`` is exactly softmax(scores) @ v. Only [heads, block_q, block_k] scores
    exist at any time; on a GPU that tile lives in on-chip memory, which is the whole point.
    """
    _check_attention_inputs(q, k, v, causal)
    for name, block in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(block, int) or block < 1:
            raise ValueError(f"{name} must be a positive int, got {block!r}")
    q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads, _ = k.shape
    scale = _default_scale(head_dim, scale)
    group_size = num_q_heads // num_kv_heads
    query_offset = kv_len - q_len  # absolute position of query 0 (bottom-right alignment)

    queries = q.float().transpose(0, 1)  # [heads, q_len, head_dim]
    keys = repeat_kv_heads(k.float(), group_size).transpose(0, 1)  # [heads, kv_len, head_dim]
    values = repeat_kv_heads(v.float(), group_size).transpose(0, 1)
    output = torch.empty(num_q_heads, q_len, head_dim, dtype=torch.float32, device=q.device)

    for q_start in range(0, q_len, block_q):
        q_end = min(q_start + block_q, q_len)
        q_tile = queries[:, q_start:q_end]  # [heads, bq, head_dim]
        rows = q_end - q_start
        fp32 = {"dtype": torch.float32, "device": q.device}
        row_max = torch.full((num_q_heads, rows, 1), float("-inf"), **fp32)
        row_sum = torch.zeros(num_q_heads, rows, 1, **fp32)
        acc = torch.zeros(num_q_heads, rows, head_dim, **fp32)

        # With a causal mask the last query of this block sees keys up to this position;
        # key blocks after it are skipped entirely (about half the work for a full prefill).
        last_visible_key = query_offset + q_end - 1 if causal else kv_len - 1
        for k_start in range(0, last_visible_key + 1, block_k):
            k_end = min(k_start + block_k, kv_len)
            scores = q_tile @ keys[:, k_start:k_end].transpose(1, 2) * scale  # [heads, bq, bk]
            if causal and k_end - 1 > query_offset + q_start:
                # Only tiles that cross the diagonal need a mask.
                query_positions = torch.arange(query_offset + q_start, query_offset + q_end, device=q.device)
                key_positions = torch.arange(k_start, k_end, device=q.device)
                visible = key_positions[None, :] <= query_positions[:, None]
                scores = scores.masked_fill(~visible, float("-inf"))

            # Key block 0 holds key 0, which every query sees, so after the first tile row_max is
            # finite and exp(old_max - new_max) below never computes exp(-inf - -inf).
            new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
            rescale = torch.exp(row_max - new_max)  # how much the old running sums shrink
            probabilities = torch.exp(scores - new_max)  # masked entries become exp(-inf) = 0
            row_sum = row_sum * rescale + probabilities.sum(dim=-1, keepdim=True)
            acc = acc * rescale + probabilities @ values[:, k_start:k_end]
            row_max = new_max

        output[:, q_start:q_end] = acc / row_sum
    return output.transpose(0, 1).to(q.dtype)


def sdpa_attention(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = True, scale: float | None = None
) -> Tensor:
    """Attention through ``torch.nn.functional.scaled_dot_product_attention`` (the fast path).

    q [q_len, num_q_heads, head_dim], k/v [kv_len, num_kv_heads, head_dim]
    -> [q_len, num_q_heads, head_dim] in q's dtype.

    torch's ``is_causal=True`` aligns the triangle top-left, which is only right when
    q_len == kv_len. For decode (q_len == 1) no mask is needed at all; for a prefill chunk after
    cached tokens we pass an explicit bottom-right boolean mask.
    """
    _check_attention_inputs(q, k, v, causal)
    q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads, _ = k.shape
    mask = None
    is_causal = False
    if causal and q_len == kv_len:
        is_causal = q_len > 1
    elif causal and q_len > 1:
        # Written out rather than causal_mask's: this function is the engine's attention in every
        # kit, where the course's helpers for the naive formula are stubs until Lab 0.2 unlocks.
        mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=q.device).tril(kv_len - q_len)
    # torch wants [batch, heads, tokens, head_dim]. A batch of one (rather than 3-D input) also
    # selects the same fused CPU kernel that transformers ends up in, so the results agree bit for bit.
    output = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0),
        attn_mask=mask,
        is_causal=is_causal,
        scale=_default_scale(head_dim, scale),
        enable_gqa=num_q_heads != num_kv_heads,
    )
    return output[0].transpose(0, 1)


class UncachedAttention:
    """AttentionContext for one sequence with no cache: the tokens attend causally to themselves.

    This is what ``LlamaModel.forward(..., attention=None)`` uses; every call recomputes
    everything, which is fine for scoring a prompt and is the baseline a KV cache is measured against.
    ``attention_fn`` is any of this module's functions (or a student's with the same signature).
    """

    def __init__(self, attention_fn=sdpa_attention) -> None:
        self.attention_fn = attention_fn

    def attend(self, layer_index: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [num_tokens, num_q_heads, head_dim], k/v [num_tokens, num_kv_heads, head_dim]
        -> [num_tokens, num_q_heads, head_dim]."""
        return self.attention_fn(q, k, v, causal=True)
