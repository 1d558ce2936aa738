"""Demo student: pack_kv ships whole blocks, the empty tail of the last block included."""

DESCRIPTION = (
    "pack_kv returns ceil(num_tokens / block_size) * block_size token slots instead of num_tokens: the payload "
    "has the wrong shape, and the decode engine takes the padding for prompt tokens; loses pack_kv (2) and the "
    "two-engine cell (2); unpack_kv keeps its 2: expected 2/6"
)
BASE = "solution"
ANSWERS = {
    "pack_kv": '''
import torch


def pack_kv(storage, block_table, num_tokens):
    """The KV of a request's blocks as one contiguous tensor."""
    num_layers, _, _, block_size, num_kv_heads, head_dim = storage.shape
    num_blocks = -(-num_tokens // block_size)
    blocks = torch.as_tensor(list(block_table[:num_blocks]), dtype=torch.long)
    return storage[:, :, blocks].reshape(num_layers, 2, num_blocks * block_size, num_kv_heads, head_dim).contiguous()
''',
}
EXPECTED = {"05_disaggregation": 2}
