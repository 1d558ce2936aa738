"""Paged decode attention and the KV-store kernel, in Triton, beside their torch references.

During decode every running sequence brings one new query token. Its attention has to read the
sequence's whole KV cache, which lives in fixed-size *blocks* of a shared pool and is found through
the sequence's *block table*::

    k_cache, v_cache   [num_blocks, block_size, num_kv_heads, head_dim]   the pool (one layer)
    block_tables       [num_seqs, max_blocks] int32    row i: the pool blocks of sequence i, in order
    seq_lens           [num_seqs] int32                tokens cached for sequence i (current one included)

Token ``t`` of sequence ``i`` sits in pool block ``block_tables[i, t // block_size]`` at offset
``t % block_size``. Each decode step does a few FLOPs per byte of KV it reads, so the kernel is
bound by memory bandwidth: the whole design is about reading every K/V byte exactly once, with
enough independent programs in flight to keep the memory system busy.

How ``paged_decode_attention`` works
------------------------------------
**Grid: one program per (sequence, KV head, split).** With grouped-query attention (GQA) several
query heads share one KV head: SmolLM2 has 9 query heads and 3 KV heads, so query heads 0-2 read KV
head 0, heads 3-5 read KV head 1, and so on (query head ``h`` reads KV head ``h // group_size``).
A program owns one KV head and serves *every query head of its group*, so each K/V tile it loads is
used ``group_size`` times from registers. A grid of one program per query head would fetch every
K/V tile ``group_size`` times (from the L2 cache at best, from DRAM at worst).

**What one program reads.** The group's query vectors, ``[group_size, head_dim]``, once. Then it
walks its range of the sequence in *tiles* of ``TILE`` consecutive token positions. For each tile
it looks up, through the block table, the pool block holding each position, loads the K tile
``[TILE, head_dim]``, computes the scores of all the group's queries against it with one matrix
product, loads the V tile and adds its weighted sum. The tile size is independent of the block
size: a tile of 64 positions spans four blocks of 16, or half a block of 128.

**Padding the group.** ``tl.dot`` needs every dimension to be a power of two and at least 16, and
groups are 1, 3, 4, 5, 8 heads... The query tile therefore has ``GROUP_PAD = max(16,
next_power_of_2(group_size))`` rows; rows beyond the group are loaded as zeros (masked) and never
stored. They cost a little arithmetic, which is free in a kernel that waits on memory anyway. The
head dimension is padded the same way, so any head_dim up to 256 works.

**Online softmax.** The program never holds all the scores of a long sequence. It keeps, per
query head, the running maximum ``m`` of the scores seen so far, the running sum ``l`` of
``exp(score - m)`` and the running output ``acc = sum(exp(score - m) * v)``. When a new tile
raises the maximum, the old ``l`` and ``acc`` are rescaled by ``exp(m_old - m_new)``; at the end
``out = acc / l``. This is the FlashAttention recurrence, and it is exact up to rounding.
All of it is kept in fp32 whatever the input dtype. The scores are multiplied by ``scale *
log2(e)`` so the kernel can use ``exp2``, the GPU's native exponential
(``exp(x) = exp2(x * log2(e))``); ``m`` is therefore in base-2 units.

**Split-KV, and when it helps.** A GPU has a fixed number of streaming multiprocessors (SMs):
132 on an H100. With batch 1 and 8 KV heads the grid above has 8 programs; 124 SMs would sit
idle while 8 of them stream a long cache one tile after another. Split-KV (flash-decoding) cuts
each sequence into ``num_splits`` contiguous ranges of tiles (of whole blocks, when the block size
divides the tile) and gives each range its own program. Each writes, per query head, its partial
result: the output over its own range, already normalized (``o_s = acc / l``), and the
*log-sum-exp* of its scores, ``lse_s = log(sum exp(score))`` (natural log; ``-inf`` for a split with
no tokens, whose ``o_s`` is 0). ``merge_splits``, one program per (sequence, query head), combines
them exactly: with ``M = max_s lse_s`` and weights ``w_s = exp(lse_s - M)``,
``out = (sum_s w_s * o_s) / (sum_s w_s)``. Subtracting ``M`` changes nothing mathematically but keeps
every ``exp`` at most 1: ``exp(lse_s)`` itself overflows fp32 as soon as a score passes 88.
Splitting costs that extra write and merge, so it pays only when the plain grid cannot fill the
device (small batch) *and* each split still has a long stretch of cache to read (long context).
``choose_num_splits`` writes that rule down. With ``num_splits == 1`` the kernel writes the output
itself and no merge runs.

**Offsets in int64.** A pool of 80 GB holds far more than 2**31 elements, so the element offset of
a block (``block_id * stride``) can overflow 32-bit arithmetic. The block id is converted to int64
before it is multiplied.

How ``store_kv`` works
----------------------
Before attention runs, each new token's key and value must land in its slot of the pool. The engine
computes ``slot_mapping`` (slot = ``block_id * block_size + offset``, -1 for padding tokens to skip);
the kernel runs one program per token, which copies the token's ``[num_kv_heads, head_dim]`` keys and
values to ``k_cache[slot // block_size, slot % block_size]`` and the same place of ``v_cache``.

What is trusted rather than checked: the values in ``block_tables``, ``seq_lens`` and
``slot_mapping``. Checking them would copy them to the host, a synchronization on every layer of
every step. The kernel does cap each sequence at the capacity of its table row
(``max_blocks * block_size`` positions), so a too-large ``seq_lens`` entry cannot make it read past
the row. A sequence of length 0 gives an output of zeros.

On a machine without a CUDA device, ``course_lib.kernels`` turns on Triton's interpreter, which runs
these same kernels on the CPU with numpy: exact, and far too slow to say anything about speed.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from course_lib.exercises import exercise

# Triton decides at decoration time whether a kernel is compiled or interpreted (see
# course_lib/kernels/__init__.py, which sets TRITON_INTERPRET on machines without CUDA).
RUNS_ON_INTERPRETER = bool(triton.knobs.runtime.interpret)

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
MAX_NUM_SPLITS = 256

# The split rule (see choose_num_splits). Numbers chosen from the reasoning in the module docstring,
# to be revisited with GPU measurements (benchmarks/paged_attention.py).
PROGRAMS_PER_SM = 4  # a few resident programs per SM hide the latency of each one's loads
MIN_TOKENS_PER_SPLIT = 256  # below this, writing and merging partials costs more than it saves
AUTO_MAX_SPLITS = 32

LOG2_E = 1.4426950408889634
LN_2: tl.constexpr = tl.constexpr(0.6931471805599453)  # read inside the kernels, hence a constexpr


# --------------------------------------------------------------------------------------------
# Torch references: written to be read. Students compare their kernels against these.
# --------------------------------------------------------------------------------------------


def gather_sequence_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy one sequence's keys and values out of the paged pool into contiguous tensors.

    Args:
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        block_table: ``[max_blocks]`` integer, the sequence's pool blocks in order (entries past
            its last used block are ignored).
        seq_len: number of cached tokens of the sequence.

    Returns:
        ``(keys, values)``, each ``[seq_len, num_kv_heads, head_dim]``: token ``t`` is slot
        ``t % block_size`` of block ``block_table[t // block_size]``.
    """
    block_size = k_cache.shape[1]
    num_used_blocks = -(-seq_len // block_size)  # ceil: the last block may be partly filled
    used_blocks = block_table[:num_used_blocks].long()
    # k_cache[used_blocks]: [num_used_blocks, block_size, num_kv_heads, head_dim]; merging the first
    # two dimensions lines the tokens up in order, and the tail of the last block is cut off.
    keys = k_cache[used_blocks].flatten(0, 1)[:seq_len]
    values = v_cache[used_blocks].flatten(0, 1)[:seq_len]
    return keys, values


def paged_decode_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Decode attention over a paged KV cache, one sequence at a time, in plain torch (fp32 math).

    Args:
        q: ``[num_seqs, num_q_heads, head_dim]``, the query of each sequence's newest token.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        block_tables: ``[num_seqs, max_blocks]`` int32.
        seq_lens: ``[num_seqs]`` int32, cached tokens per sequence, the current one included.
        scale: the factor applied to ``q . k`` before the softmax, usually ``head_dim ** -0.5``.

    Returns:
        ``[num_seqs, num_q_heads, head_dim]`` in ``q.dtype``; zeros for a sequence of length 0.
    """
    _check_attention_inputs(q, k_cache, v_cache, block_tables, seq_lens, scale, None)
    num_q_heads = q.shape[1]
    num_kv_heads = k_cache.shape[2]
    group_size = num_q_heads // num_kv_heads
    out = torch.zeros_like(q)
    for seq_index in range(q.shape[0]):
        seq_len = int(seq_lens[seq_index])
        if seq_len <= 0:
            continue
        keys, values = gather_sequence_kv(k_cache, v_cache, block_tables[seq_index], seq_len)
        # GQA: query head h reads KV head h // group_size, so repeat each KV head group_size times.
        keys = keys.repeat_interleave(group_size, dim=1).float()  # [seq_len, num_q_heads, head_dim]
        values = values.repeat_interleave(group_size, dim=1).float()
        query = q[seq_index].float()  # [num_q_heads, head_dim]
        scores = torch.einsum("hd,thd->ht", query, keys) * scale  # [num_q_heads, seq_len]
        probs = torch.softmax(scores, dim=-1)
        out[seq_index] = torch.einsum("ht,thd->hd", probs, values).to(q.dtype)
    return out


def store_kv_ref(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write each new token's key and value into its slot of the pool, in plain torch (in place).

    Args:
        k, v: ``[num_tokens, num_kv_heads, head_dim]``, same dtype as the caches.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``, modified.
        slot_mapping: ``[num_tokens]`` int64; token ``i`` goes to block ``slot // block_size``,
            offset ``slot % block_size``; slot ``-1`` means "do not store" (a padding token).

    Returns:
        ``(k_cache, v_cache)``, the same tensors, written in place.
    """
    _check_store_inputs(k, v, k_cache, v_cache, slot_mapping)
    block_size = k_cache.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    k_cache[slots // block_size, slots % block_size] = k[keep]
    v_cache[slots // block_size, slots % block_size] = v[keep]
    return k_cache, v_cache


# --------------------------------------------------------------------------------------------
# Input checks, shared by the kernels and the references.
# --------------------------------------------------------------------------------------------


def _require_tensor(name: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")


def _require_shape(name: str, tensor: torch.Tensor, expected: tuple, description: str) -> None:
    if tuple(tensor.shape) != tuple(expected):
        raise ValueError(
            f"{name} must have shape {description} = {list(expected)}, got {list(tensor.shape)}"
        )


def _require_last_dim_contiguous(name: str, tensor: torch.Tensor) -> None:
    # Every other stride is passed to the kernels; a unit last stride lets them load whole rows.
    if tensor.dim() > 0 and tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(
            f"{name} must be contiguous in its last dimension (stride 1), got strides "
            f"{tensor.stride()}; call .contiguous() first"
        )


def _check_attention_inputs(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits) -> None:
    for name, value in (
        ("q", q),
        ("k_cache", k_cache),
        ("v_cache", v_cache),
        ("block_tables", block_tables),
        ("seq_lens", seq_lens),
    ):
        _require_tensor(name, value)
    if q.dim() != 3:
        raise ValueError(f"q must be 3-D [num_seqs, num_q_heads, head_dim], got shape {list(q.shape)}")
    if k_cache.dim() != 4:
        raise ValueError(
            "k_cache must be 4-D [num_blocks, block_size, num_kv_heads, head_dim], "
            f"got shape {list(k_cache.shape)}"
        )
    _require_shape("v_cache", v_cache, k_cache.shape, "k_cache.shape")
    num_seqs, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, cache_head_dim = k_cache.shape
    if block_size < 1 or num_kv_heads < 1:
        raise ValueError(
            f"k_cache must have block_size >= 1 and num_kv_heads >= 1, got shape {list(k_cache.shape)}"
        )
    if cache_head_dim != head_dim:
        raise ValueError(
            f"q's head_dim ({head_dim}) must equal the caches' head_dim ({cache_head_dim})"
        )
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be in [1, {MAX_HEAD_DIM}], got {head_dim}")
    if num_q_heads < 1 or num_q_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_q_heads ({num_q_heads}) must be a positive multiple of num_kv_heads "
            f"({num_kv_heads}) for grouped-query attention"
        )
    for name, tensor in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if tensor.dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                f"{name} must be float16, bfloat16 or float32, got {tensor.dtype}"
            )
    if not q.dtype == k_cache.dtype == v_cache.dtype:
        raise TypeError(
            f"q, k_cache and v_cache must share one dtype, got {q.dtype}, {k_cache.dtype}, "
            f"{v_cache.dtype}"
        )
    if block_tables.dim() != 2 or block_tables.shape[0] != num_seqs:
        raise ValueError(
            f"block_tables must have shape [num_seqs, max_blocks] with num_seqs = {num_seqs}, "
            f"got {list(block_tables.shape)}"
        )
    if block_tables.dtype != torch.int32:
        raise TypeError(f"block_tables must be int32, got {block_tables.dtype}")
    _require_shape("seq_lens", seq_lens, (num_seqs,), "[num_seqs]")
    if seq_lens.dtype != torch.int32:
        raise TypeError(f"seq_lens must be int32, got {seq_lens.dtype}")
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, seq_lens)}
    if len(devices) != 1:
        raise ValueError(
            "q, k_cache, v_cache, block_tables and seq_lens must be on one device, got "
            f"{q.device}, {k_cache.device}, {v_cache.device}, {block_tables.device}, {seq_lens.device}"
        )
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a Python float, got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    if num_splits is not None:
        if isinstance(num_splits, bool) or not isinstance(num_splits, int):
            raise TypeError(f"num_splits must be None or an int, got {type(num_splits).__name__}")
        if not 1 <= num_splits <= MAX_NUM_SPLITS:
            raise ValueError(f"num_splits must be in [1, {MAX_NUM_SPLITS}] or None, got {num_splits}")


