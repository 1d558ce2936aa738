"""Demo student: unpack_kv writes the payload into a clone of the pool and returns the clone."""

DESCRIPTION = (
    "unpack_kv starts with storage = storage.clone(), so the values land in a new tensor and the pool the engine "
    "reads is unchanged, although the docstring says 'in place'. The returned tensor is right, which is all the "
    "old check looked at. Loses the unpack_kv cell (2 points: storage is unchanged) and the two-engine cell "
    "(2 points: the decode engine's pool never got the KV); pack_kv keeps its 2: expected 2/6"
)
BASE = "solution"
ANSWERS = {
    "unpack_kv": '''
import torch


def unpack_kv(payload, storage, block_table):
    """Write a payload's tokens into the receiver's blocks; return storage."""
    storage = storage.clone()  # leave the caller's tensor alone
    num_tokens, block_size = payload.shape[2], storage.shape[3]
    positions = torch.arange(num_tokens)
    blocks = torch.as_tensor(list(block_table), dtype=torch.long)[positions // block_size]
    storage[:, :, blocks, positions % block_size] = payload
    return storage
''',
}
EXPECTED = {"05_disaggregation": 2}
