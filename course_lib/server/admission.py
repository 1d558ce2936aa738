"""Admission control: decide at the door, before a request costs the server anything.

A server that queues every request under overload makes *everyone* slow: the queue grows without
limit, time to first token climbs for all, and clients time out after their requests have used
the GPU. Admission control answers at once instead:

- **400** for a request that could *never* run: longer than the context, or needing more KV blocks
  than the budget allows even on an empty server. Retrying cannot help, so say which limit it broke.
- **429 Too Many Requests** with a ``Retry-After`` header when the server is full *now*: the
  waiting queue is at its bound, or the KV blocks promised to admitted requests would exceed the
  KV budget. The client may come back later.
- otherwise **admit**.

A policy is ``policy(request, state, limits) -> decision`` on plain dicts (so a student's policy
can run inside the real server):

- ``request``: ``{"num_prompt_tokens": int, "max_tokens": int}``;
- ``state``: ``LoopState.as_dict()`` (``num_waiting``, ``num_running``, ``kv_blocks_total``,
  ``kv_blocks_used``, ``waiting_blocks``, ``running_blocks``, ``block_size``, ``max_model_len``, ...);
  ``waiting_blocks`` and ``running_blocks`` are the blocks admitted requests may need at their
  longest (prompt + max_tokens, rounded up to blocks);
- ``limits``: ``{"max_waiting": int, "kv_budget_blocks": int, "retry_after_s": int}``;
- decision: ``{"status": 200}``, ``{"status": 400, "message": str}`` or
  ``{"status": 429, "message": str, "retry_after_s": int}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from course_lib.exercises import exercise

__all__ = ["AdmissionLimits", "AdmissionPolicy", "admission_policy", "validate_decision"]

AdmissionPolicy = Callable[[dict, dict, dict], dict]


@dataclass(frozen=True)
class AdmissionLimits:
    """The limits a policy enforces (see the module docstring); ``as_dict()`` is what a policy gets."""

    max_waiting: int = 8
    kv_budget_blocks: int = 64
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        for name in ("max_waiting", "kv_budget_blocks", "retry_after_s"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "max_waiting" else 1):
                raise ValueError(f"{name} must be an integer >= {0 if name == 'max_waiting' else 1}, got {value!r}")

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def validate_decision(decision: object) -> tuple[int, str, int | None]:
    """(status, message, retry_after_s) of a policy's decision; ValueError naming what is wrong."""
    if not isinstance(decision, Mapping) or "status" not in decision:
        raise ValueError(f"a decision is a dict with a 'status' (200, 400 or 429), got {decision!r}")
    status = decision["status"]
    if status not in (200, 400, 429):
        raise ValueError(f"decision['status'] must be 200, 400 or 429, got {status!r}")
    message = decision.get("message", "")
    if status != 200 and (not isinstance(message, str) or not message):
        raise ValueError(f"a {status} decision needs a non-empty 'message' saying which limit, got {message!r}")
    retry_after = decision.get("retry_after_s")
    if status == 429:
        if not isinstance(retry_after, int) or isinstance(retry_after, bool) or retry_after < 1:
            raise ValueError(f"a 429 decision needs 'retry_after_s', an integer >= 1, got {retry_after!r}")
    return status, message, retry_after if status == 429 else None


@exercise("lab05-serving", "03_admission", "admission_policy")
def admission_policy(request: dict, state: dict, limits: dict) -> dict:
    """Admit, refuse for good (400) or ask to retry later (429), in this order of rules:

    1. 400 if num_prompt_tokens + max_tokens > state["max_model_len"] (the context);
    2. 400 if the request alone needs more KV blocks than limits["kv_budget_blocks"]
       (need = ceil((num_prompt_tokens + max_tokens) / state["block_size"]));
    3. 429 if state["num_waiting"] >= limits["max_waiting"] (the queue is full);
    4. 429 if state["running_blocks"] + state["waiting_blocks"] + need > limits["kv_budget_blocks"]
       (every admitted request, waiting or running, keeps its promise of blocks);
    5. otherwise 200.

    A 429 carries ``retry_after_s = limits["retry_after_s"]``; a refusal's message names the limit.
    """
    num_tokens = request["num_prompt_tokens"] + request["max_tokens"]
    if num_tokens > state["max_model_len"]:
        return {"status": 400, "message": f"prompt + max_tokens = {num_tokens} tokens exceeds the context "
                                          f"length {state['max_model_len']}"}
    need = -(-num_tokens // state["block_size"])
    if need > limits["kv_budget_blocks"]:
        return {"status": 400, "message": f"the request needs {need} KV blocks; the KV budget is "
                                          f"{limits['kv_budget_blocks']} blocks"}
    if state["num_waiting"] >= limits["max_waiting"]:
        return {"status": 429, "message": f"the queue is full ({state['num_waiting']} waiting, max_waiting "
                                          f"{limits['max_waiting']})", "retry_after_s": limits["retry_after_s"]}
    promised = state["running_blocks"] + state["waiting_blocks"]
    if promised + need > limits["kv_budget_blocks"]:
        return {"status": 429, "message": f"KV budget: {promised} blocks promised + {need} needed > "
                                          f"{limits['kv_budget_blocks']}", "retry_after_s": limits["retry_after_s"]}
    return {"status": 200}
