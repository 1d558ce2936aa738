"""course_lib.kv_transfer against the engine's own paged storage (PagedKVCache.gather)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.kv_transfer import kv_bytes, pack_kv, unpack_kv
from course_lib.model import ModelConfig
from course_lib.paged import PagedKVCache

CONFIG = ModelConfig(num_layers=3, hidden_size=16, num_q_heads=4, num_kv_heads=2, head_dim=4, vocab_size=50,
                     intermediate_size=32, max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.randoms(use_true_random=False))
def test_pack_then_unpack_moves_exactly_the_tokens(num_tokens, block_size, rng):
    num_blocks = 24
    needed = -(-num_tokens // block_size)
    if needed > num_blocks // 2:
        return
    sender, receiver = PagedKVCache(CONFIG, num_blocks, block_size), PagedKVCache(CONFIG, num_blocks, block_size)
    sender.storage.normal_()
    receiver.storage.normal_()
    untouched = receiver.storage.clone()
    send_table = rng.sample(range(num_blocks), needed)
    receive_table = rng.sample(range(num_blocks), needed)
    payload = pack_kv(sender.storage, send_table, num_tokens)
    assert payload.shape == (3, 2, num_tokens, 2, 4) and payload.is_contiguous()
    assert payload.numel() * payload.element_size() == kv_bytes(num_tokens, CONFIG)
    for layer in range(3):  # the engine's own reading of the sender's blocks
        keys, values = sender.gather(layer, send_table, num_tokens)
        assert torch.equal(payload[layer, 0], keys) and torch.equal(payload[layer, 1], values)
    unpack_kv(payload, receiver.storage, receive_table)
    for layer in range(3):
        keys, values = receiver.gather(layer, receive_table, num_tokens)
        assert torch.equal(keys, payload[layer, 0]) and torch.equal(values, payload[layer, 1])
    written = torch.zeros(num_blocks, block_size, dtype=torch.bool)
    for position in range(num_tokens):
        written[receive_table[position // block_size], position % block_size] = True
    assert torch.equal(receiver.storage[:, :, ~written], untouched[:, :, ~written])


def test_kv_bytes_matches_the_model_config():
    assert kv_bytes(10, CONFIG) == 10 * CONFIG.kv_bytes_per_token(torch.float32)