def _check_store_inputs(k, v, k_cache, v_cache, slot_mapping) -> None:
    for name, value in (
        ("k", k),
        ("v", v),
        ("k_cache", k_cache),
        ("v_cache", v_cache),
        ("slot_mapping", slot_mapping),
    ):
        _require_tensor(name, value)
    if k_cache.dim() != 4:
        raise ValueError(
            "k_cache must be 4-D [num_blocks, block_size, num_kv_heads, head_dim], "
            f"got shape {list(k_cache.shape)}"
        )
    _require_shape("v_cache", v_cache, k_cache.shape, "k_cache.shape")
    if k.dim() != 3:
        raise ValueError(
            f"k must be 3-D [num_tokens, num_kv_heads, head_dim], got shape {list(k.shape)}"
        )
    num_tokens = k.shape[0]
    expected = (num_tokens, k_cache.shape[2], k_cache.shape[3])
    _require_shape("k", k, expected, "[num_tokens, num_kv_heads, head_dim]")
    _require_shape("v", v, expected, "[num_tokens, num_kv_heads, head_dim]")
    if not k.dtype == v.dtype == k_cache.dtype == v_cache.dtype:
        raise TypeError(
            f"k, v, k_cache and v_cache must share one dtype, got {k.dtype}, {v.dtype}, "
            f"{k_cache.dtype}, {v_cache.dtype}"
        )
    if k.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"k must be float16, bfloat16 or float32, got {k.dtype}")
    _require_shape("slot_mapping", slot_mapping, (num_tokens,), "[num_tokens]")
    if slot_mapping.dtype != torch.int64:
        raise TypeError(f"slot_mapping must be int64, got {slot_mapping.dtype}")
    devices = {t.device for t in (k, v, k_cache, v_cache, slot_mapping)}
    if len(devices) != 1:
        raise ValueError(
            "k, v, k_cache, v_cache and slot_mapping must be on one device, got "
            f"{k.device}, {v.device}, {k_cache.device}, {v_cache.device}, {slot_mapping.device}"
        )


