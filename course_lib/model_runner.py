"""One engine step on the model: lay the scheduled chunks out as one flat batch and run the forward.

The batch has no padding: the tokens of every scheduled chunk are concatenated,

    input_ids    [num_tokens]   token ids
    positions    [num_tokens]   each token's position in its own sequence (for RoPE)
    slot_mapping [num_tokens]   where each token's K and V go in the paged cache
    logits_indices [num_sampled] the row of the last token of each chunk that samples

and the model's matrix products see one ``[num_tokens, hidden]`` matrix, whatever mix of prefill
chunks and decodes it holds. Only attention needs to know where one sequence ends and the next
begins; ``PagedAttention`` does that, per layer:

1. store the new k, v in the cache through the slot mapping;
2. decode rows (sequences running one token) attend over their cached K/V all at once,
   vectorized over the batch (``paged_decode_attention_torch``, or the Triton kernel);
3. each prefill chunk attends causally over its cached prefix plus itself.

Decode rows come first in the batch, sorted by length, so they can be attended in a few groups of
similar length: a group is padded to its longest sequence, and sorting keeps that padding small.

Speculative decoding's verify chunks (a decode's token followed by drafted tokens, see
``course_lib.speculative``) are laid out as decode rows too: the row at position p attends over the
cache up to p, and since every row's K/V is stored before anyone attends, a draft row sees the
drafts before it. Every row of a verify chunk gets logits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from course_lib.paged import PagedKVCache
from course_lib.scheduler import ScheduledChunk

__all__ = [
    "ATTENTION_BACKENDS",
    "AttentionBackend",
    "PagedAttention",
    "PrefillSlice",
    "StepBatch",
    "build_step_batch",
    "ModelRunner",
    "attention_functions",
    "check_attention_backend",
    "paged_decode_attention_torch",
]

ATTENTION_BACKENDS = ("torch", "naive", "flash", "triton")
"""The built-in backends by name; an object with ``decode`` (and optionally ``store``) is accepted too."""


@runtime_checkable
class AttentionBackend(Protocol):
    """Your own decode attention (and, optionally, KV store) for ``LLMEngine(attention_backend=...)``.

    ``decode(q, k_cache, v_cache, block_tables, seq_lens, scale) -> out`` is called once per layer
    and decode group with the arguments of ``paged_decode_attention_torch`` (int32 block tables
    padded with block 0, int32 seq_lens that count the new token, q possibly a strided view) and
    must return ``[num_seqs, num_q_heads, head_dim]`` in q's dtype.

    ``store(k, v, k_cache, v_cache, slot_mapping)``, if the backend has it, is called first in every
    layer of every step with all the step's new keys and values (prefill tokens included; k and v
    may be strided views) and must write them into the caches in place; its return value is
    ignored. Without it the engine stores with ``PagedKVCache.store``. Prefill attention stays torch
    SDPA (``course_lib.attention.sdpa_attention``).

    A plain function is accepted as a backend too: it is used as ``decode``.
    """

    def decode(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, block_tables: Tensor, seq_lens: Tensor,
               scale: float) -> Tensor: ...

# Decode rows are attended in groups of this many sequences (sorted by length). Smaller groups pad
# less but make more calls; 8 keeps both costs small for batches of a few dozen sequences.
DECODE_GROUP_SIZE = 8


def paged_decode_attention_torch(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, block_tables: Tensor, seq_lens: Tensor, scale: float
) -> Tensor:
    """Attention of one new token per sequence over that sequence's paged K/V, for a whole batch.

    q:            [num_seqs, num_q_heads, head_dim]          the decode queries
    k_cache:      [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache:      [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: [num_seqs, max_blocks] int                  padded with any valid block id
    seq_lens:     [num_seqs] int                              tokens to attend to, current one included
    -> [num_seqs, num_q_heads, head_dim]

    The blocks of all sequences are gathered into one padded ``[num_seqs, max_blocks * block_size]``
    key/value batch and the padding is masked out. Grouped-query attention without copying K/V per
    query head: the ``group_size`` query heads that share one KV head are laid out as ``group_size``
    *queries* of that head, so torch's fused attention sees ``[num_seqs, num_kv_heads, group_size, head_dim]``
    against ``[num_seqs, num_kv_heads, max_len, head_dim]``. Same signature as
    ``course_lib.kernels.paged_attention.paged_decode_attention``.
    """
    num_seqs, num_q_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    group_size = num_q_heads // num_kv_heads
    max_len = block_tables.shape[1] * block_size
    # index_select over [num_blocks, block_size * kv_heads * head_dim] copies whole blocks as rows,
    # much faster on a CPU than advanced indexing of the 4-D cache.
    flat_tables = block_tables.reshape(-1).long()
    keys = torch.index_select(k_cache.view(num_blocks, -1), 0, flat_tables)
    values = torch.index_select(v_cache.view(num_blocks, -1), 0, flat_tables)
    keys = keys.view(num_seqs, max_len, num_kv_heads, head_dim).transpose(1, 2)
    values = values.view(num_seqs, max_len, num_kv_heads, head_dim).transpose(1, 2)
    visible = torch.arange(max_len, device=q.device)[None, :] < seq_lens.to(q.device)[:, None]  # [num_seqs, max_len]
    output = F.scaled_dot_product_attention(
        q.reshape(num_seqs, num_kv_heads, group_size, head_dim),  # query head h -> kv head h // group_size
        keys,
        values,
        attn_mask=visible[:, None, None, :],
        scale=scale,
    )
    return output.reshape(num_seqs, num_q_heads, head_dim)


@dataclass(frozen=True)
class PrefillSlice:
    """One multi-token chunk in the flat batch: rows ``token_start : token_start + num_tokens``.

    context_len: tokens of the sequence already in the cache before this chunk (its start position).
    block_table: [num_blocks_of_sequence] int64, the sequence's physical blocks.
    """

    token_start: int
    num_tokens: int
    context_len: int
    block_table: Tensor


@dataclass(frozen=True)
class DecodeGroup:
    """Decode rows ``row_start : row_start + num_seqs`` attended together.

    block_tables: [num_seqs, max_blocks] int32 (padded with block 0); seq_lens: [num_seqs] int32.
    """

    row_start: int
    num_seqs: int
    block_tables: Tensor
    seq_lens: Tensor


@dataclass(frozen=True)
class StepBatch:
    """Everything one forward needs, built once per step (not per layer).

    input_ids, positions, slot_mapping: [num_tokens] int64. logits_indices: [num_sampled] int64, in
    the order of the scheduler's sampling chunks (every row of a verify chunk, in order; the last row
    of any other). The first rows are the decode-like rows (single-token chunks and the tokens of
    verify chunks), in ``decode_groups``; the multi-token prefill chunks follow, one ``PrefillSlice`` each.
    """

    input_ids: Tensor
    positions: Tensor
    slot_mapping: Tensor
    logits_indices: Tensor
    decode_groups: list[DecodeGroup]
    prefills: list[PrefillSlice]


def build_step_batch(
    chunks: Sequence[ScheduledChunk],
    block_tables: Sequence[Sequence[int]],
    block_size: int,
    device: torch.device | str = "cpu",
    decode_group_size: int = DECODE_GROUP_SIZE,
) -> StepBatch:
    """Lay out the scheduled chunks as a flat batch (decode rows first, shortest first).

    chunks: the scheduler's plan; block_tables: the block table of each chunk's request, same order.
    """
    # Decode-like rows: (chunk index, offset in the chunk), by the length each one attends over.
    decode_rows = sorted(
        ((i, offset) for i, c in enumerate(chunks) if c.num_tokens == 1 or c.draft_token_ids
         for offset in range(c.num_tokens)),
        key=lambda row: chunks[row[0]].start + row[1],
    )
    prefill_order = [i for i, c in enumerate(chunks) if c.num_tokens > 1 and not c.draft_token_ids]

    input_ids: list[int] = []
    positions: list[int] = []
    slot_mapping: list[int] = []
    row_of: dict[tuple[int, int], int] = {}
    prefills: list[PrefillSlice] = []

    def add_rows(i: int, offsets: range) -> None:
        chunk, table = chunks[i], block_tables[i]
        tokens = chunk.token_ids
        for offset in offsets:
            position = chunk.start + offset
            row_of[(i, offset)] = len(input_ids)
            input_ids.append(tokens[offset])
            positions.append(position)
            slot_mapping.append(table[position // block_size] * block_size + position % block_size)

    for i, offset in decode_rows:
        add_rows(i, range(offset, offset + 1))
    for i in prefill_order:
        token_start = len(input_ids)
        add_rows(i, range(chunks[i].num_tokens))
        table_tensor = torch.tensor(block_tables[i], dtype=torch.long, device=device)
        prefills.append(PrefillSlice(token_start, chunks[i].num_tokens, chunks[i].start, table_tensor))

    logits_rows: list[int] = []
    for i, chunk in enumerate(chunks):
        if chunk.draft_token_ids:
            logits_rows.extend(row_of[(i, offset)] for offset in range(chunk.num_tokens))
        elif chunk.samples:
            logits_rows.append(row_of[(i, chunk.num_tokens - 1)])

    decode_groups = []
    for row_start in range(0, len(decode_rows), decode_group_size):
        members = decode_rows[row_start : row_start + decode_group_size]
        seq_lens = [chunks[i].start + offset + 1 for i, offset in members]
        max_blocks = -(-max(seq_lens) // block_size)
        padded = []
        for i, _ in members:
            table = list(block_tables[i][:max_blocks])
            padded.append(table + [0] * (max_blocks - len(table)))  # padding is masked by seq_lens
        decode_groups.append(
            DecodeGroup(
                row_start,
                len(members),
                torch.tensor(padded, dtype=torch.int32, device=device),
                torch.tensor(seq_lens, dtype=torch.int32, device=device),
            )
        )

    def as_long(values: list[int]) -> Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return StepBatch(
        input_ids=as_long(input_ids),
        positions=as_long(positions),
        slot_mapping=as_long(slot_mapping),
        logits_indices=as_long(logits_rows),
        decode_groups=decode_groups,
        prefills=prefills,
    )


class PagedAttention:
    """The engine's AttentionContext for one step: store K/V in the paged cache, then attend.

    prefill_attention: ``f(q, k, v, causal=True) -> out`` from ``course_lib.attention``
    (sdpa_attention, naive_attention or flash_attention), run once per prefill chunk.
    decode_attention: ``paged_decode_attention``-like function for the decode rows.
    store_kv: ``f(k, v, k_cache, v_cache, slot_mapping)``, or None to use ``PagedKVCache.store``.
    """

    def __init__(
        self,
        kv_cache: PagedKVCache,
        batch: StepBatch,
        prefill_attention: Callable[..., Tensor],
        decode_attention: Callable[..., Tensor],
        store_kv: Callable[..., None] | None = None,
    ) -> None:
        self.kv_cache = kv_cache
        self.batch = batch
        self.prefill_attention = prefill_attention
        self.decode_attention = decode_attention
        self.store_kv = store_kv

    def attend(self, layer_index: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [num_tokens, num_q_heads, head_dim], k/v [num_tokens, num_kv_heads, head_dim]
        -> [num_tokens, num_q_heads, head_dim]."""
        cache, batch = self.kv_cache, self.batch
        k_cache, v_cache = cache.key_caches[layer_index], cache.value_caches[layer_index]
        if self.store_kv is None:
            cache.store(layer_index, k, v, batch.slot_mapping)
        else:
            self.store_kv(k, v, k_cache, v_cache, batch.slot_mapping)

        output = torch.empty_like(q)
        scale = 1.0 / math.sqrt(q.shape[-1])
        for group in batch.decode_groups:
            rows = slice(group.row_start, group.row_start + group.num_seqs)
            output[rows] = self.decode_attention(q[rows], k_cache, v_cache, group.block_tables, group.seq_lens, scale)
        for chunk in batch.prefills:
            rows = slice(chunk.token_start, chunk.token_start + chunk.num_tokens)
            if chunk.context_len == 0:
                # The whole sequence is in this batch: its fresh k, v are exactly what the cache holds.
                keys, values = k[rows], v[rows]
            else:
                keys, values = cache.gather(layer_index, chunk.block_table, chunk.context_len + chunk.num_tokens)
            output[rows] = self.prefill_attention(q[rows], keys, values, causal=True)
        return output


def check_attention_backend(backend) -> None:
    """Raise a clear error unless ``backend`` is a name in ``ATTENTION_BACKENDS``, a decode function,
    or an object with a callable ``decode`` (and, if it has one, a callable ``store``)."""
    if isinstance(backend, str):
        if backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attention_backend must be one of {ATTENTION_BACKENDS}, got {backend!r}")
        if backend == "triton":
            from course_lib.exercises import is_locked, unlock_hint

            if is_locked("lab03-kernels"):
                raise ValueError(
                    "attention_backend='triton' runs the course's kernels, which are your exercises in Lab 0.3: "
                    "pass your own backend instead (an object with decode(...) and store(...)); "
                    + unlock_hint("lab03-kernels")
                )
        return
    decode = getattr(backend, "decode", None)
    if decode is not None:
        if not callable(decode):
            raise TypeError(f"attention_backend.decode must be callable, got {type(decode).__name__}")
        store = getattr(backend, "store", None)
        if store is not None and not callable(store):
            raise TypeError(f"attention_backend.store must be callable, got {type(store).__name__}")
        return
    if not callable(backend):
        raise TypeError(
            f"attention_backend must be one of {ATTENTION_BACKENDS}, a decode function, or an object with "
            f"decode(q, k_cache, v_cache, block_tables, seq_lens, scale), got {type(backend).__name__}"
        )


def attention_functions(backend) -> tuple[Callable[..., Tensor], Callable[..., Tensor], Callable[..., None] | None]:
    """(prefill attention, decode attention, store_kv or None) for a backend (see ``check_attention_backend``).

    "torch", "naive" and "flash" choose the prefill attention from ``course_lib.attention``; their
    decode rows use the vectorized torch paged decode. "triton" runs decode and the K/V store
    through the Triton kernels of ``course_lib.kernels.paged_attention``. An ``AttentionBackend``
    object (or a bare decode function) runs its own decode (and store, if it has one) with torch
    SDPA for prefill: how a student's kernels serve the real model.
    """
    from course_lib import attention

    check_attention_backend(backend)
    if not isinstance(backend, str):
        decode = getattr(backend, "decode", None)
        if decode is None:
            return attention.sdpa_attention, backend, None
        return attention.sdpa_attention, decode, getattr(backend, "store", None)
    if backend == "triton":
        from course_lib.kernels import paged_attention as kernels

        return attention.sdpa_attention, kernels.paged_decode_attention, kernels.store_kv
    prefill = {"torch": attention.sdpa_attention, "naive": attention.naive_attention, "flash": attention.flash_attention}
    return prefill[backend], paged_decode_attention_torch, None


class ModelRunner:
    """Runs the model on one step's chunks over a paged KV cache and returns the logits to sample from.

    model: a ``LlamaModel`` (``forward(input_ids, positions, attention, logits_indices)``).
    kv_cache: the ``PagedKVCache`` the allocator's block ids index into.
    attention_backend: a name in ``ATTENTION_BACKENDS`` or an ``AttentionBackend`` (see there).
    """

    def __init__(self, model, kv_cache: PagedKVCache, attention_backend="torch") -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.prefill_attention, self.decode_attention, self.store_kv = attention_functions(attention_backend)

    def run(self, chunks: Sequence[ScheduledChunk], block_tables: Sequence[Sequence[int]]) -> Tensor:
        """Forward the chunks; returns logits in chunk order: one row per sampling chunk, and one per
        token for a chunk with drafted tokens (``[num_rows, vocab]``)."""
        batch = build_step_batch(chunks, block_tables, self.kv_cache.block_size, self.kv_cache.storage.device)
        context = PagedAttention(self.kv_cache, batch, self.prefill_attention, self.decode_attention, self.store_kv)
        return self.model(batch.input_ids, batch.positions, attention=context, logits_indices=batch.logits_indices)
