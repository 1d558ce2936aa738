"""Tests of course_lib.kernels.paged_attention: the Triton kernels against their torch references.

On a machine without CUDA the kernels run under Triton's interpreter (``course_lib.kernels`` turns it
on), so every test below except the ``gpu`` ones runs on a CPU, at small sizes.

Tolerances, per dtype of the inputs (the reference computes in fp32 from the same inputs): the course's
one table, ``course_lib.kernels.tolerances``, which the Lab 0.3 checks and the GPU cells use too (its
docstring says why each number). The GPU tests compute the reference inside ``full_fp32_matmul()``, so
neither side multiplies float32 in TF32.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import course_lib.kernels  # noqa: F401  (decides TRITON_INTERPRET before Triton kernels are defined)
from course_lib.kernels import paged_attention as pa
from course_lib.kernels import tolerances
from course_lib.kernels.paged_attention import (
    choose_num_splits,
    gather_sequence_kv,
    paged_decode_attention,
    paged_decode_attention_ref,
    store_kv,
    store_kv_ref,
)

TOLERANCES = {dtype: tolerance.as_kwargs() for dtype, tolerance in tolerances.TOLERANCES.items()}
SEQ_LENS = (1, 15, 16, 17, 100)  # one token; one short of a block of 16; exactly one; one over; many
GARBAGE_BLOCK_ID = 1_000_000  # fills block-table entries past a sequence's end: never dereferenced
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# ---------------------------------------------------------------------------------------------
# Helpers: build a paged pool that holds given logical keys and values.
# ---------------------------------------------------------------------------------------------


def random_logical_kv(seq_lens, num_kv_heads, head_dim, dtype, seed=0, device="cpu"):
    """Per sequence, contiguous keys and values ``[seq_len, num_kv_heads, head_dim]``."""
    generator = torch.Generator().manual_seed(seed)
    keys = [torch.randn(n, num_kv_heads, head_dim, generator=generator).to(dtype) for n in seq_lens]
    values = [torch.randn(n, num_kv_heads, head_dim, generator=generator).to(dtype) for n in seq_lens]
    return [k.to(device) for k in keys], [v.to(device) for v in values]


def build_paged_pool(keys, values, block_size, seed=0, spare_blocks=3, device="cpu"):
    """Scatter logical K/V into a pool through random (shuffled, non-contiguous) block tables.

    Every slot the sequences do not use holds NaN, and table entries past a sequence's last block
    hold a block id far outside the pool: a kernel that reads either returns NaN or crashes.

    Returns:
        k_cache, v_cache ``[num_blocks, block_size, num_kv_heads, head_dim]``,
        block_tables ``[num_seqs, max_blocks]`` int32, seq_lens ``[num_seqs]`` int32.
    """
    generator = torch.Generator().manual_seed(seed)
    seq_lens = [k.shape[0] for k in keys]
    blocks_needed = [math.ceil(n / block_size) for n in seq_lens]
    num_blocks = sum(blocks_needed) + spare_blocks
    max_blocks = max(blocks_needed) + 2  # longer rows than needed, as an engine pads them
    _, num_kv_heads, head_dim = keys[0].shape
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=keys[0].dtype, device=device)
    v_cache = torch.full(shape, float("nan"), dtype=keys[0].dtype, device=device)
    block_tables = torch.full((len(keys), max_blocks), GARBAGE_BLOCK_ID, dtype=torch.int32)
    free_blocks = torch.randperm(num_blocks, generator=generator).tolist()
    for seq_index, (seq_keys, seq_values) in enumerate(zip(keys, values)):
        for logical_block in range(blocks_needed[seq_index]):
            block_id = free_blocks.pop()
            block_tables[seq_index, logical_block] = block_id
            start = logical_block * block_size
            stop = min(start + block_size, seq_lens[seq_index])
            k_cache[block_id, : stop - start] = seq_keys[start:stop]
            v_cache[block_id, : stop - start] = seq_values[start:stop]
    seq_lens_tensor = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    return k_cache, v_cache, block_tables.to(device), seq_lens_tensor


def random_query(num_seqs, num_q_heads, head_dim, dtype, seed=1, device="cpu"):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(num_seqs, num_q_heads, head_dim, generator=generator).to(dtype).to(device)


@pytest.fixture
def poisoned_scratch(monkeypatch):
    """Split-KV scratch filled with NaN, so a partial result the kernel forgot to write shows up."""
    allocate = pa._allocate_partials

    def allocate_poisoned(*args, **kwargs):
        return tuple(t.fill_(float("nan")) for t in allocate(*args, **kwargs))

    monkeypatch.setattr(pa, "_allocate_partials", allocate_poisoned)


def run_kernel(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits):
    """The kernel, writing into an output poisoned with NaN (unwritten elements stay NaN)."""
    out = torch.full_like(q, float("nan"))
    result = paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits, out=out)
    assert result is out
    return out


# ---------------------------------------------------------------------------------------------
# The reference against an outside oracle.
# ---------------------------------------------------------------------------------------------


def test_reference_matches_torch_sdpa():
    """paged_decode_attention_ref == torch's scaled_dot_product_attention on the gathered K/V."""
    num_q_heads, num_kv_heads, head_dim, block_size = 9, 3, 64, 16
    keys, values = random_logical_kv(SEQ_LENS, num_kv_heads, head_dim, torch.float32)
    k_cache, v_cache, block_tables, seq_lens = build_paged_pool(keys, values, block_size)
    q = random_query(len(SEQ_LENS), num_q_heads, head_dim, torch.float32)
    scale = head_dim**-0.5
    out = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, scale)
    for seq_index in range(len(SEQ_LENS)):
        # SDPA layout: [batch, heads, length, head_dim]; the decode query attends to every key.
        expected = F.scaled_dot_product_attention(
            q[seq_index][None, :, None, :],
            keys[seq_index].transpose(0, 1)[None],
            values[seq_index].transpose(0, 1)[None],
            scale=scale,
            enable_gqa=True,
        )[0, :, 0, :]
        torch.testing.assert_close(out[seq_index], expected, **TOLERANCES[torch.float32])