def _check_merge_inputs(split_out, split_lse) -> None:
    _require_tensor("split_out", split_out)
    _require_tensor("split_lse", split_lse)
    if split_out.dim() != 4:
        raise ValueError(
            "split_out must be 4-D [num_seqs, num_q_heads, num_splits, head_dim], "
            f"got shape {list(split_out.shape)}"
        )
    _require_shape("split_lse", split_lse, split_out.shape[:3], "split_out.shape[:3]")
    for name, tensor in (("split_out", split_out), ("split_lse", split_lse)):
        if tensor.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {tensor.dtype}")
    if split_out.device != split_lse.device:
        raise ValueError(f"split_out and split_lse must be on one device, got {split_out.device}, {split_lse.device}")
    num_splits, head_dim = split_out.shape[2], split_out.shape[3]
    if not 1 <= num_splits <= MAX_NUM_SPLITS:
        raise ValueError(f"split_out must hold 1 to {MAX_NUM_SPLITS} splits, got {num_splits}")
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be in [1, {MAX_HEAD_DIM}], got {head_dim}")


def _check_out(out, q: torch.Tensor) -> None:
    _require_tensor("out", out)
    _require_shape("out", out, q.shape, "q.shape")
    if out.dtype != q.dtype or out.device != q.device:
        raise TypeError(
            f"out must have q's dtype and device ({q.dtype}, {q.device}), got {out.dtype}, {out.device}"
        )
    _require_last_dim_contiguous("out", out)


