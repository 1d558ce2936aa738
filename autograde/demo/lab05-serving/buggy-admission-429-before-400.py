"""Demo student: the admission policy checks the queue and the budget (429) before the 400 rules."""

DESCRIPTION = (
    "admission_policy answers 429 when the queue is full before asking whether the request could ever run, so a "
    "request longer than the context gets a 429 (and its client retries it forever) while the server is busy. The "
    "visible cases include one: loses the decisions cell (3 points), with a hint on the rules' order; the live burst "
    "holds only requests that fit, so that cell keeps its 3: expected 3/6"
)
BASE = "solution"
ANSWERS = {
    "admission_policy": '''
def admission_policy(request, state, limits):
    """Admit (200), refuse for good (400) or ask to retry later (429)."""
    retry = {"status": 429, "retry_after_s": limits["retry_after_s"]}
    if state["num_waiting"] >= limits["max_waiting"]:
        return {**retry, "message": f"queue full ({state['num_waiting']} waiting)"}
    num_tokens = request["num_prompt_tokens"] + request["max_tokens"]
    if num_tokens > state["max_model_len"]:
        return {"status": 400, "message": f"prompt + max_tokens = {num_tokens} exceeds the context"}
    need = -(-num_tokens // state["block_size"])
    if need > limits["kv_budget_blocks"]:
        return {"status": 400, "message": f"needs {need} KV blocks; the budget is {limits['kv_budget_blocks']}"}
    if state["running_blocks"] + state["waiting_blocks"] + need > limits["kv_budget_blocks"]:
        return {**retry, "message": "KV budget reached"}
    return {"status": 200}
''',
}
EXPECTED = {"03_admission": 3}