def test_gather_sequence_kv_follows_the_block_table():
    keys, values = random_logical_kv([37], 2, 8, torch.float32)
    k_cache, v_cache, block_tables, _ = build_paged_pool(keys, values, block_size=16)
    gathered_k, gathered_v = gather_sequence_kv(k_cache, v_cache, block_tables[0], 37)
    assert torch.equal(gathered_k, keys[0]) and torch.equal(gathered_v, values[0])


# ---------------------------------------------------------------------------------------------
# The kernel against the reference, on the interpreter (CPU) or a GPU.
# ---------------------------------------------------------------------------------------------

# Every value of every axis, and every pair of values of any two axes, appears in these 8 cases
# (a covering array): the full product would be 32 interpreter runs for little more coverage.
# Each case runs one batch holding all of SEQ_LENS.
KERNEL_CASES = [
    # (num_q_heads, num_kv_heads), head_dim, block_size, num_splits
    ((9, 3), 64, 16, 1),
    ((9, 3), 128, 32, 4),
    ((4, 4), 64, 32, 4),
    ((4, 4), 128, 16, 1),
    ((8, 2), 64, 16, 4),
    ((8, 2), 128, 32, 1),
    ((5, 1), 64, 32, 1),
    ((5, 1), 128, 16, 4),
]


@pytest.mark.parametrize("heads, head_dim, block_size, num_splits", KERNEL_CASES)
def test_kernel_matches_reference(heads, head_dim, block_size, num_splits, poisoned_scratch):
    num_q_heads, num_kv_heads = heads
    keys, values = random_logical_kv(SEQ_LENS, num_kv_heads, head_dim, torch.float32, seed=head_dim)
    k_cache, v_cache, block_tables, seq_lens = build_paged_pool(keys, values, block_size, seed=block_size)
    q = random_query(len(SEQ_LENS), num_q_heads, head_dim, torch.float32)
    scale = head_dim**-0.5
    out = run_kernel(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits)
    expected = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, scale)
    torch.testing.assert_close(out, expected, **TOLERANCES[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kernel_half_precision(dtype, poisoned_scratch):
    keys, values = random_logical_kv(SEQ_LENS, 3, 64, dtype)
    k_cache, v_cache, block_tables, seq_lens = build_paged_pool(keys, values, block_size=16)
    q = random_query(len(SEQ_LENS), 9, 64, dtype)
    out = run_kernel(q, k_cache, v_cache, block_tables, seq_lens, 0.125, num_splits=2)
    expected = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, 0.125)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected.float(), **TOLERANCES[dtype])