def _check_kernel_device(device: torch.device) -> None:
    """The Triton kernels run on CUDA tensors, or on CPU tensors under the interpreter."""
    if device.type == "cuda":
        return
    if device.type == "cpu" and RUNS_ON_INTERPRETER:
        return
    if device.type == "cpu":
        raise ValueError(
            "the Triton kernels need CUDA tensors on a machine with a GPU; CPU tensors run only under "
            "Triton's interpreter (TRITON_INTERPRET=1 set before course_lib.kernels is imported). "
            "Use paged_decode_attention_ref / store_kv_ref for CPU tensors."
        )
    raise ValueError(f"the Triton kernels run on 'cuda' (or 'cpu' when interpreted), got {device}")


# --------------------------------------------------------------------------------------------
# The split rule and the launch configuration.
# --------------------------------------------------------------------------------------------


@exercise("lab03-kernels", "04_split_kv", "choose_num_splits")
def choose_num_splits(num_seqs: int, num_kv_heads: int, max_context_len: int, num_sms: int) -> int:
    """How many splits of each sequence's KV to run in parallel (the rule behind num_splits=None).

    Split as far as the programs still fit in one wave of the device's slots (``PROGRAMS_PER_SM``
    programs per SM): a second, partly filled wave would cost as long as a full one. Never split
    so far that a split would read fewer than ``MIN_TOKENS_PER_SPLIT`` positions of the longest
    context, at most ``AUTO_MAX_SPLITS``, and always at least one split (a grid that already fills
    the device, or a short context, gets one).

    Examples on an H100 (132 SMs, so 528 slots): batch 1 with 8 KV heads at context 8192 -> 32
    splits (66 would fit); at context 512 -> 2; batch 8 (64 programs) at context 8192 -> 8; batch
    64 with 8 KV heads (512 programs) -> 1; batch 256 -> 1.

    Args:
        num_seqs, num_kv_heads: the size of the plain grid.
        max_context_len: the longest sequence the batch may hold (the wrapper passes
            ``max_blocks * block_size``, known without reading ``seq_lens`` back from the GPU).
        num_sms: streaming multiprocessors of the device (1 for the CPU interpreter).
    """
    programs = max(1, num_seqs * num_kv_heads)
    wanted = PROGRAMS_PER_SM * num_sms // programs
    useful = max_context_len // MIN_TOKENS_PER_SPLIT
    return max(1, min(wanted, useful, AUTO_MAX_SPLITS))


