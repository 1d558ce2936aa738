"""Demo student: the online softmax rescales the running sum but not the accumulator."""

DESCRIPTION = (
    "flash_attention multiplies the running sum by exp(old max - new max) when a key tile raises the "
    "maximum, but forgets to rescale the accumulated values: right with a single key tile, wrong as soon "
    "as there are several. Loses the three flash_attention cells, expected 7/14"
)
BASE = "solution"
ANSWERS = {
    "flash_attention": '''
def flash_attention(q, k, v, block_q=64, block_k=64, scale=None):
    """Causal grouped-query attention by tiles with the online softmax."""
    q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads, _ = k.shape
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    group_size = num_q_heads // num_kv_heads
    queries = q.transpose(0, 1)
    keys = k.repeat_interleave(group_size, dim=1).transpose(0, 1)
    values = v.repeat_interleave(group_size, dim=1).transpose(0, 1)
    offset = kv_len - q_len
    output = torch.empty_like(queries)
    for q_start in range(0, q_len, block_q):
        q_end = min(q_start + block_q, q_len)
        rows = q_end - q_start
        query_positions = torch.arange(offset + q_start, offset + q_end)
        running_max = torch.full((num_q_heads, rows, 1), float("-inf"))
        running_sum = torch.zeros(num_q_heads, rows, 1)
        acc = torch.zeros(num_q_heads, rows, head_dim)
        for k_start in range(0, offset + q_end, block_k):
            k_end = min(k_start + block_k, kv_len)
            scores = queries[:, q_start:q_end] @ keys[:, k_start:k_end].transpose(1, 2) * scale
            visible = torch.arange(k_start, k_end)[None, :] <= query_positions[:, None]
            scores = scores.masked_fill(~visible, float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
            probabilities = torch.exp(scores - new_max)
            running_sum = running_sum * torch.exp(running_max - new_max) + probabilities.sum(dim=-1, keepdim=True)
            acc = acc + probabilities @ values[:, k_start:k_end]
            running_max = new_max
        output[:, q_start:q_end] = acc / running_sum
    return output.transpose(0, 1)
''',
}
EXPECTED = {"02_prefill": 7}
