"""KVCache: cached decoding and chunked prefill give what recomputing the whole sequence gives.

Tolerances: fp32 throughout. Cached and uncached runs do the same arithmetic on the same values
except that attention reads keys from a different tensor and in different chunk shapes, so logits
agree to rounding: atol = rtol = 1e-5 on the tiny model (logits O(1)), atol 1e-4 on SmolLM2
(logits O(10), the same bar as against transformers).
"""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import flash_attention, naive_attention
from course_lib.kv_cache import KVCache
from course_lib.model import LlamaModel, greedy_generate, random_weights
from tests.tiny_models import tiny_config

TINY_TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}


@pytest.fixture(scope="module")
def tiny_model() -> LlamaModel:
    config = tiny_config(num_layers=3, num_q_heads=6, vocab_size=60, intermediate_size=48,
                         max_position_embeddings=128)
    return LlamaModel(config, random_weights(config, seed=1)).eval()


def run_in_chunks(model, ids: list[int], chunk_sizes: list[int], cache: KVCache) -> torch.Tensor:
    """Feed ids through the cache chunk by chunk; the logits of every token, concatenated."""
    logits, start = [], 0
    for size in chunk_sizes:
        chunk = torch.tensor(ids[start : start + size])
        logits.append(model(chunk, cache.next_positions(size), cache))
        start += size
    return torch.cat(logits)


@pytest.mark.parametrize("chunk_sizes", [[20], [7, 13], [5, 9, 6], [1] * 20])
@pytest.mark.parametrize("attention_fn", [None, naive_attention, flash_attention], ids=["sdpa", "naive", "flash"])
def test_chunked_run_matches_one_shot(tiny_model, chunk_sizes, attention_fn):
    ids = [(7 * i + 3) % 60 for i in range(20)]
    expected = tiny_model(torch.tensor(ids))  # no cache: one causal pass
    kwargs = {} if attention_fn is None else {"attention_fn": attention_fn}
    cache = KVCache(tiny_model.config, max_seq_len=32, **kwargs)
    with torch.inference_mode():
        got = run_in_chunks(tiny_model, ids, chunk_sizes, cache)
    assert cache.seq_len == 20
    torch.testing.assert_close(got, expected, **TINY_TOLERANCE)


def test_cached_greedy_decoding_matches_recompute_on_tiny_model(tiny_model):
    prompt = [5, 17, 33, 8, 41]
    cached = greedy_generate(tiny_model, prompt, 30, use_cache=True)
    recomputed = greedy_generate(tiny_model, prompt, 30, use_cache=False)
    assert cached == recomputed
    assert len(cached) >= 1


def test_seq_len_positions_and_reset(tiny_model):
    cache = KVCache(tiny_model.config, max_seq_len=16)
    assert cache.seq_len == 0
    tiny_model(torch.tensor([3, 4, 5]), cache.next_positions(3), cache)
    assert cache.seq_len == 3
    assert cache.next_positions(2).tolist() == [3, 4]
    cache.reset()
    assert cache.seq_len == 0
    # After a reset the cache serves a new sequence exactly like a fresh one.
    ids = torch.tensor([9, 10, 11, 12])
    torch.testing.assert_close(
        tiny_model(ids, cache.next_positions(4), cache), tiny_model(ids), **TINY_TOLERANCE
    )


def test_nbytes_counts_every_layer(tiny_model):
    config = tiny_model.config
    cache = KVCache(config, max_seq_len=10, dtype=torch.bfloat16)
    assert cache.nbytes == 2 * config.num_layers * 10 * config.num_kv_heads * config.head_dim * 2
    assert cache.nbytes == 10 * config.kv_bytes_per_token(torch.bfloat16)


def test_overflow_raises_and_leaves_the_cache_unchanged(tiny_model):
    cache = KVCache(tiny_model.config, max_seq_len=8)
    tiny_model(torch.tensor([3, 4, 5, 6, 7, 8]), cache.next_positions(6), cache)
    with pytest.raises(ValueError, match=r"overflow.*6 tokens cached \+ 3 new > max_seq_len \(8\)"):
        tiny_model(torch.tensor([9, 10, 11]), cache.next_positions(3), cache)
    assert cache.seq_len == 6
    tiny_model(torch.tensor([9, 10]), cache.next_positions(2), cache)
    assert cache.seq_len == 8


def test_bad_arguments_raise_clear_errors(tiny_model):
    config = tiny_model.config
    with pytest.raises(ValueError, match="max_seq_len must be an int >= 1"):
        KVCache(config, max_seq_len=0)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        KVCache(config, max_seq_len=config.max_position_embeddings + 1)
    cache = KVCache(config, max_seq_len=4)
    q = torch.zeros(1, config.num_q_heads, config.head_dim)
    kv = torch.zeros(1, config.num_kv_heads, config.head_dim)
    with pytest.raises(ValueError, match="layer_index"):
        cache.attend(config.num_layers, q, kv, kv)
    with pytest.raises(ValueError, match="num_kv_heads"):
        cache.attend(0, q, torch.zeros(1, 5, config.head_dim), kv)


@pytest.mark.slow
def test_cached_decoding_matches_recompute_on_smollm2(smollm2, hf_tokenizer):
    model, _ = smollm2
    prompt = hf_tokenizer("A short story about a lighthouse keeper:", add_special_tokens=False).input_ids
    cached = greedy_generate(model, prompt, 8, use_cache=True)
    recomputed = greedy_generate(model, prompt, 8, use_cache=False)
    assert cached == recomputed

    # And the logits of every decode step agree, not only their argmax.
    sequence = prompt + cached
    with torch.inference_mode():
        expected = model(torch.tensor(sequence))[len(prompt) - 1 :]
        cache = KVCache(model.config, max_seq_len=len(sequence))
        got = run_in_chunks(model, sequence, [len(prompt)] + [1] * len(cached), cache)[len(prompt) - 1 :]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_chunked_prefill_matches_one_shot_on_smollm2(smollm2, hf_tokenizer):
    model, _ = smollm2
    text = "Chunked prefill splits a long prompt into pieces so that decode steps can run in between. " * 2
    prompt = hf_tokenizer(text, add_special_tokens=False).input_ids
    with torch.inference_mode():
        expected = model(torch.tensor(prompt))
        cache = KVCache(model.config, max_seq_len=len(prompt))
        third = len(prompt) // 3
        got = run_in_chunks(model, prompt, [third, third, len(prompt) - 2 * third], cache)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