@exercise("lab03-kernels", "03_paged_decode", "decode_attention_traffic")
def decode_attention_traffic(
    seq_lens, block_size: int, num_q_heads: int, num_kv_heads: int, head_dim: int, bytes_per_element: float
) -> tuple[float, float]:
    """Bytes one decode-attention call must move: (this paged kernel, gather + SDPA on a padded batch).

    - The paged kernel reads K and V of every cached token of every sequence once
      (``2 * sum(seq_lens) * num_kv_heads * head_dim`` elements), reads q and writes the output
      (``2 * num_seqs * num_q_heads * head_dim``).
    - The torch path (``course_lib.model_runner.paged_decode_attention_torch``) first copies each
      sequence's blocks, up to the longest sequence's block count, into one padded
      ``[num_seqs, padded_len]`` tensor for K and one for V, then runs SDPA on them: K and V of
      ``num_seqs * padded_len`` slots are read from the pool, written to the copy, and read again
      (3 passes), with ``padded_len = ceil(max(seq_lens) / block_size) * block_size``; plus q and
      the output.

    Block tables and seq_lens (4 bytes per block and per sequence) are left out of both.

    Args:
        seq_lens: cached tokens per sequence (a list of ints or an int tensor), each >= 1.
        block_size, num_q_heads, num_kv_heads, head_dim: the cache's and the model's shape.
        bytes_per_element: bytes of one element of q and the cache (2 for bf16).

    Returns:
        ``(paged_kernel_bytes, padded_torch_bytes)``.
    """
    lengths = [int(length) for length in seq_lens]
    if not lengths or min(lengths) < 1:
        raise ValueError(f"seq_lens must hold at least one length, each >= 1, got {lengths}")
    num_seqs = len(lengths)
    kv_row = num_kv_heads * head_dim
    queries_and_outputs = 2 * num_seqs * num_q_heads * head_dim
    paged = 2 * sum(lengths) * kv_row + queries_and_outputs
    padded_len = -(-max(lengths) // block_size) * block_size
    padded = 3 * 2 * num_seqs * padded_len * kv_row + queries_and_outputs
    return paged * bytes_per_element, padded * bytes_per_element


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1  # the interpreter runs one program at a time: nothing to fill


@exercise("lab03-kernels", "04_split_kv", "split_kv_decode_attention")
def _allocate_partials(
    num_seqs: int, num_q_heads: int, num_splits: int, head_dim: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scratch for split-KV: (split_out, split_lse), both fp32.

    Shapes ``[num_seqs, num_q_heads, num_splits, head_dim]`` and ``[num_seqs, num_q_heads,
    num_splits]``. Every element is written by the split kernel before the merge reads it.
    """
    split_out = torch.empty(
        (num_seqs, num_q_heads, num_splits, head_dim), dtype=torch.float32, device=device
    )
    split_lse = torch.empty((num_seqs, num_q_heads, num_splits), dtype=torch.float32, device=device)
    return split_out, split_lse


DECODE_WARPS = 8
"""Warps per decode program. Compiled for an A100 and an H100 (tests/test_kernels_gpu_compile.py), the
K and V tiles, the scores and the fp32 accumulator of one program spill registers in 4 warps (a bf16
tile of 64 x 128 already does); in 8 warps every shape of the course fits without a spill."""


def _tile_size(head_dim_pad: int, element_size: int) -> int:
    # A K row of up to 256 bytes (64 positions x 128 dims of bf16, x 64 dims of fp32: a 16 KiB K tile)
    # gets 64 positions per loop step: wide loads, and K, V and the accumulator stay in 8 warps'
    # registers. Wider rows get fewer positions, the same 16 KiB or less, or they spill (32 for fp32 at
    # head_dim 128 or bf16 at 256, 16 for fp32 at 256: tl.dot's smallest).
    row_bytes = head_dim_pad * element_size
    return 64 if row_bytes <= 256 else 32 if row_bytes <= 512 else 16


def _padded(size: int) -> int:
    # tl.arange needs a power of two and tl.dot needs every dimension >= 16.
    return max(16, triton.next_power_of_2(size))


# --------------------------------------------------------------------------------------------
# Triton kernels.
# --------------------------------------------------------------------------------------------


@exercise("lab03-kernels", "03_paged_decode", "paged_decode_attention")
@triton.jit
def _dot(a, b, DOT_IN_FP32: tl.constexpr):
    """Matrix product with fp32 accumulation (and full fp32 precision for fp32 inputs, not TF32).

    DOT_IN_FP32 is True only under Triton's interpreter with bfloat16 inputs: the interpreter of
    Triton 3.9 multiplies the raw bits of bfloat16 operands. Converting bfloat16 to float32 is exact,
    so the product is the one the GPU's tensor cores compute.
    """
    if DOT_IN_FP32:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision="ieee")


@exercise("lab03-kernels", "03_paged_decode", "paged_decode_attention")
@triton.jit
def _paged_decode_kernel(
    out_ptr,  # [num_seqs, num_q_heads, head_dim], written when NUM_SPLITS == 1
    split_out_ptr,  # [num_seqs, num_q_heads, NUM_SPLITS, head_dim] fp32, when NUM_SPLITS > 1
    split_lse_ptr,  # [num_seqs, num_q_heads, NUM_SPLITS] fp32, natural-log log-sum-exp of the scores
    q_ptr,  # [num_seqs, num_q_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables_ptr,  # [num_seqs, max_blocks] int32
    seq_lens_ptr,  # [num_seqs] int32
    qk_scale_log2,  # scale * log2(e): scores in base 2, so exp2 replaces exp
    max_positions,  # max_blocks * block_size: no sequence may read past its table row
    stride_q_seq,
    stride_q_head,
    stride_out_seq,
    stride_out_head,
    stride_k_block,
    stride_k_token,
    stride_k_head,
    stride_v_block,
    stride_v_token,
    stride_v_head,
    stride_table_seq,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    num_q_heads = tl.num_programs(1) * GROUP_SIZE

    # This program's stretch of the sequence: whole tiles, split as evenly as the tiles allow.
    seq_len = tl.minimum(tl.load(seq_lens_ptr + seq), max_positions)
    num_tiles = tl.cdiv(seq_len, TILE)
    tiles_per_split = tl.cdiv(num_tiles, NUM_SPLITS)
    first_tile = split * tiles_per_split
    end_tile = tl.minimum(first_tile + tiles_per_split, num_tiles)

    # The query heads of this KV head's group, padded to GROUP_PAD rows (extra rows are zeros).
    group_rows = tl.arange(0, GROUP_PAD)
    row_is_head = group_rows < GROUP_SIZE
    q_heads = kv_head * GROUP_SIZE + group_rows
    dims = tl.arange(0, HEAD_DIM_PAD)
    dim_is_real = dims < HEAD_DIM
    q_mask = row_is_head[:, None] & dim_is_real[None, :]
    q = tl.load(
        q_ptr + seq * stride_q_seq + q_heads[:, None] * stride_q_head + dims[None, :],
        mask=q_mask,
        other=0.0,
    )  # [GROUP_PAD, HEAD_DIM_PAD]

    running_max = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], dtype=tl.float32)

    table_row_ptr = block_tables_ptr + seq * stride_table_seq
    k_head_ptr = k_cache_ptr + kv_head * stride_k_head
    v_head_ptr = v_cache_ptr + kv_head * stride_v_head
    for tile in range(first_tile, end_tile):
        positions = tile * TILE + tl.arange(0, TILE)  # [TILE] token positions in the sequence
        is_cached = positions < seq_len
        # Paging: position -> (pool block, offset). int64 so block * stride cannot overflow.
        block_ids = tl.load(table_row_ptr + positions // BLOCK_SIZE, mask=is_cached, other=0)
        block_ids = block_ids.to(tl.int64)
        offsets = positions % BLOCK_SIZE
        kv_mask = is_cached[:, None] & dim_is_real[None, :]
        # Masked loads never touch unused slots, which may hold anything (even NaN).
        k = tl.load(
            k_head_ptr
            + block_ids[:, None] * stride_k_block
            + offsets[:, None] * stride_k_token
            + dims[None, :],
            mask=kv_mask,
            other=0.0,
        )  # [TILE, HEAD_DIM_PAD]
        scores = _dot(q, tl.trans(k), DOT_IN_FP32) * qk_scale_log2  # [GROUP_PAD, TILE]
        scores = tl.where(is_cached[None, :], scores, float("-inf"))

        # Online softmax: rescale what we have whenever the maximum grows.
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        rescale = tl.exp2(running_max - new_max)  # 0 on the first tile (running_max = -inf)
        probs = tl.exp2(scores - new_max[:, None])  # unnormalized, in [0, 1]
        running_sum = running_sum * rescale + tl.sum(probs, axis=1)

        v = tl.load(
            v_head_ptr
            + block_ids[:, None] * stride_v_block
            + offsets[:, None] * stride_v_token
            + dims[None, :],
            mask=kv_mask,
            other=0.0,
        )  # [TILE, HEAD_DIM_PAD]
        # probs go into the matrix product in V's dtype (the tensor cores' input), summed in fp32.
        acc = acc * rescale[:, None] + _dot(probs.to(v.dtype), v, DOT_IN_FP32)
        running_max = new_max

    # Normalize what this program saw. An empty range (a sequence of length 0, or a split past a
    # short sequence's end) has running_sum == 0: its output is zeros, not 0 / 0.
    safe_sum = tl.where(running_sum > 0, running_sum, 1.0)
    result = acc / safe_sum[:, None]
    if NUM_SPLITS == 1:
        # The whole sequence was ours: this is the answer.
        tl.store(
            out_ptr + seq * stride_out_seq + q_heads[:, None] * stride_out_head + dims[None, :],
            result.to(out_ptr.dtype.element_ty),
            mask=q_mask,
        )
    else:
        # One of several splits: leave the split's output and its log-sum-exp for merge_splits.
        # log(sum exp(s)) = ln 2 * (m + log2(l)) with m, l in base-2 units; -inf for an empty split.
        lse = tl.where(running_sum > 0, (running_max + tl.log2(safe_sum)) * LN_2, float("-inf"))
        rows = (seq * num_q_heads + q_heads) * NUM_SPLITS + split  # [GROUP_PAD]
        tl.store(split_lse_ptr + rows, lse, mask=row_is_head)
        tl.store(split_out_ptr + rows[:, None] * HEAD_DIM + dims[None, :], result, mask=q_mask)


@exercise("lab03-kernels", "04_split_kv", "merge_splits")
@triton.jit
def _merge_splits_kernel(
    out_ptr,  # [num_seqs, num_q_heads, head_dim]
    split_out_ptr,  # [num_seqs, num_q_heads, NUM_SPLITS, head_dim] fp32, each split's normalized output
    split_lse_ptr,  # [num_seqs, num_q_heads, NUM_SPLITS] fp32, each split's log-sum-exp (-inf: empty)
    stride_out_seq,
    stride_out_head,
    stride_split_out_seq,
    stride_split_out_head,
    stride_split_out_split,
    stride_lse_seq,
    stride_lse_head,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)

    splits = tl.arange(0, SPLITS_PAD)
    is_split = splits < NUM_SPLITS
    dims = tl.arange(0, HEAD_DIM_PAD)
    dim_is_real = dims < HEAD_DIM
    lse = tl.load(
        split_lse_ptr + seq * stride_lse_seq + head * stride_lse_head + splits,
        mask=is_split,
        other=float("-inf"),
    )  # [SPLITS_PAD]
    split_out = tl.load(
        split_out_ptr
        + seq * stride_split_out_seq
        + head * stride_split_out_head
        + splits[:, None] * stride_split_out_split
        + dims[None, :],
        mask=is_split[:, None] & dim_is_real[None, :],
        other=0.0,
    )  # [SPLITS_PAD, HEAD_DIM_PAD]

    # Weigh each split by its share of the softmax's denominator, exp(lse_s) / sum_s exp(lse_s),
    # computed as exp(lse_s - max) so no exp overflows. Empty splits (lse -inf) weigh 0; if every
    # split is empty (seq_len 0) use 0 as the max, so -inf - -inf never makes a NaN.
    top = tl.max(lse, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)
    weights = tl.exp(lse - top)  # [SPLITS_PAD], each in [0, 1]
    total = tl.sum(weights, axis=0)
    safe_total = tl.where(total > 0, total, 1.0)
    result = tl.sum(split_out * weights[:, None], axis=0) / safe_total  # [HEAD_DIM_PAD]
    tl.store(
        out_ptr + seq * stride_out_seq + head * stride_out_head + dims,
        result.to(out_ptr.dtype.element_ty),
        mask=dim_is_real,
    )


@exercise("lab03-kernels", "04_split_kv", "store_kv")
@triton.jit
def _store_kv_kernel(
    k_ptr,  # [num_tokens, num_kv_heads, head_dim]
    v_ptr,  # [num_tokens, num_kv_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping_ptr,  # [num_tokens] int64, -1 = skip
    stride_k_token,
    stride_k_head,
    stride_v_token,
    stride_v_head,
    stride_kc_block,
    stride_kc_token,
    stride_kc_head,
    stride_vc_block,
    stride_vc_token,
    stride_vc_head,
    NUM_KV_HEADS: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # One program per new token: it copies the token's [num_kv_heads, head_dim] keys and values.
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token)  # int64, so block_id * stride cannot overflow
    if slot >= 0:
        block_id = slot // BLOCK_SIZE
        offset = slot % BLOCK_SIZE
        heads = tl.arange(0, HEADS_PAD)
        dims = tl.arange(0, HEAD_DIM_PAD)
        mask = (heads[:, None] < NUM_KV_HEADS) & (dims[None, :] < HEAD_DIM)
        k_src = k_ptr + token * stride_k_token + heads[:, None] * stride_k_head + dims[None, :]
        v_src = v_ptr + token * stride_v_token + heads[:, None] * stride_v_head + dims[None, :]
        k_dst = k_cache_ptr + block_id * stride_kc_block + offset * stride_kc_token
        v_dst = v_cache_ptr + block_id * stride_vc_block + offset * stride_vc_token
        k_dst = k_dst + heads[:, None] * stride_kc_head + dims[None, :]
        v_dst = v_dst + heads[:, None] * stride_vc_head + dims[None, :]
        tl.store(k_dst, tl.load(k_src, mask=mask), mask=mask)
        tl.store(v_dst, tl.load(v_src, mask=mask), mask=mask)


# --------------------------------------------------------------------------------------------
# Python entry points.
# --------------------------------------------------------------------------------------------


@exercise("lab03-kernels", "03_paged_decode", "paged_decode_attention")
def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    num_splits: int | None = None,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode attention over a paged KV cache with the Triton kernel (see the module docstring).

    Args:
        q: ``[num_seqs, num_q_heads, head_dim]`` float16, bfloat16 or float32.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``, q's dtype.
        block_tables: ``[num_seqs, max_blocks]`` int32; entries past a sequence's last block are
            never read.
        seq_lens: ``[num_seqs]`` int32, cached tokens per sequence, the current one included.
        scale: the factor applied to ``q . k`` before the softmax, usually ``head_dim ** -0.5``.
        num_splits: how many programs share each (sequence, KV head); None picks with
            ``choose_num_splits``.
        out: optional ``[num_seqs, num_q_heads, head_dim]`` tensor of q's dtype to write into,
            so a caller can reuse one buffer; a new one is allocated when None.

    Returns:
        ``out``: ``[num_seqs, num_q_heads, head_dim]`` in q's dtype.
    """
    _check_attention_inputs(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits)
    _check_kernel_device(q.device)
    named = (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("block_tables", block_tables))
    for name, tensor in named:
        _require_last_dim_contiguous(name, tensor)
    seq_lens = seq_lens.contiguous()

    num_seqs, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group_size = num_q_heads // num_kv_heads
    max_positions = block_tables.shape[1] * block_size
    if out is None:
        out = torch.empty((num_seqs, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    else:
        _check_out(out, q)
    if num_seqs == 0:
        return out
    if num_splits is None:
        num_splits = choose_num_splits(num_seqs, num_kv_heads, max_positions, _num_sms(q.device))

    head_dim_pad = _padded(head_dim)
    if num_splits > 1:
        split_out, split_lse = _allocate_partials(num_seqs, num_q_heads, num_splits, head_dim, q.device)
    else:
        # Not touched by the kernel when NUM_SPLITS == 1; any tensor will do as the pointer.
        split_out = split_lse = out

    _paged_decode_kernel[(num_seqs, num_kv_heads, num_splits)](
        out,
        split_out,
        split_lse,
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        scale * LOG2_E,
        max_positions,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=head_dim_pad,
        GROUP_SIZE=group_size,
        GROUP_PAD=_padded(group_size),
        BLOCK_SIZE=block_size,
        TILE=_tile_size(head_dim_pad, q.element_size()),
        NUM_SPLITS=num_splits,
        DOT_IN_FP32=RUNS_ON_INTERPRETER and q.dtype == torch.bfloat16,
        num_warps=DECODE_WARPS,
    )
    if num_splits > 1:
        merge_splits(split_out, split_lse, out=out)
    return out


@exercise("lab03-kernels", "04_split_kv", "merge_splits")
def merge_splits(
    split_out: torch.Tensor, split_lse: torch.Tensor, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Combine the partial results of split-KV into the attention output, with the Triton merge kernel.

    Args:
        split_out: ``[num_seqs, num_q_heads, num_splits, head_dim]`` float32, each split's output
            over its own range of the sequence, normalized by its own softmax sum (0 for an empty split).
        split_lse: ``[num_seqs, num_q_heads, num_splits]`` float32, each split's log-sum-exp of its
            scores (natural log; ``-inf`` for a split that held no token).
        out: optional ``[num_seqs, num_q_heads, head_dim]`` tensor to write into (any float dtype);
            a new float32 tensor when None.

    Returns:
        ``out``: ``sum_s w_s * split_out[..., s, :] / sum_s w_s`` with ``w_s = exp(lse_s - max_s lse_s)``
        (zeros where every split is empty).
    """
    _check_merge_inputs(split_out, split_lse)
    _check_kernel_device(split_out.device)
    for name, tensor in (("split_out", split_out), ("split_lse", split_lse)):
        _require_last_dim_contiguous(name, tensor)
    num_seqs, num_q_heads, num_splits, head_dim = split_out.shape
    if out is None:
        out = torch.empty((num_seqs, num_q_heads, head_dim), dtype=torch.float32, device=split_out.device)
    else:
        _require_tensor("out", out)
        _require_shape("out", out, (num_seqs, num_q_heads, head_dim), "[num_seqs, num_q_heads, head_dim]")
        _require_last_dim_contiguous("out", out)
    if num_seqs == 0 or num_q_heads == 0:
        return out
    _merge_splits_kernel[(num_seqs, num_q_heads)](
        out,
        split_out,
        split_lse,
        out.stride(0),
        out.stride(1),
        split_out.stride(0),
        split_out.stride(1),
        split_out.stride(2),
        split_lse.stride(0),
        split_lse.stride(1),
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=_padded(head_dim),
        NUM_SPLITS=num_splits,
        SPLITS_PAD=triton.next_power_of_2(num_splits),
        num_warps=4,
    )
    return out


@exercise("lab03-kernels", "04_split_kv", "store_kv")
def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write each new token's key and value into its pool slot with the Triton kernel (in place).

    Args:
        k, v: ``[num_tokens, num_kv_heads, head_dim]``, same dtype as the caches.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``, modified.
        slot_mapping: ``[num_tokens]`` int64, ``block * block_size + offset``; -1 skips the token.

    Returns:
        ``(k_cache, v_cache)``, the same tensors, written in place (so a caller can chain or check).
    """
    _check_store_inputs(k, v, k_cache, v_cache, slot_mapping)
    _check_kernel_device(k.device)
    for name, tensor in (("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
        _require_last_dim_contiguous(name, tensor)
    num_tokens = k.shape[0]
    if num_tokens == 0:
        return k_cache, v_cache
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    _store_kv_kernel[(num_tokens,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping.contiguous(),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads,
        HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=triton.next_power_of_2(head_dim),
        BLOCK_SIZE=block_size,
        num_warps=4,
    )
    return k_cache, v_cache
