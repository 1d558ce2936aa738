"""Demo student: choose_num_splits without max(1, ...) (04_split_kv)."""

DESCRIPTION = (
    'choose_num_splits returns min(wanted, useful, MAX_SPLITS) without max(1, ...): 0 splits (no program '
    'at all) when the grid already fills a wave of the GPU or the context is shorter than 256 tokens. '
    'Loses the choose_num_splits cell, expected 16/18'
)
BASE = "solution"
ANSWERS = {
    '04_split_kv/choose_num_splits': '''
PROGRAMS_PER_SM = 4
MIN_TOKENS_PER_SPLIT = 256
MAX_SPLITS = 32


def choose_num_splits(num_seqs, num_kv_heads, max_context_len, num_sms):
    """How many splits per (sequence, KV head), by the rule above.

    Args:
        num_seqs, num_kv_heads: ints >= 1 (the plain grid); max_context_len: int >= 1, the longest
        context the batch may hold; num_sms: int >= 1, streaming multiprocessors of the GPU.
    Returns:
        int in [1, MAX_SPLITS]: never 0, even when min(...) is.
    """
    programs = num_seqs * num_kv_heads
    wanted = PROGRAMS_PER_SM * num_sms // programs
    useful = max_context_len // MIN_TOKENS_PER_SPLIT
    return min(wanted, useful, MAX_SPLITS)
''',
}
EXPECTED = {'04_split_kv': 16}
