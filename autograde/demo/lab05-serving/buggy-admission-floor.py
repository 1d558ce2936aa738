"""Demo student: the KV blocks a request needs are rounded down (floor) instead of up (ceil)."""

DESCRIPTION = (
    "admission_policy computes need = (num_prompt_tokens + max_tokens) // block_size, so a partial last block is "
    "not counted: 1,601 tokens pass a budget of 100 blocks and 65 tokens fit where 96 of 100 blocks are promised. "
    "The visible decisions show both cases: loses the decisions cell (3 points); in the live burst the queue "
    "bound keeps the promise under the budget, so that cell keeps its 3: expected 3/6"
)
BASE = "solution"
ANSWERS = {
    "admission_policy": '''
def admission_policy(request, state, limits):
    """Admit (200), refuse for good (400) or ask to retry later (429)."""
    num_tokens = request["num_prompt_tokens"] + request["max_tokens"]
    if num_tokens > state["max_model_len"]:
        return {"status": 400, "message": f"prompt + max_tokens = {num_tokens} exceeds the context"}
    need = num_tokens // state["block_size"]
    if need > limits["kv_budget_blocks"]:
        return {"status": 400, "message": f"needs {need} KV blocks; the budget is {limits['kv_budget_blocks']}"}
    if state["num_waiting"] >= limits["max_waiting"]:
        return {"status": 429, "message": "queue full", "retry_after_s": limits["retry_after_s"]}
    if state["running_blocks"] + state["waiting_blocks"] + need > limits["kv_budget_blocks"]:
        return {"status": 429, "message": "KV budget reached", "retry_after_s": limits["retry_after_s"]}
    return {"status": 200}
''',
}
EXPECTED = {"03_admission": 3}
