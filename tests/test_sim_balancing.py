"""The simulated cluster of Lab 0.5 chapter 6 (course_lib.sim.balancing): the course's scheduler and allocator
on a cost model's clock, routed by any policy. Small hand-checkable runs, and determinism."""

from __future__ import annotations

import pytest

from course_lib.server.balancing import KVAwareRouter, stranded_share
from course_lib.server.routing import PrefixAwareRouter, RoundRobin
from course_lib.sim.balancing import ReplicaConfig, SimRequest, StepCost, mixed_workload, simulate

SMALL = ReplicaConfig(num_blocks=40, block_size=16, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=2048)


def test_one_request_costs_its_prefill_then_one_step_per_token():
    cost = StepCost(fixed_ms=10.0, prefill_token_ms=0.5, decode_ms=1.0)
    result = simulate([SimRequest(0.0, tuple(range(1, 101)), 4)], RoundRobin(1), num_replicas=1, replica=SMALL,
                      cost=cost)
    assert result.ttft_ms == [pytest.approx(10 + 0.5 * 100)]        # the prefill step samples the first token
    assert result.e2e_ms == [pytest.approx(60 + 3 * (10 + 1.0))]     # then 3 decode steps
    assert result.preemptions == [0] and result.replicas == [0]


def test_documents_pile_up_under_round_robin_and_spread_under_the_kv_balancer():
    """Documents at even positions: round robin puts all of them on replica 0, where only two fit at once."""
    requests = []
    for index in range(8):
        if index % 2 == 0:
            requests.append(SimRequest(index * 1.0, tuple(range(1000 + 300 * index, 1300 + 300 * index)), 40, "document"))
        else:
            requests.append(SimRequest(index * 1.0, tuple(range(5, 30)), 8, "chat"))
    blind = simulate(requests, RoundRobin(2), num_replicas=2, replica=SMALL)
    aware = simulate(requests, KVAwareRouter(2), num_replicas=2, replica=SMALL, scrape_interval_ms=1000)
    documents = [index for index in range(8) if index % 2 == 0]
    assert [blind.replicas[i] for i in documents] == [0, 0, 0, 0]
    assert sorted(aware.replicas[i] for i in documents) == [0, 0, 1, 1]
    assert aware.summary("document")["ttft_p90_ms"] < blind.summary("document")["ttft_p90_ms"]
    assert stranded_share(aware.timeline, 40, 4) <= stranded_share(blind.timeline, 40, 4)


def test_shared_system_prompts_hit_the_prefix_cache_of_their_replica():
    workload = mixed_workload([100.0 * i for i in range(60)], document_share=0.0, num_system_prompts=2,
                              system_prompt_tokens=64, question_tokens=(4, 8), chat_output_tokens=4, seed=3)
    cost = StepCost()
    config = ReplicaConfig(num_blocks=256)
    affine = simulate(workload, PrefixAwareRouter(4), num_replicas=4, replica=config, cost=cost)
    spread = simulate(workload, RoundRobin(4), num_replicas=4, replica=config, cost=cost)
    assert affine.summary()["hit_rate"] > spread.summary()["hit_rate"] > 0


def test_runs_are_deterministic_and_policies_are_checked():
    workload = mixed_workload([50.0 * i for i in range(40)], document_tokens=(300, 500), system_prompt_tokens=64,
                              document_output_tokens=16, chat_output_tokens=8, seed=1)
    config = ReplicaConfig(num_blocks=128)
    first = simulate(workload, KVAwareRouter(2), num_replicas=2, home=PrefixAwareRouter(2).choose, replica=config)
    second = simulate(workload, KVAwareRouter(2), num_replicas=2, home=PrefixAwareRouter(2).choose, replica=config)
    assert first == second

    class Wrong:
        def choose(self, prompt_token_ids, outstanding):
            return 5

    with pytest.raises(ValueError, match="replica index"):
        simulate(workload, Wrong(), num_replicas=2, replica=config)
    with pytest.raises(ValueError, match="document_share"):
        mixed_workload([0.0], document_share=1.5)
