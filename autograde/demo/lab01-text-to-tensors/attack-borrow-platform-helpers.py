"""Demo student: answers chapter 3 with the platform's own helpers, reached by computed names (03_kv_cache)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Hands in chapter 3 without writing it: kv_cache_bytes_per_token is course_lib.viz.kv_bytes_per_token, "
    "kv_cache_bytes is PagedKVCache.bytes_per_block with blocks of one token, waste_breakdown counts the "
    "holes course_lib.sim.fragmentation.free_holes lists, each reached with importlib and computed names "
    "so that no name check sees it. None of them is marked @exercise; the edition stubs them anyway, found "
    "from what the checks' references call, so each borrowed answer fails; tokens_through_model is "
    "honest (the old grader gave 10/10 here); expected 2/10"
)
BASE = "solution"
BORROW = '''
import importlib

import torch


def _platform(module, name):
    return getattr(importlib.import_module("course_lib." + module), name)


def kv_cache_bytes_per_token(config, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    return _platform("viz", "kv_bytes" + "_per_token")(config.num_layers, config.num_kv_heads, config.head_dim, size)
'''
ANSWERS = {
    "kv_cache_bytes_per_token": BORROW,
    "kv_cache_bytes": '''
def kv_cache_bytes(config, seq_len, batch_size=1, dtype=torch.float16):
    if seq_len < 0 or batch_size < 0:
        raise ValueError(f"seq_len and batch_size must be >= 0, got {seq_len}, {batch_size}")
    one_token = getattr(_platform("paged", "PagedKVCache"), "bytes_per" + "_block")(config, 1, dtype)
    return one_token * seq_len * batch_size
''',
    "waste_breakdown": '''
def waste_breakdown(reservations, pool_slots, request_slots):
    holes = _platform("sim.fragmentation", "free" + "_holes")(reservations, pool_slots)
    return {
        "used": sum(r.num_tokens for r in reservations),
        "reserved_unused": sum(r.final_len - r.num_tokens for r in reservations),
        "internal": sum(r.size - r.final_len for r in reservations),
        "free": sum(length for _, length in holes),
        "external": sum(length for _, length in holes if length < request_slots),
    }
''',
}
EXPECTED = {"03_kv_cache": 2}
