"""Prefill and decode in separate processes (course_lib.server.disaggregated) give the same tokens as
one engine, over HTTP, and every shipped request's transfer is measured."""

from __future__ import annotations

import openai
import pytest

from course_lib.engine import LLMEngine
from course_lib.kv_transfer import kv_bytes, pack_kv, unpack_kv
from course_lib.sampling import SamplingParams
from course_lib.server.disaggregated import function_source, start_disaggregated
from course_lib.server.models import tiny_random_model


def test_function_source_drops_decorators():
    name, source = function_source(pack_kv)
    assert name == "pack_kv" and source.startswith("def pack_kv(") and "@exercise" not in source


@pytest.mark.slow
def test_disaggregated_server_matches_one_engine():
    model, tokenizer = tiny_random_model()
    prompts = ["The quick brown fox jumps over the lazy dog. " * 4, "Hello!", "One two three four five six seven"]
    greedy = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    expected = [o.text for o in LLMEngine(model, tokenizer, num_blocks=64).generate(prompts, greedy)]
    with start_disaggregated(mode="disaggregated", pack_kv=pack_kv, unpack_kv=unpack_kv, model="tiny",
                             num_blocks=64) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        texts = [client.completions.create(model="tiny-random-llama", prompt=p, max_tokens=10, temperature=0,
                                           extra_body={"ignore_eos": True}).choices[0].text for p in prompts]
        single = client.completions.create(model="tiny-random-llama", prompt="Just one", max_tokens=1, temperature=0)
        transfers = list(server.backend.transfers)
    assert texts == expected
    assert single.usage.completion_tokens == 1
    assert len(transfers) == 3  # a 1-token answer finishes at the prefill worker: nothing to ship
    sizes = sorted(t["bytes"] for t in transfers)
    assert sizes == sorted(kv_bytes(len(tokenizer.encode(p)), model.config) for p in prompts)
    assert all(t["trip_s"] >= 0 and t["unpack_s"] >= 0 for t in transfers)