def test_same_kv_with_two_block_sizes_gives_the_same_result():
    """The kernel walks positions in tiles whatever the block size, so the arithmetic is identical."""
    keys, values = random_logical_kv(SEQ_LENS, 2, 64, torch.float32)
    q = random_query(len(SEQ_LENS), 8, 64, torch.float32)
    outputs = []
    for block_size, seed in ((16, 3), (32, 4)):
        pool = build_paged_pool(keys, values, block_size, seed=seed)
        outputs.append(run_kernel(q, *pool, 0.125, num_splits=1))
    torch.testing.assert_close(outputs[0], outputs[1], atol=0, rtol=0)


def test_empty_splits_and_empty_sequences(poisoned_scratch):
    """More splits than tiles leaves some splits empty; a sequence of length 0 gives zeros."""
    keys, values = random_logical_kv([3, 70], 1, 64, torch.float32)
    k_cache, v_cache, block_tables, seq_lens = build_paged_pool(keys, values, block_size=16)
    q = random_query(3, 2, 64, torch.float32)
    block_tables = torch.cat([block_tables, block_tables[:1]])
    seq_lens = torch.tensor([3, 70, 0], dtype=torch.int32)
    expected = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, 0.125)
    for num_splits in (1, 8):
        out = run_kernel(q, k_cache, v_cache, block_tables, seq_lens, 0.125, num_splits)
        torch.testing.assert_close(out, expected, **TOLERANCES[torch.float32])
        assert torch.equal(out[2], torch.zeros_like(out[2]))


def test_strided_inputs_and_default_splits(poisoned_scratch):
    """q sliced out of a fused qkv tensor, caches that are one layer of a bigger tensor, no num_splits."""
    num_q_heads, num_kv_heads, head_dim = 4, 2, 32
    keys, values = random_logical_kv([5, 40], num_kv_heads, head_dim, torch.float32)
    k_cache, v_cache, block_tables, seq_lens = build_paged_pool(keys, values, block_size=8)
    all_layers_k = torch.stack([torch.zeros_like(k_cache), k_cache])  # [layers, num_blocks, ...]
    all_layers_v = torch.stack([torch.zeros_like(v_cache), v_cache])
    qkv = random_query(2, num_q_heads + 2 * num_kv_heads, head_dim, torch.float32)
    q = qkv[:, :num_q_heads]  # not contiguous: stride(0) covers the k and v heads too
    out = paged_decode_attention(q, all_layers_k[1], all_layers_v[1], block_tables, seq_lens, 0.2)
    expected = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, 0.2)
    torch.testing.assert_close(out, expected, **TOLERANCES[torch.float32])


def test_choose_num_splits_rule():
    h100_sms = 132
    assert choose_num_splits(1, 8, 8192, h100_sms) == 32  # tiny grid, long context: split a lot
    assert choose_num_splits(1, 8, 512, h100_sms) == 2  # short context caps the splits
    assert choose_num_splits(1, 8, 255, h100_sms) == 1  # under one split's worth of tokens
    assert choose_num_splits(8, 8, 8192, h100_sms) == 8  # 64 programs: 8 splits still fit in one wave
    assert choose_num_splits(64, 8, 4096, h100_sms) == 1  # 2 splits would need a second wave
    assert choose_num_splits(256, 8, 8192, h100_sms) == 1  # the grid already fills the device
    assert choose_num_splits(1, 1, 10**6, h100_sms) == pa.AUTO_MAX_SPLITS


