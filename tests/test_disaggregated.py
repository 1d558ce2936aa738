"""Prefill and decode in separate processes (course_lib.server.disaggregated) give the same tokens as
one engine, over HTTP, and every shipped request's transfer is measured."""

from __future__ import annotations

import linecache
import time

import openai
import pytest
import torch

from course_lib.engine import LLMEngine
from course_lib.kv_transfer import kv_bytes, pack_kv, unpack_kv
from course_lib.sampling import SamplingParams
from course_lib.server.disaggregated import WorkerFailed, function_source, start_disaggregated
from course_lib.server.shipping import ShippingError, shipped_copy
from course_lib.server.models import tiny_random_model


def cell(source: str, filename: str, namespace: dict) -> None:
    """Run ``source`` as a notebook kernel runs a cell: compiled under a file name linecache knows."""
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)


HELPER_CELL = """
import torch
SPARE = 2


def slots(block_table, num_tokens, block_size):
    positions = torch.arange(num_tokens)
    return torch.as_tensor(list(block_table), dtype=torch.long)[positions // block_size], positions % block_size


print("tried once in the notebook:", slots([3, 1], 5, 4))


def pack_kv(storage, block_table, num_tokens):
    blocks, offsets = slots(block_table, num_tokens, storage.shape[3])
    return storage[:, :, blocks, offsets].contiguous()
"""
OTHER_CELL = """
def unpack_kv(payload, storage, block_table):
    blocks, offsets = slots(block_table, payload.shape[2], storage.shape[3])   # defined in the other cell
    storage[:, :, blocks, offsets] = payload
    return storage
"""


def test_a_module_function_ships_with_its_module_definitions():
    name, source = function_source(pack_kv)
    assert name == "pack_kv" and "def pack_kv(" in source and "def unpack_kv(" in source
    assert '"""Shipping' not in source  # the module's docstring is an expression: it stays home
    torch.testing.assert_close(shipped_copy(pack_kv)(torch.arange(48.0).reshape(1, 2, 3, 4, 2, 1), [2, 0], 5),
                               pack_kv(torch.arange(48.0).reshape(1, 2, 3, 4, 2, 1), [2, 0], 5))


def test_a_cell_ships_its_imports_definitions_and_constants_and_nothing_else():
    namespace = {"__name__": "__main__"}
    cell(HELPER_CELL, "<cell 1>", namespace)
    name, source = function_source(namespace["pack_kv"])
    assert "SPARE = 2" in source and "def slots(" in source and "import torch" in source
    assert "print(" not in source
    storage = torch.randn(2, 2, 4, 4, 1, 3)
    torch.testing.assert_close(shipped_copy(namespace["pack_kv"])(storage, [3, 1], 5),
                               pack_kv(storage, [3, 1], 5))


def test_a_helper_from_another_cell_travels_as_a_global_of_the_notebook():
    """A helper written in an earlier cell is a global of the student's code: it ships with the function."""
    namespace = {"__name__": "__main__"}
    cell(HELPER_CELL, "<cell 1>", namespace)
    cell(OTHER_CELL, "<cell 2>", namespace)
    name, source = function_source(namespace["unpack_kv"])
    assert name == "unpack_kv" and "def slots(" in source and "import torch" not in source.split("def slots(")[0]
    assert "print(" not in source and "def pack_kv(" not in source  # only what unpack_kv reads travels
    payload = torch.randn(2, 2, 5, 1, 3)
    expected = namespace["unpack_kv"](payload, torch.zeros(2, 2, 4, 4, 1, 3), [3, 1])
    torch.testing.assert_close(shipped_copy(namespace["unpack_kv"])(payload, torch.zeros(2, 2, 4, 4, 1, 3), [3, 1]),
                               expected)


def test_notebook_globals_travel_by_kind_helpers_in_turn_modules_values_and_library_functions():
    namespace = {"__name__": "__main__"}
    cell("import torch\nimport numpy as np\nfrom course_lib.kv_transfer import kv_bytes\nSCALE = 2.0\n"
         "OFFSETS = torch.arange(3)\n", "<cell 1>", namespace)
    cell("def double(x):\n    return x * SCALE\n\n\ndef twice_then_offset(x):\n    return double(x) + OFFSETS\n",
         "<cell 2>", namespace)
    cell("def pack_kv(storage, table, n):\n    assert callable(kv_bytes)\n"
         "    return twice_then_offset(storage) + float(np.float32(0))\n", "<cell 3>", namespace)
    name, source = function_source(namespace["pack_kv"])
    assert "def twice_then_offset(" in source and "def double(" in source      # helpers, and the helpers' helpers
    assert "SCALE = 2.0" in source and "import numpy as np" in source
    assert "from course_lib.kv_transfer import kv_bytes" in source
    assert "OFFSETS = _shipped_value(" in source                             # a tensor travels as a copy
    torch.testing.assert_close(shipped_copy(namespace["pack_kv"])(torch.ones(3), [0], 1), torch.tensor([2.0, 3, 4]))


def test_a_notebook_value_that_cannot_be_copied_is_refused_by_name():
    import threading

    namespace = {"__name__": "__main__", "LOCK": threading.Lock()}
    cell("def pack_kv(storage, table, n):\n    with LOCK:\n        return storage\n", "<cell 1>", namespace)
    with pytest.raises(ShippingError, match="notebook variable LOCK, a lock, which cannot be copied"):
        function_source(namespace["pack_kv"])


def test_what_cannot_be_shipped_is_refused_with_the_reason():
    with pytest.raises(ShippingError, match="defined with def"):
        function_source(lambda storage: storage)
    namespace: dict = {}
    exec("def pack_kv(storage, table, n):\n    return storage\n", namespace)  # no file behind it
    with pytest.raises(ShippingError, match="cannot read the source"):
        function_source(namespace["pack_kv"])


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


@pytest.mark.slow
def test_a_worker_that_cannot_run_its_function_fails_the_start_at_once_with_the_reason():
    namespace = {"__name__": "__main__"}
    cell(HELPER_CELL, "<cell 1>", namespace)
    cell(OTHER_CELL.replace("    storage[:, :, blocks", "    storage = storage.clone()\n    storage[:, :, blocks"),
         "<cell 2>", namespace)
    started = time.monotonic()
    with pytest.raises(WorkerFailed, match="your unpack_kv left the decode worker's pool unchanged"):
        start_disaggregated(pack_kv=namespace["pack_kv"], unpack_kv=namespace["unpack_kv"], model="tiny",
                            num_blocks=32)
    assert time.monotonic() - started < 60


@pytest.mark.slow
def test_a_worker_that_fails_mid_run_ends_the_requests_in_flight_at_once():
    namespace = {"__name__": "__main__"}
    cell(HELPER_CELL.replace("    blocks, offsets = slots(", "    if num_tokens > 20:\n        raise IndexError('table too "
                             "short')\n    blocks, offsets = slots("), "<cell 1>", namespace)
    from course_lib import loadtest

    with start_disaggregated(pack_kv=namespace["pack_kv"], unpack_kv=unpack_kv, model="tiny", num_blocks=64) as server:
        started = time.monotonic()
        records = loadtest.burst(server.url, ["a long prompt that fills more than one block " * 3, "hi"], max_tokens=5)
        assert time.monotonic() - started < 20  # not the client's 120 s timeout
        assert server.backend.failure is not None and not server.backend.is_alive
        with pytest.raises(WorkerFailed, match="your pack_kv raised IndexError: table too short in the prefill worker"):
            server.backend.raise_if_failed()
    assert all(r["status"] == 200 for r in records)
