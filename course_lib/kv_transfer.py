"""Shipping a request's KV cache from one engine to another (prefill/decode disaggregation).

In a paged KV cache a request's keys and values are scattered over blocks of the pool: the
sender's blocks are not the receiver's. A transfer therefore has three steps:

1. **pack** (sender): gather the request's tokens out of its blocks into one contiguous tensor,
   ``payload[layer, k_or_v, token, kv_head, dim]``, exactly ``num_tokens`` long (the unused tail
   of the last block is not worth sending);
2. **ship** the payload (here: shared memory between two processes on one machine; in a cluster,
   RDMA over InfiniBand or NVLink);
3. **unpack** (receiver): scatter the tokens into the blocks *its* allocator gave the request.

The pool's storage is ``PagedKVCache.storage``, shape
``[num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]``; token ``p`` of a request with
block table ``table`` lives at ``storage[:, :, table[p // block_size], p % block_size]``.

``pack_kv`` and ``unpack_kv`` are Lab 0.5 chapter 5's exercises; ``kv_bytes`` says how much a
transfer moves.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from course_lib.exercises import exercise

__all__ = ["kv_bytes", "pack_kv", "unpack_kv"]


def kv_bytes(num_tokens: int, config, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the keys and values of ``num_tokens`` tokens: 2 x layers x kv_heads x head_dim x element size each."""
    element_size = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * element_size * num_tokens


@exercise("lab05-serving", "05_disaggregation", "pack_kv")
def pack_kv(storage: Tensor, block_table: Sequence[int], num_tokens: int) -> Tensor:
    """The KV of a request's first ``num_tokens`` tokens as one contiguous tensor.

    storage: ``[num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]``.
    block_table: the request's physical block ids in order (at least ceil(num_tokens / block_size)).
    Returns ``[num_layers, 2, num_tokens, num_kv_heads, head_dim]``, contiguous, a copy (the
    sender frees its blocks right after).
    """
    num_layers, _, _, block_size, num_kv_heads, head_dim = storage.shape
    num_blocks = -(-num_tokens // block_size)
    if num_tokens < 1 or len(block_table) < num_blocks:
        raise ValueError(f"num_tokens={num_tokens} needs {num_blocks} blocks, the table has {len(block_table)}")
    blocks = torch.as_tensor(list(block_table[:num_blocks]), dtype=torch.long, device=storage.device)
    gathered = storage[:, :, blocks]  # [L, 2, num_blocks, block_size, H, D]
    return gathered.reshape(num_layers, 2, num_blocks * block_size, num_kv_heads, head_dim)[:, :, :num_tokens].contiguous()


@exercise("lab05-serving", "05_disaggregation", "unpack_kv")
def unpack_kv(payload: Tensor, storage: Tensor, block_table: Sequence[int]) -> Tensor:
    """Write a payload's tokens into the receiver's blocks, in place; return ``storage``.

    payload: ``[num_layers, 2, num_tokens, num_kv_heads, head_dim]`` (from ``pack_kv``).
    storage: the receiver's pool ``[num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]``.
    block_table: the receiver's blocks for this request (at least ceil(num_tokens / block_size)).
    Token p goes to ``storage[:, :, block_table[p // block_size], p % block_size]``; every other
    slot of the pool is left as it was (other requests live there).
    """
    num_tokens = payload.shape[2]
    block_size = storage.shape[3]
    if len(block_table) < -(-num_tokens // block_size):
        raise ValueError(f"{num_tokens} tokens need {-(-num_tokens // block_size)} blocks, the table has {len(block_table)}")
    positions = torch.arange(num_tokens, device=storage.device)
    blocks = torch.as_tensor(list(block_table), dtype=torch.long, device=storage.device)[positions // block_size]
    storage[:, :, blocks, positions % block_size] = payload.to(storage.dtype)
    return storage
