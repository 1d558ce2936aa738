"""Checks for Lab 0.3, chapters 3 and 4: paged decode attention, its traffic, split-KV and the KV store.

Every attention check builds a paged pool the way a busy engine leaves it (``paged_case``):

- block ids handed out in a shuffled order, so a sequence's blocks are scattered through the pool;
- the common full blocks of the two longest sequences shared (a prefix-cache hit);
- lengths at and around block boundaries (1, block_size - 1, block_size, block_size + 1, ...);
- every slot that holds no cached token (the tail of each last block, the spare blocks) filled with
  NaN, so a kernel that reads one gets NaN in its output instead of a plausible number;
- block-table entries past a sequence's last block padded with 0 (the engine's convention) or with
  an id outside the pool, which only a kernel that reads them will notice.

The expected output is computed in float64 from the same inputs. On a mismatch the check looks at
*which* sequences are wrong (one-block ones? those ending inside a block?) and at what a typical
mistake would have produced (the wrong GQA mapping), and says so in the hint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from course_lib.checks import CheckFailed, call_student, expect_equal, fail, is_remote, register_reference_names, \
    require_own_implementation
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.checks.kernels import call_kernel, expect_tensor, fail_mismatch, is_close

__all__ = [
    "PagedCase",
    "check_choose_num_splits",
    "check_decode_attention_traffic",
    "check_merge_splits",
    "check_paged_decode_attention",
    "check_split_kv_decode_attention",
    "check_store_kv",
    "paged_case",
    "paged_attention_float64",
]

register_reference_names("paged_decode_attention", "paged_decode_attention_ref", "paged_decode_attention_torch",
                         "gather_sequence_kv", "merge_splits", "store_kv", "store_kv_ref", "choose_num_splits",
                         "decode_attention_traffic")

INVALID_BLOCK_OFFSET = 1000  # table padding "invalid": block ids from num_blocks + 1000 on


# ---------------------------------------------------------------------------------------------
# A paged pool as an engine leaves it
# ---------------------------------------------------------------------------------------------


@dataclass
class PagedCase:
    """Inputs of one decode-attention call, and a description of them for feedback."""

    q: torch.Tensor  # [num_seqs, num_q_heads, head_dim], maybe a strided view
    k_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim], NaN where no token lives
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor  # [num_seqs] int32
    scale: float
    description: str

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[1]

    def args(self) -> tuple:
        return self.q, self.k_cache, self.v_cache, self.block_tables, self.seq_lens, self.scale


def paged_case(seq_lens: list[int], num_q_heads: int, num_kv_heads: int, head_dim: int, block_size: int, *,
               seed: int = 0, dtype: torch.dtype = torch.float32, share_prefix: bool = True,
               table_padding: str = "zero", strided_q: bool = False, q_scale: float = 1.0,
               scale: float | None = None, spare_blocks: int = 3) -> PagedCase:
    """A random paged pool holding ``len(seq_lens)`` sequences (see the module docstring)."""
    if table_padding not in ("zero", "invalid"):
        raise ValueError(f"table_padding must be 'zero' or 'invalid', got {table_padding!r}")
    lengths = [int(length) for length in seq_lens]
    if not lengths or min(lengths) < 1:
        raise ValueError(f"seq_lens must be lengths >= 1, got {lengths}")
    generator = torch.Generator().manual_seed(seed)
    blocks_needed = [-(-length // block_size) for length in lengths]
    # The two longest sequences share their common full blocks, as after a prefix-cache hit.
    by_length = sorted(range(len(lengths)), key=lambda seq: -lengths[seq])
    owner, sharer = (by_length + [None, None])[:2]
    shared = 0
    if share_prefix and sharer is not None:
        shared = min(lengths[owner], lengths[sharer]) // block_size
    num_blocks = sum(blocks_needed) - shared + spare_blocks
    free = torch.randperm(num_blocks, generator=generator).tolist()
    tables: list[list[int]] = [[] for _ in lengths]
    tables[owner] = [free.pop() for _ in range(blocks_needed[owner])]
    for seq, needed in enumerate(blocks_needed):
        if seq != owner:
            own = tables[owner][:shared] if seq == sharer else []
            tables[seq] = own + [free.pop() for _ in range(needed - len(own))]

    holds_token = torch.zeros(num_blocks, block_size, dtype=torch.bool)
    for table, length in zip(tables, lengths):
        for position in range(length):
            holds_token[table[position // block_size], position % block_size] = True
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"))
    v_cache = torch.full(shape, float("nan"))
    k_cache[holds_token] = torch.randn(int(holds_token.sum()), num_kv_heads, head_dim, generator=generator)
    v_cache[holds_token] = torch.randn(int(holds_token.sum()), num_kv_heads, head_dim, generator=generator)

    max_blocks = max(blocks_needed) + 1
    pad = 0 if table_padding == "zero" else num_blocks + INVALID_BLOCK_OFFSET
    block_tables = torch.tensor([table + [pad] * (max_blocks - len(table)) for table in tables], dtype=torch.int32)
    num_seqs = len(lengths)
    queries = (torch.randn(num_seqs, num_q_heads + 2 * num_kv_heads, head_dim, generator=generator) * q_scale).to(dtype)
    # strided: q is the first heads of a fused q/k/v projection's output, as the model hands it over
    q = queries[:, :num_q_heads] if strided_q else queries[:, :num_q_heads].contiguous()
    scale = head_dim ** -0.5 if scale is None else scale
    layout = f", q a strided view (strides {tuple(q.stride())})" if strided_q else ""
    padding = "0" if table_padding == "zero" else "ids outside the pool"
    description = (f"seq_lens {lengths}, {num_q_heads} query / {num_kv_heads} KV heads, head_dim {head_dim}, "
                   f"block_size {block_size}, {str(dtype).replace('torch.', '')}"
                   f"{f', sequences {owner} and {sharer} share {shared} blocks' if shared else ''}, "
                   f"table padded with {padding}{layout}")
    return PagedCase(q, k_cache.to(dtype), v_cache.to(dtype), block_tables, torch.tensor(lengths, dtype=torch.int32),
                     scale, description)


def paged_attention_float64(q, k_cache, v_cache, block_tables, seq_lens, scale, *, kv_head_of=None) -> torch.Tensor:
    """Decode attention in float64 over the tokens of each sequence (never the NaN slots).

    ``kv_head_of(h, num_q_heads, num_kv_heads)`` picks the KV head of query head h (default: GQA's
    ``h // group_size``); the checks pass another mapping to recognize a classic mistake.
    """
    num_seqs, num_q_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    mapping = kv_head_of or (lambda h, heads, kv_heads: h // (heads // kv_heads))
    kv_index = torch.tensor([mapping(h, num_q_heads, num_kv_heads) for h in range(num_q_heads)])
    out = torch.zeros(num_seqs, num_q_heads, head_dim, dtype=torch.float64)
    for seq in range(num_seqs):
        length = int(seq_lens[seq])
        blocks = block_tables[seq, : -(-length // block_size)].long()
        keys = k_cache[blocks].flatten(0, 1)[:length].double()[:, kv_index]  # [length, num_q_heads, head_dim]
        values = v_cache[blocks].flatten(0, 1)[:length].double()[:, kv_index]
        scores = torch.einsum("hd,thd->ht", q[seq].double(), keys) * scale
        out[seq] = torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), values)
    return out


def _sequence_is_close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> list[bool]:
    return [is_close(got[seq], expected[seq], dtype) for seq in range(got.shape[0])]


def _describe_lengths(lengths: list[int], flags: list[bool]) -> tuple[list[int], list[int]]:
    right = [length for length, ok in zip(lengths, flags) if ok]
    wrong = [length for length, ok in zip(lengths, flags) if not ok]
    return right, wrong


def _attention_hint(case: PagedCase, got: torch.Tensor, wrong_seqs: list[int], dtype: torch.dtype,
                    rerun: Callable[[PagedCase], Any] | None) -> str:
    """The most likely cause of a wrong decode-attention output, from which sequences are wrong and how."""
    lengths = [int(length) for length in case.seq_lens]
    block = case.block_size
    num_q_heads, num_kv_heads = case.q.shape[1], case.k_cache.shape[2]
    wrong_lengths = [lengths[seq] for seq in wrong_seqs]
    finite = [bool(torch.isfinite(got[seq]).all()) for seq in range(len(lengths))]
    partial = [seq for seq in range(len(lengths)) if lengths[seq] % block]
    if partial and sorted(wrong_seqs) == partial:
        if not any(finite[seq] for seq in wrong_seqs):
            return (f"NaN for exactly the sequences that end inside a block (lengths {wrong_lengths}; block_size "
                    f"{block}): the kernel read the slots of the last block past seq_len. In this check every such "
                    "slot holds NaN (in a real pool: another request's keys). Mask the K and V loads to positions "
                    "< seq_len (other=0.0) and give those positions a score of -inf before the max and the exp.")
        if all(_matches(got[seq], _last_block_variant(case, seq, "zero scores"), dtype) for seq in wrong_seqs):
            return (f"exactly the sequences that end inside a block are wrong (lengths {wrong_lengths}; block_size "
                    f"{block}), as if their last block's empty slots were tokens with a score of 0: the masked load "
                    "gives k = 0 there, q . k = 0, and exp(0 - max) is not 0. Give positions >= seq_len a score of "
                    "-inf (tl.where(is_token, scores, float('-inf'))) before the max and the exp.")
        if all(_matches(got[seq], _last_block_variant(case, seq, "skipped"), dtype) for seq in wrong_seqs):
            return (f"exactly the sequences that end inside a block are wrong (lengths {wrong_lengths}; block_size "
                    f"{block}), as if their last, partly filled block were never visited: loop over "
                    "cdiv(seq_len, block_size) blocks (rounding up), not seq_len // block_size.")
        return (f"exactly the sequences that end inside a block are wrong (lengths {wrong_lengths}; block_size "
                f"{block}): look at the last block, which holds only seq_len % block_size tokens. Positions >= "
                "seq_len need a score of -inf (a masked load gives 0, and a score of 0 still counts in the "
                "softmax), and the block must be visited (cdiv(seq_len, block_size) blocks, rounding up).")
    if not all(finite[seq] for seq in wrong_seqs):
        return ("NaN in the output: the kernel read a slot that holds no token of the sequence (every such slot holds "
                "NaN in this check), or divided 0 by 0. Mask the K and V loads to positions < seq_len, give those "
                "positions a score of -inf, and visit every block that holds a token.")
    if rerun is not None and case.q.stride(0) != case.q.shape[1] * case.q.shape[2]:
        contiguous = PagedCase(case.q.contiguous(), case.k_cache, case.v_cache, case.block_tables, case.seq_lens,
                               case.scale, case.description)
        again = rerun(contiguous)
        expected = paged_attention_float64(*contiguous.args())
        if isinstance(again, torch.Tensor) and is_close(again, expected, dtype):
            return (f"right for a contiguous q, wrong for this strided view (q.stride() = {tuple(case.q.stride())}): "
                    "in the engine q is a slice of the fused q/k/v projection. Pass q.stride(0) and q.stride(1) to the "
                    "kernel and address q through them.")
    if 1 < num_kv_heads < num_q_heads:
        interleaved = paged_attention_float64(*case.args(), kv_head_of=lambda h, heads, kv_heads: h % kv_heads)
        if is_close(got, interleaved, dtype):
            group = num_q_heads // num_kv_heads
            return (f"query head h read KV head h % {num_kv_heads}; with grouped-query attention it reads KV head "
                    f"h // {group} (heads 0..{group - 1} share KV head 0). The program for KV head g serves query "
                    f"heads g * {group} ... g * {group} + {group - 1}.")
    single_block = [seq for seq in range(len(lengths)) if lengths[seq] <= block]
    if single_block and all(seq not in wrong_seqs for seq in single_block) and \
            all(lengths[seq] > block for seq in wrong_seqs):
        return (f"sequences that fit in one block are right, longer ones are wrong (lengths {sorted(set(wrong_lengths))}): "
                "look at how blocks are combined. When a block raises the running max m, everything accumulated so "
                "far is relative to the old max: multiply BOTH the running sum l and the accumulator acc by "
                "exp(m_old - m_new) before adding the new block's terms. Also check that the block table is read at "
                "the right index for every block.")
    return ("for each (sequence, KV head) program: load the group's queries, walk the block table block by block "
            "(cdiv(seq_len, block_size) blocks), scores = q . k * scale with -inf past seq_len, online softmax "
            "(running max, rescaled sum and accumulator), out = acc / sum.")


def _last_block_variant(case: PagedCase, seq: int, mistake: str) -> torch.Tensor:
    """Sequence ``seq``'s output [num_q_heads, head_dim] in float64 as a kernel with ``mistake`` in its last,
    partly filled block computes it: "zero scores" (its empty slots count as keys and values of 0, so
    scores of 0) or "skipped" (the block is never visited; NaN when that leaves no token)."""
    length, block = int(case.seq_lens[seq]), case.block_size
    num_q_heads, head_dim = case.q.shape[1], case.q.shape[2]
    num_kv_heads = case.k_cache.shape[2]
    kv_index = torch.arange(num_q_heads) // (num_q_heads // num_kv_heads)
    kept = length if mistake == "zero scores" else length // block * block
    blocks = case.block_tables[seq, : -(-length // block)].long()
    keys = case.k_cache[blocks].flatten(0, 1)[:kept].double()[:, kv_index]    # [kept, num_q_heads, head_dim]
    values = case.v_cache[blocks].flatten(0, 1)[:kept].double()[:, kv_index]
    scores = torch.einsum("hd,thd->ht", case.q[seq].double(), keys) * case.scale
    if mistake == "zero scores":
        padding = -(-length // block) * block - length
        scores = torch.cat([scores, torch.zeros(num_q_heads, padding, dtype=torch.float64)], dim=1)
        values = torch.cat([values, torch.zeros(padding, num_q_heads, head_dim, dtype=torch.float64)], dim=0)
    if scores.shape[1] == 0:
        return torch.full((num_q_heads, head_dim), math.nan, dtype=torch.float64)
    return torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), values)


def _matches(got: torch.Tensor, variant: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether ``got`` is what the variant computes (both NaN somewhere counts as a match)."""
    if not torch.isfinite(variant).all():
        return not bool(torch.isfinite(got).all())
    return is_close(got, variant, dtype)


def _check_attention_output(call: str, case: PagedCase, got: Any, dtype: torch.dtype,
                            rerun: Callable[[PagedCase], Any] | None = None, extra_hint: str = "") -> None:
    expected = reference(paged_attention_float64)(*case.args())
    expect_tensor(got, tuple(case.q.shape), dtype, f"the output of {call}",
                  hint="return a new tensor [num_seqs, num_q_heads, head_dim] in q's dtype.")
    flags = _sequence_is_close(got, expected, dtype)
    if all(flags):
        return
    lengths = [int(length) for length in case.seq_lens]
    right, wrong = _describe_lengths(lengths, flags)
    wrong_seqs = [seq for seq, ok in enumerate(flags) if not ok]
    hint = extra_hint or _attention_hint(case, got, wrong_seqs, dtype, rerun)
    fail_mismatch(call, got, expected, dtype, hint,
                  note=f"Wrong: the sequences of lengths {wrong}; right: {right or 'none'}.")


# ---------------------------------------------------------------------------------------------
# Chapter 3: paged decode attention
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_paged_decode_attention(student_attention: Callable, seq_lens: list[int], num_q_heads: int,
                                 num_kv_heads: int, head_dim: int, block_size: int, *, seed: int = 0,
                                 dtype: torch.dtype = torch.float32, table_padding: str = "zero",
                                 strided_q: bool = False, q_scale: float = 1.0, scale: float | None = None,
                                 share_prefix: bool = True) -> None:
    """``paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale)`` on a random paged pool
    (see ``paged_case``) must match float64 attention over each sequence's tokens, launching a kernel."""
    require_own_implementation(student_attention, "paged_decode_attention")
    case = paged_case(seq_lens, num_q_heads, num_kv_heads, head_dim, block_size, seed=seed, dtype=dtype,
                      share_prefix=share_prefix, table_padding=table_padding, strided_q=strided_q, q_scale=q_scale,
                      scale=scale)
    call = f"paged_decode_attention(...) with {case.description}"
    got = call_kernel(student_attention, call, *case.args())

    def rerun(variant: PagedCase):
        return call_kernel(student_attention, call, *variant.args())

    _check_attention_output(call, case, got, dtype, rerun)


def _reference_traffic(seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, bytes_per_element):
    from course_lib.kernels.paged_attention import decode_attention_traffic

    return decode_attention_traffic(seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, bytes_per_element)


@recorded_check
def check_decode_attention_traffic(student_traffic: Callable, seq_lens: list[int], block_size: int, num_q_heads: int,
                                   num_kv_heads: int, head_dim: int, bytes_per_element: float) -> None:
    """``decode_attention_traffic(seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, bytes_per_element)``
    must return ``(paged_kernel_bytes, padded_torch_bytes)`` by the chapter's counting rule."""
    require_own_implementation(student_traffic, "decode_attention_traffic")
    call = (f"decode_attention_traffic({list(seq_lens)}, {block_size}, {num_q_heads}, {num_kv_heads}, {head_dim}, "
            f"{bytes_per_element})")
    got = call_student(student_traffic, call, list(seq_lens), block_size, num_q_heads, num_kv_heads, head_dim,
                       bytes_per_element, show_args=False)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{call} must return a pair (paged_kernel_bytes, padded_torch_bytes)", expected="(number, number)",
             got=got)
    paged, padded = got
    expected_paged, expected_padded = reference(_reference_traffic)(list(seq_lens), block_size, num_q_heads,
                                                                    num_kv_heads, head_dim, bytes_per_element)
    kv_row = num_kv_heads * head_dim * bytes_per_element
    elements_hint = (f"this is the count in elements: times bytes per element ({bytes_per_element:g} here) gives "
                     "the bytes.")
    if not _same(paged, expected_paged):
        hint = ("the kernel reads K and V of each cached token once (2 * sum(seq_lens) * num_kv_heads * head_dim "
                "elements) and reads q / writes the output (2 * num_seqs * num_q_heads * head_dim), all times "
                "bytes per element.")
        slots = sum(-(-int(length) // block_size) * block_size for length in seq_lens)
        if bytes_per_element != 1 and _same(paged, expected_paged / bytes_per_element):
            hint = elements_hint
        elif _same(paged, expected_paged + 2 * (slots - sum(seq_lens)) * kv_row):
            hint = ("you counted whole blocks; the kernel masks the positions past seq_len, and masked lanes are never "
                    "read: count each sequence's seq_len tokens.")
        elif _same(paged, expected_paged * num_q_heads // num_kv_heads):
            hint = "K and V are read once per KV head, not once per query head: a program serves its whole group."
        fail(f"{call}: paged kernel bytes", expected=expected_paged, got=paged, hint=hint)
    if not _same(padded, expected_padded):
        hint = ("every sequence is padded to ceil(max(seq_lens) / block_size) * block_size slots; K and V of those "
                "slots cross memory three times (read from the pool, written to the copy, read by SDPA); plus q "
                "and the output; all times bytes per element.")
        if bytes_per_element != 1 and _same(padded, expected_padded / bytes_per_element):
            hint = elements_hint
        fail(f"{call}: padded torch bytes", expected=expected_padded, got=padded, hint=hint)


def _same(got: Any, expected: float) -> bool:
    try:
        return math.isclose(float(got), float(expected), rel_tol=1e-9)
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------
# Chapter 4: merging splits
# ---------------------------------------------------------------------------------------------


def _merge_inputs(num_seqs: int, num_q_heads: int, num_splits: int, head_dim: int, seed: int, lse_low: float,
                  lse_high: float, empty_splits: bool) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    split_out = torch.randn(num_seqs, num_q_heads, num_splits, head_dim, generator=generator)
    split_lse = lse_low + (lse_high - lse_low) * torch.rand(num_seqs, num_q_heads, num_splits, generator=generator)
    if empty_splits and num_splits > 1:
        # The last splits of the first sequence hold no token (a short sequence): lse -inf, output 0.
        empty = max(1, num_splits // 2)
        split_lse[0, :, num_splits - empty:] = float("-inf")
        split_out[0, :, num_splits - empty:] = 0.0
    return split_out, split_lse


def _merge_float64(split_out: torch.Tensor, split_lse: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(split_lse.double(), dim=-1)  # exp(lse_s) / sum exp(lse): the splits' shares
    return torch.einsum("shp,shpd->shd", weights, split_out.double())


@recorded_check
def check_merge_splits(student_merge: Callable, num_seqs: int, num_q_heads: int, num_splits: int, head_dim: int, *,
                       seed: int = 0, lse_low: float = -5.0, lse_high: float = 5.0, empty_splits: bool = True) -> None:
    """``merge_splits(split_out, split_lse)`` must combine each split's normalized output with weights
    ``exp(lse_s - max lse) / sum``, for log-sum-exps drawn from ``[lse_low, lse_high]`` (and -inf for empty splits)."""
    require_own_implementation(student_merge, "merge_splits")
    split_out, split_lse = _merge_inputs(num_seqs, num_q_heads, num_splits, head_dim, seed, lse_low, lse_high,
                                         empty_splits)
    empty = " (the first sequence's last splits empty: lse -inf)" if empty_splits and num_splits > 1 else ""
    call = (f"merge_splits(split_out [{num_seqs}, {num_q_heads}, {num_splits}, {head_dim}], split_lse in "
            f"[{lse_low:g}, {lse_high:g}]{empty})")
    got = call_kernel(student_merge, call, split_out, split_lse)
    expected = reference(_merge_float64)(split_out, split_lse)
    expect_tensor(got, (num_seqs, num_q_heads, head_dim), torch.float32, f"the output of {call}",
                  hint="return a new float32 tensor [num_seqs, num_q_heads, head_dim].")
    if is_close(got, expected, torch.float32):
        return
    hint = ("out = sum_s w_s * split_out[s] / sum_s w_s with w_s = exp(lse_s - M), M = the largest lse of the row: "
            "each split's output is normalized by its own softmax sum, exp(lse_s) is that sum.")
    finite = torch.isfinite(got)
    if not finite.all():
        if lse_high > 80 or lse_low < -80:
            hint = (f"NaN or inf: exp(lse) overflows float32 above 88 and underflows to 0 below -103; these lse reach "
                    f"{lse_high:g} and {lse_low:g}. Subtract the row's largest lse before exp: every weight is then "
                    "in [0, 1] and the largest is exactly 1.")
        elif not finite[0].all() and finite[1:].all():
            hint = ("NaN only in the sequence with empty splits: an empty split has lse = -inf and weighs exp(-inf) = 0; "
                    "make sure nothing computes -inf - -inf or 0 * inf (mask the padding lanes of the split axis with "
                    "other=-inf for lse and 0.0 for the outputs).")
    elif is_close(got, split_out.double().mean(dim=2), torch.float32):
        hint = "this is the plain average of the splits: weigh each by exp(lse_s - M), its share of the softmax's sum."
    fail_mismatch(call, got, expected, torch.float32, hint)


# ---------------------------------------------------------------------------------------------
# Chapter 4: split-KV decode attention
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_split_kv_decode_attention(student_attention: Callable, seq_lens: list[int], num_q_heads: int,
                                    num_kv_heads: int, head_dim: int, block_size: int, num_splits: int, *,
                                    seed: int = 0, dtype: torch.dtype = torch.float32, table_padding: str = "zero",
                                    strided_q: bool = False, q_scale: float = 1.0) -> None:
    """``split_kv_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits)`` must match
    float64 attention for any number of splits, including more splits than a sequence has blocks."""
    require_own_implementation(student_attention, "split_kv_decode_attention")
    case = paged_case(seq_lens, num_q_heads, num_kv_heads, head_dim, block_size, seed=seed, dtype=dtype,
                      table_padding=table_padding, strided_q=strided_q, q_scale=q_scale)
    call = f"split_kv_decode_attention(..., num_splits={num_splits}) with {case.description}"
    got = call_kernel(student_attention, call, *case.args(), num_splits)

    def rerun(variant: PagedCase, splits: int = num_splits):
        return call_kernel(student_attention, call, *variant.args(), splits)

    expected = paged_attention_float64(*case.args())
    extra_hint = ""
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and not is_close(got, expected, dtype) \
            and num_splits > 1:
        one_split = rerun(case, 1)
        if isinstance(one_split, torch.Tensor) and is_close(one_split, expected, dtype):
            if _per_split_rounds_down(student_attention, call, case, num_splits, dtype):
                extra_hint = (f"right with num_splits=1, wrong with more: the splits skip blocks at the end. With "
                              f"{2 * num_splits - 1} blocks and {num_splits} splits your kernel reads only the first "
                              f"{num_splits}: the blocks per split were rounded down. per_split = cdiv(num_blocks, "
                              "num_splits) (rounding up) makes the ranges cover every block exactly once; a split "
                              "whose range starts past the last block is then empty.")
            elif not torch.isfinite(got).all():
                extra_hint = ("right with num_splits=1, NaN with more splits: a split past the end of a short sequence "
                              "holds no token. It must write output 0 and lse -inf, and the merge must give it weight 0 "
                              "(never 0 / 0 or -inf - -inf).")
            else:
                extra_hint = ("right with num_splits=1, wrong with more: check each split's range of blocks. With "
                              "per_split = cdiv(num_blocks, num_splits), split s owns blocks s * per_split up to "
                              "min((s + 1) * per_split, num_blocks), end excluded: together every block exactly once. "
                              "Then check the merge (weights exp(lse_s - max lse), outputs normalized per split).")
    _check_attention_output(call, case, got, dtype, rerun, extra_hint)


def _per_split_rounds_down(student_attention: Callable, call: str, case: PagedCase, num_splits: int,
                           dtype: torch.dtype) -> bool:
    """Whether the student's split kernel reads only the first ``num_splits * (num_blocks // num_splits)`` blocks.

    Runs it on one sequence of ``2 * num_splits - 1`` full blocks: rounding up gives every split 2 blocks
    but the last (1), so no split is empty; rounding down gives each split 1 block and skips the rest.
    """
    block = case.block_size
    probe = paged_case([(2 * num_splits - 1) * block], case.q.shape[1], case.k_cache.shape[2], case.q.shape[2], block,
                       seed=99, dtype=dtype)
    got = call_kernel(student_attention, f"{call} (diagnosis: one sequence of {2 * num_splits - 1} full blocks)",
                      *probe.args(), num_splits)
    if not isinstance(got, torch.Tensor) or got.shape != probe.q.shape or is_close(got, paged_attention_float64(
            *probe.args()), dtype):
        return False
    truncated = torch.tensor([num_splits * block], dtype=torch.int32)
    return is_close(got, paged_attention_float64(probe.q, probe.k_cache, probe.v_cache, probe.block_tables, truncated,
                                                 probe.scale), dtype)


# ---------------------------------------------------------------------------------------------
# Chapter 4: when to split
# ---------------------------------------------------------------------------------------------


def _reference_choose(num_seqs: int, num_kv_heads: int, max_context_len: int, num_sms: int) -> int:
    from course_lib.kernels.paged_attention import choose_num_splits

    return choose_num_splits(num_seqs, num_kv_heads, max_context_len, num_sms)


@recorded_check
def check_choose_num_splits(student_choose: Callable, cases: list[tuple[int, int, int, int]]) -> None:
    """``choose_num_splits(num_seqs, num_kv_heads, max_context_len, num_sms)`` must follow the chapter's rule
    for every ``(num_seqs, num_kv_heads, max_context_len, num_sms)`` in ``cases``."""
    require_own_implementation(student_choose, "choose_num_splits")
    for num_seqs, num_kv_heads, max_context_len, num_sms in cases:
        call = f"choose_num_splits({num_seqs}, {num_kv_heads}, {max_context_len}, {num_sms})"
        got = call_student(student_choose, call, num_seqs, num_kv_heads, max_context_len, num_sms, show_args=False)
        expected = reference(_reference_choose)(num_seqs, num_kv_heads, max_context_len, num_sms)
        programs = num_seqs * num_kv_heads
        hint = (f"wanted = {4} * {num_sms} // {programs} splits still fit in one wave of the GPU's slots, useful = "
                f"{max_context_len} // 256 splits still read 256 tokens each; take max(1, min(wanted, useful, 32)).")
        if isinstance(got, int) and not isinstance(got, bool) and got < 1 and expected == 1:
            hint = (f"{got} splits would launch no program at all for this batch: every split would be empty and the "
                    "decode would compute nothing. When min(wanted, useful, 32) is 0 (the plain grid already fills "
                    "the GPU, or the context is shorter than one split's 256 tokens) the answer is 1 split: take "
                    "max(1, ...).")
        expect_equal(got, expected, call, hint=hint)


# ---------------------------------------------------------------------------------------------
# Chapter 4: the store kernel
# ---------------------------------------------------------------------------------------------


def _store_case(num_tokens: int, num_kv_heads: int, head_dim: int, block_size: int, num_blocks: int, seed: int,
                padding: bool, strided: bool, dtype: torch.dtype):
    generator = torch.Generator().manual_seed(seed)
    num_slots = num_blocks * block_size
    if num_tokens > num_slots:
        raise ValueError(f"num_tokens ({num_tokens}) must fit in the pool's {num_slots} slots")
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    # Half of the pool already holds other tokens' keys, the other half NaN: both must survive untouched.
    k_cache = torch.randn(shape, generator=generator)
    v_cache = torch.randn(shape, generator=generator)
    unused = torch.rand(num_blocks, block_size, generator=generator) < 0.5
    k_cache[unused] = float("nan")
    v_cache[unused] = float("nan")
    slots = torch.randperm(num_slots, generator=generator)[:num_tokens]
    if padding and num_tokens >= 3:
        slots[torch.randperm(num_tokens, generator=generator)[: max(1, num_tokens // 4)]] = -1
    fused = torch.randn(num_tokens, 3 * num_kv_heads, head_dim, generator=generator)
    if strided:  # k and v as slices of a fused projection's output, as the model hands them over
        k, v = fused.to(dtype)[:, num_kv_heads:2 * num_kv_heads], fused.to(dtype)[:, 2 * num_kv_heads:]
    else:
        k, v = fused[:, num_kv_heads:2 * num_kv_heads].contiguous(), fused[:, 2 * num_kv_heads:].contiguous()
    return k.to(dtype), v.to(dtype), k_cache.to(dtype), v_cache.to(dtype), slots.long()


def _store_float64(k, v, k_cache, v_cache, slot_mapping):
    from course_lib.kernels.paged_attention import store_kv_ref

    return store_kv_ref(k, v, k_cache.clone(), v_cache.clone(), slot_mapping)


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as integers (so NaN == NaN and -0.0 != 0.0)."""
    return tensor.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


@recorded_check
def check_store_kv(student_store: Callable, num_tokens: int, num_kv_heads: int, head_dim: int, block_size: int,
                   num_blocks: int, *, seed: int = 0, padding: bool = True, strided: bool = False,
                   dtype: torch.dtype = torch.float32) -> None:
    """``store_kv(k, v, k_cache, v_cache, slot_mapping)`` must write token i's key and value into slot
    ``slot_mapping[i]`` (skipping -1), change nothing else (bit for bit, NaN included), write in place, and
    return ``(k_cache, v_cache)``."""
    require_own_implementation(student_store, "store_kv")
    k, v, k_cache, v_cache, slot_mapping = _store_case(num_tokens, num_kv_heads, head_dim, block_size, num_blocks,
                                                       seed, padding, strided, dtype)
    skipped = int((slot_mapping < 0).sum())
    layout = ", k and v strided views of a fused projection" if strided else ""
    call = (f"store_kv(k, v, k_cache, v_cache, slot_mapping) for {num_tokens} tokens ({skipped} with slot -1) into "
            f"{num_blocks} blocks of {block_size}, {num_kv_heads} KV heads of {head_dim}"
            f", {str(dtype).replace('torch.', '')}{layout}")
    expected_k, expected_v = reference(_store_float64)(k, v, k_cache, v_cache, slot_mapping)
    k_cache_in, v_cache_in = k_cache.clone(), v_cache.clone()
    try:
        got = call_kernel(student_store, call, k, v, k_cache_in, v_cache_in, slot_mapping.clone(), copy_args=False)
    except CheckFailed as error:
        if not skipped or "OutOfBoundsAccess" not in str(error):
            raise
        summary = str(error).split("\n  hint:")[0]
        raise CheckFailed(f"{summary}\n  hint: {skipped} tokens have slot -1, which means 'do not store' (padding): "
                          "skip them (if slot >= 0: ...). Stored anyway, -1 // block_size is 0 and -1 % block_size is "
                          "-1 in Triton's integer arithmetic, one slot before the start of the cache.") from error
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{call} must return (k_cache, v_cache)", expected="(Tensor, Tensor)", got=type(got).__name__,
             hint="write into the caches you were given and return them: return k_cache, v_cache.")
    got_k, got_v = got
    for name, tensor in (("k_cache", got_k), ("v_cache", got_v)):
        expect_tensor(tensor, tuple(k_cache.shape), dtype, f"the {name} returned by {call}")
    if not is_remote(student_store) and (got_k.data_ptr() != k_cache_in.data_ptr()
                                         or got_v.data_ptr() != v_cache_in.data_ptr()):
        fail(f"{call} returned new tensors instead of writing into the caches it was given", show_values=False,
             hint="the engine keeps using the caches it passed: store into them (in place) and return them.")
    slots = slot_mapping[slot_mapping >= 0]
    written = torch.zeros(num_blocks, block_size, dtype=torch.bool)
    written[slots // block_size, slots % block_size] = True
    for name, result, expected, source in (("k_cache", got_k, expected_k, k), ("v_cache", got_v, expected_v, v)):
        changed = (_bits(result) != _bits(expected)).flatten(2).any(dim=2)  # [num_blocks, block_size]
        if not changed.any():
            continue
        stray = changed & ~written
        if stray.any():
            block, offset = (int(i) for i in stray.nonzero()[0])
            fail(f"{call}: {int(stray.sum())} slots of {name} that no token maps to were changed, e.g. block {block} "
                 f"offset {offset}", show_values=False,
                 hint="only the slots in slot_mapping may change; a slot of -1 means 'do not store this token' "
                      "(a padding token), skip it.")
        block, offset = (int(i) for i in changed.nonzero()[0])
        token = int(((slot_mapping == block * block_size + offset).nonzero())[0])
        hint = ("token i goes to block slot // block_size, offset slot % block_size, all its heads and dims: "
                "address = cache_ptr + block * stride(0) + offset * stride(1) + head * stride(2) + dim.")
        other = v if source is k else k
        if torch.equal(_bits(result[block, offset]), _bits(other[token])):
            hint = "the keys and the values are swapped."
        elif strided:
            again = call_kernel(student_store, call, k.contiguous(), v.contiguous(), k_cache.clone(), v_cache.clone(),
                                slot_mapping.clone(), copy_args=False)
            if isinstance(again, (tuple, list)) and len(again) == 2 and all(
                    isinstance(t, torch.Tensor) and t.shape == e.shape and torch.equal(_bits(t), _bits(e))
                    for t, e in zip(again, (expected_k, expected_v))):
                hint = (f"right for contiguous k and v, wrong for these strided views (k.stride() = "
                        f"{tuple(k.stride())}): find token i's row at k_ptr + i * k.stride(0) + head * k.stride(1), "
                        "passing the strides to the kernel.")
        fail(f"{call}: {name}[{block}, {offset}] should hold token {token}'s values", expected=expected[block, offset,
             0, :4].tolist(), got=result[block, offset, 0, :4].tolist(), hint=hint)
