"""Demo student: the KV budget counts only the running requests' blocks, not the waiting ones'."""

DESCRIPTION = (
    "admission_policy compares running_blocks + need with the KV budget, forgetting the blocks promised to "
    "waiting requests: a crafted case with a full budget held by waiting requests gets 200 instead of 429; "
    "loses the decisions cell (3 points); in the live burst the queue bound still holds the promise under "
    "the budget, so that cell keeps its 3: expected 3/6"
)
BASE = "solution"
ANSWERS = {
    "admission_policy": '''
def admission_policy(request, state, limits):
    """Admit (200), refuse for good (400) or ask to retry later (429)."""
    num_tokens = request["num_prompt_tokens"] + request["max_tokens"]
    if num_tokens > state["max_model_len"]:
        return {"status": 400, "message": f"prompt + max_tokens = {num_tokens} exceeds the context"}
    need = -(-num_tokens // state["block_size"])
    if need > limits["kv_budget_blocks"]:
        return {"status": 400, "message": f"needs {need} KV blocks; the budget is {limits['kv_budget_blocks']}"}
    if state["num_waiting"] >= limits["max_waiting"]:
        return {"status": 429, "message": "queue full", "retry_after_s": limits["retry_after_s"]}
    if state["running_blocks"] + need > limits["kv_budget_blocks"]:
        return {"status": 429, "message": "KV budget reached", "retry_after_s": limits["retry_after_s"]}
    return {"status": 200}
''',
}
EXPECTED = {"03_admission": 3}
