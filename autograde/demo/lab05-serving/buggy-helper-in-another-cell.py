"""Demo student: unpack_kv calls a helper that lives in pack_kv's cell."""

DESCRIPTION = (
    "pack_kv's cell defines a helper, token_slots, that both functions use; unpack_kv's cell calls it without "
    "defining it. In the notebook both cells ran, so pack_kv and unpack_kv pass their own tests; but the "
    "experiment sends each function to its worker as the source of its own cell, and the decode worker has no "
    "token_slots. The two-engine test ships the functions the same way and says so: loses that cell (2 points): "
    "expected 4/6"
)
BASE = "solution"
ANSWERS = {
    "pack_kv": '''
import torch


def token_slots(block_table, num_tokens, block_size):
    """(blocks, offsets): where each of the first num_tokens tokens lives."""
    positions = torch.arange(num_tokens)
    blocks = torch.as_tensor(list(block_table), dtype=torch.long)[positions // block_size]
    return blocks, positions % block_size


def pack_kv(storage, block_table, num_tokens):
    """The KV of a request's first num_tokens tokens as one contiguous tensor (a copy)."""
    blocks, offsets = token_slots(block_table, num_tokens, storage.shape[3])
    return storage[:, :, blocks, offsets].contiguous()
''',
    "unpack_kv": '''
def unpack_kv(payload, storage, block_table):
    """Write a payload's tokens into the receiver's blocks, in place; return storage."""
    blocks, offsets = token_slots(block_table, payload.shape[2], storage.shape[3])
    storage[:, :, blocks, offsets] = payload
    return storage
''',
}
EXPECTED = {"05_disaggregation": 4}