# ---------------------------------------------------------------------------------------------
# store_kv.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_store_kv_matches_reference(dtype):
    num_blocks, block_size, num_kv_heads, head_dim, num_tokens = 6, 16, 3, 64, 20
    generator = torch.Generator().manual_seed(0)
    qkv = torch.randn(num_tokens, 9 + 2 * num_kv_heads, head_dim, generator=generator).to(dtype)
    k = qkv[:, 9 : 9 + num_kv_heads]  # strided, as the engine slices them out of a fused projection
    v = qkv[:, 9 + num_kv_heads :]
    slots = torch.randperm(num_blocks * block_size, generator=generator)[:num_tokens]
    slots[[2, 7, 19]] = -1  # padding tokens: must not be stored
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    caches = [torch.full(shape, float("nan"), dtype=dtype) for _ in range(4)]
    store_kv(k, v, caches[0], caches[1], slots)
    store_kv_ref(k, v, caches[2], caches[3], slots)
    torch.testing.assert_close(caches[0], caches[2], atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(caches[1], caches[3], atol=0, rtol=0, equal_nan=True)
    kept = slots >= 0
    stored_k = caches[0][slots[kept] // block_size, slots[kept] % block_size]
    assert torch.equal(stored_k, k[kept])
    untouched_slots = num_blocks * block_size - int(kept.sum())
    assert int(caches[0].isnan().sum()) == untouched_slots * num_kv_heads * head_dim


def test_store_then_attend_equals_attention_over_logical_kv():
    """Filling a pool token by token with store_kv, then attending, matches SDPA on the raw K/V."""
    num_q_heads, num_kv_heads, head_dim, block_size, seq_len = 6, 2, 16, 4, 11
    keys, values = random_logical_kv([seq_len], num_kv_heads, head_dim, torch.float32)
    shape = (5, block_size, num_kv_heads, head_dim)
    k_cache, v_cache = torch.zeros(shape), torch.zeros(shape)
    block_table = torch.tensor([[3, 0, 4]], dtype=torch.int32)
    positions = torch.arange(seq_len)
    slots = block_table[0, positions // block_size].long() * block_size + positions % block_size
    store_kv(keys[0], values[0], k_cache, v_cache, slots)
    q = random_query(1, num_q_heads, head_dim, torch.float32)
    seq_lens = torch.tensor([seq_len], dtype=torch.int32)
    out = paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens, 0.25)
    expected = F.scaled_dot_product_attention(
        q[0][:, None], keys[0].transpose(0, 1), values[0].transpose(0, 1), scale=0.25, enable_gqa=True
    )[:, 0]
    torch.testing.assert_close(out[0], expected, **TOLERANCES[torch.float32])


# ---------------------------------------------------------------------------------------------
# Clear errors before launch.
# ---------------------------------------------------------------------------------------------


def _valid_attention_args():
    keys, values = random_logical_kv([5, 9], 2, 16, torch.float32)
    k_cache, v_cache, block_tables, seq_lens = build_paged_pool(keys, values, block_size=4)
    q = random_query(2, 4, 16, torch.float32)
    return dict(
        q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, seq_lens=seq_lens, scale=0.25
    )


ATTENTION_ERRORS = [
    # (argument to replace, how, exception, words the message must contain)
    ("q", lambda a: a["q"][0], ValueError, "q must be 3-D"),
    ("q", lambda a: a["q"].double(), TypeError, "q must be float16, bfloat16 or float32"),
    ("q", lambda a: a["q"].half(), TypeError, "share one dtype"),
    ("q", lambda a: a["q"][:, :3], ValueError, "multiple of num_kv_heads"),
    ("q", lambda a: a["q"][..., :8], ValueError, "head_dim"),
    ("q", lambda a: a["q"].numpy(), TypeError, "q must be a torch.Tensor"),
    ("v_cache", lambda a: a["v_cache"][:-1], ValueError, "v_cache must have shape"),
    ("k_cache", lambda a: a["k_cache"][0], ValueError, "k_cache must be 4-D"),
    ("block_tables", lambda a: a["block_tables"].long(), TypeError, "block_tables must be int32"),
    ("block_tables", lambda a: a["block_tables"][:1], ValueError, "block_tables must have shape"),
    ("seq_lens", lambda a: a["seq_lens"][:1], ValueError, "seq_lens must have shape"),
    ("seq_lens", lambda a: a["seq_lens"].long(), TypeError, "seq_lens must be int32"),
    ("scale", lambda a: -1.0, ValueError, "scale must be a finite number > 0"),
    ("scale", lambda a: torch.tensor(0.25), TypeError, "scale must be a Python float"),
    ("num_splits", lambda a: 0, ValueError, "num_splits must be in"),
    ("num_splits", lambda a: 2.0, TypeError, "num_splits must be None or an int"),
]


@pytest.mark.parametrize("name, corrupt, error, words", ATTENTION_ERRORS)
def test_attention_rejects_bad_input(name, corrupt, error, words):
    args = _valid_attention_args()
    args[name] = corrupt(args)
    for function in (paged_decode_attention, paged_decode_attention_ref):
        if name == "num_splits" and function is paged_decode_attention_ref:
            continue
        with pytest.raises(error, match=words):
            function(**args)


def test_attention_rejects_a_non_contiguous_last_dimension():
    args = _valid_attention_args()
    args["q"] = args["q"].transpose(1, 2).contiguous().transpose(1, 2)  # same shape, stride(-1) != 1
    with pytest.raises(ValueError, match="q must be contiguous in its last dimension"):
        paged_decode_attention(**args)


def test_attention_rejects_an_out_of_the_wrong_shape():
    args = _valid_attention_args()
    with pytest.raises(ValueError, match="out must have shape"):
        paged_decode_attention(**args, out=torch.empty(2, 4, 8))


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setattr(pa, "RUNS_ON_INTERPRETER", False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        paged_decode_attention(**_valid_attention_args())


STORE_ERRORS = [
    ("slot_mapping", lambda a: a["slot_mapping"].int(), TypeError, "slot_mapping must be int64"),
    ("slot_mapping", lambda a: a["slot_mapping"][:2], ValueError, "slot_mapping must have shape"),
    ("k", lambda a: a["k"][:, :1], ValueError, "k must have shape"),
    ("v", lambda a: a["v"].half(), TypeError, "share one dtype"),
    ("k", lambda a: a["k"][0], ValueError, "k must be 3-D"),
    ("k_cache", lambda a: a["k_cache"][0], ValueError, "k_cache must be 4-D"),
]


@pytest.mark.parametrize("name, corrupt, error, words", STORE_ERRORS)
def test_store_kv_rejects_bad_input(name, corrupt, error, words):
    args = dict(
        k=torch.zeros(3, 2, 16),
        v=torch.zeros(3, 2, 16),
        k_cache=torch.zeros(4, 4, 2, 16),
        v_cache=torch.zeros(4, 4, 2, 16),
        slot_mapping=torch.tensor([0, 5, -1]),
    )
    args[name] = corrupt(args)
    for function in (store_kv, store_kv_ref):
        with pytest.raises(error, match=words):
            function(**args)


def test_importing_the_kernels_is_quiet_and_picks_the_backend():
    """On a machine without CUDA the import turns on the interpreter, printing no warning."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (
        "import os, course_lib.kernels.paged_attention as pa, torch; "
        "print(os.environ.get('TRITON_INTERPRET'), pa.RUNS_ON_INTERPRETER, torch.cuda.is_available())"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    interpret, runs_on_interpreter, has_cuda = result.stdout.split()
    if has_cuda == "True":
        assert (interpret, runs_on_interpreter) == ("None", "False")
    else:
        assert (interpret, runs_on_interpreter) == ("1", "True")


# ---------------------------------------------------------------------------------------------
# The benchmark script, in its CPU dry-run mode.
# ---------------------------------------------------------------------------------------------


def test_benchmark_dry_run(tmp_path, capsys):
    """The benchmark end to end at toy sizes (it asserts the kernel against the reference itself).

    At context 20, SmolLM2's shape needs 0.07 MiB at batch 1 and 0.14 MiB at batch 2: a budget of
    0.1 MiB gives one measured row and one skipped.
    """
    report = tmp_path / "report.md"
    argv = ["--dry-run", "--shapes", "smollm2", "--batches", "1", "2", "--contexts", "20"]
    argv += ["--memory-budget-gib", str(0.1 / 1024), "--out", str(report)]
    from course_lib.commands.bench import load_benchmark  # what `course bench kernel` runs

    assert load_benchmark("kernel").main(argv) == 0
    text = report.read_text()
    assert "DRY RUN" in text and "meaningless" in text
    table_rows = [line for line in text.splitlines() if line.startswith("| SmolLM2")]
    assert len(table_rows) == 2
    assert "skipped" not in table_rows[0] and "skipped" in table_rows[1]
    assert "gather+SDPA" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# GPU only: larger shapes, half precision, pools past 2**31 elements, the engine.
# ---------------------------------------------------------------------------------------------


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads, head_dim", [((32, 8), 128), ((9, 3), 64)])
@pytest.mark.parametrize("num_splits", [None, 1, 7])
def test_gpu_larger_shapes(dtype, heads, head_dim, num_splits, poisoned_scratch):
    num_q_heads, num_kv_heads = heads
    seq_lens = [1, 16, 17, 255, 1000, 3001, 4096, 77]
    keys, values = random_logical_kv(seq_lens, num_kv_heads, head_dim, dtype, device="cuda")
    pool = build_paged_pool(keys, values, block_size=16, device="cuda")
    q = random_query(len(seq_lens), num_q_heads, head_dim, dtype, device="cuda")
    out = run_kernel(q, *pool, head_dim**-0.5, num_splits)
    with tolerances.full_fp32_matmul():
        expected = paged_decode_attention_ref(q, *pool, head_dim**-0.5)
    torch.testing.assert_close(out.float(), expected.float(), **TOLERANCES[dtype])


@gpu
@pytest.mark.gpu
def test_gpu_pool_larger_than_2_to_the_31_elements():
    """Blocks at the far end of a pool of > 2**31 elements: their offsets need int64 arithmetic."""
    block_size, num_kv_heads, head_dim = 16, 8, 128
    elements_per_block = block_size * num_kv_heads * head_dim
    num_blocks = 2**31 // elements_per_block + 64  # 4.3 GB per fp16 cache
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.zeros(shape, dtype=torch.float16, device="cuda")
    v_cache = torch.zeros(shape, dtype=torch.float16, device="cuda")
    seq_len = 40
    keys, values = random_logical_kv([seq_len], num_kv_heads, head_dim, torch.float16, device="cuda")
    last_blocks = [num_blocks - 1, num_blocks - 3, num_blocks - 2]  # offsets beyond 2**31 elements
    block_table = torch.tensor([last_blocks], dtype=torch.int32, device="cuda")
    positions = torch.arange(seq_len, device="cuda")
    slots = block_table[0, positions // block_size].long() * block_size + positions % block_size
    store_kv(keys[0], values[0], k_cache, v_cache, slots)
    gathered_k, _ = gather_sequence_kv(k_cache, v_cache, block_table[0], seq_len)
    assert torch.equal(gathered_k, keys[0])
    q = random_query(1, 32, head_dim, torch.float16, device="cuda")
    seq_lens = torch.tensor([seq_len], dtype=torch.int32, device="cuda")
    out = paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens, head_dim**-0.5)
    with tolerances.full_fp32_matmul():
        expected = paged_decode_attention_ref(q, k_cache, v_cache, block_table, seq_lens, head_dim**-0.5)
    torch.testing.assert_close(out.float(), expected.float(), **TOLERANCES[torch.float16])


def _greedy_with_transformers(hf_model, prompt_ids, num_tokens):
    """Greedy continuation by transformers, one full forward per token (no cache to disagree with)."""
    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(num_tokens):
            logits = hf_model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    return ids[len(prompt_ids) :]


@pytest.mark.slow
def test_engine_with_triton_backend_matches_torch_backend_on_the_cpu(smollm2, monkeypatch):
    """The engine's wiring of the kernels, on the interpreter: greedy tokens as the torch backend's.

    (The torch backend is itself checked against transformers in the engine's tests.) Two tokens
    each: the first comes from the prefill, whose K/V store_kv writes; the second from one decode
    step of the whole batch through paged_decode_attention, in all 30 layers. Every interpreted
    program costs milliseconds, hence so few.
    """
    from course_lib.engine import LLMEngine
    from course_lib.sampling import SamplingParams

    model, tokenizer = smollm2
    if model.device.type != "cpu" or not pa.RUNS_ON_INTERPRETER:
        pytest.skip("checks the interpreted kernels on the CPU; the GPU test below covers a GPU")
    calls = {"paged_decode_attention": 0, "store_kv": 0}
    for name in calls:  # count calls, so a silent fallback to the torch path cannot pass
        kernel = getattr(pa, name)

        def counted(*args, _kernel=kernel, _name=name, **kwargs):
            calls[_name] += 1
            return _kernel(*args, **kwargs)

        monkeypatch.setattr(pa, name, counted)
    prompts = ["The capital of France is", "def fibonacci(n):"]
    params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
    outputs = {
        backend: LLMEngine(model, tokenizer, attention_backend=backend).generate(prompts, params)
        for backend in ("torch", "triton")
    }
    for with_torch, with_triton in zip(outputs["torch"], outputs["triton"]):
        assert list(with_triton.token_ids) == list(with_torch.token_ids)
    num_layers = model.config.num_layers
    assert calls["paged_decode_attention"] >= num_layers and calls["store_kv"] >= 2 * num_layers


@gpu
@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_engine_with_triton_backend_matches_transformers(hf_model):
    from course_lib.engine import LLMEngine
    from course_lib.model import load_smollm2
    from course_lib.sampling import SamplingParams

    model, tokenizer = load_smollm2(dtype=torch.float32, device="cuda")
    engine = LLMEngine(model, tokenizer, attention_backend="triton")
    prompts = [
        "The capital of France is",
        "def fibonacci(n):",
        "Once upon a time, in a small village by the sea,",
        "List three colors:",
    ]
    num_tokens = 24
    params = SamplingParams(temperature=0.0, max_tokens=num_tokens, ignore_eos=True)
    outputs = engine.generate(prompts, params, use_tqdm=False)
    for output in outputs:
        expected = _greedy_with_transformers(hf_model, output.prompt_token_ids, num_tokens)
        assert list(output.token_ids) == expected, tokenizer.decode(list(output.prompt_token_ids))
