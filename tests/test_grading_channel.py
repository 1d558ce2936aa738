"""The channel between grader and student kernel: what crosses, how, and what a hostile side cannot do.

Two endpoints talk over real pipes in one process: the "kernel" side serves in a thread.
"""

from __future__ import annotations

import collections
import os
import pickle
import threading
from contextlib import contextmanager

import numpy as np
import pickletools
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.runner.channel import (
                                       GRADER,
                                       KERNEL,
                                       Endpoint,
                                       ProtocolError,
                                       RemoteMethod,
                                       RemoteObject,
                                       Shared,
                                       StudentError,
                                       check_opcodes,
                                       describe_error,
                                       rebuild_error,
                                       )
from course_lib.runner.receipt import (MAX_BYTES, MAX_DEPTH, MAX_INT_BITS, MAX_ITEMS, MAX_MESSAGE_ITEMS, MAX_STR_CHARS,
                                      ValueTooLarge)


class StudentThing:
    """What a student's answer might return: an object with a lying __eq__."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__

    def double(self):
        print("student output")
        return self.value * 2

    def __len__(self):
        return 3

    def __iter__(self):
        return iter([1, 2, 3])


class NeedsGPU(Exception):
    """A student's look-alike of the checks' own exception."""


class KernelHandler:
    """The kernel side of the tests: a tiny namespace of student objects."""

    def __init__(self):
        shadowed = StudentThing(5)
        shadowed.double = lambda: "the instance's own"
        self.namespace = {"thing": StudentThing(21), "make_thing": StudentThing, "values": [1, 2.5, "x"],
                          "raise_fake_gpu": self.raise_fake_gpu, "shadowed": shadowed, "a_module": os}
        self.endpoint: Endpoint | None = None

    @staticmethod
    def raise_fake_gpu():
        raise NeedsGPU("skipped: needs a GPU")

    def __call__(self, op, args):
        if op == "global":
            return self.namespace[args[0]]
        if op == "call":
            target, call_args, call_kwargs = args
            return target(*call_args, **call_kwargs)
        if op == "call_method":   # what course_lib.runner.kernel does
            target, name, call_args, call_kwargs, in_place = args
            value = getattr(target, name)(*call_args, **call_kwargs)
            return (value, call_args, call_kwargs) if in_place else value
        if op == "getattr":
            return getattr(*args)
        if op == "special":
            target, operation, operation_args = args
            return {"len": len, "iter": iter, "next": next, "repr": repr}[operation](target, *operation_args)
        if op == "echo":
            return args[0]
        if op == "echo_after_a_late_reply":   # a reply to an earlier request the grader gave up on
            self.endpoint.send({"reply": args[0], "value": "late"})
            return args[1]
        if op == "use_shared":
            shared, method = args
            return getattr(shared, method)(5) if method != "__call__" else shared(5)
        if op == "raise_as":   # an exception class that claims to be someone else's
            module, qualname, message = args
            forged = type(qualname.rsplit(".", 1)[-1], (Exception,), {"__module__": module})
            forged.__qualname__ = qualname
            raise forged(message)
        if op == "lend_back":   # the student's code calls a lent object with the value it is given
            shared, value = args
            try:
                return shared(value)
            except Exception as error:   # what the student's code sees
                return f"{type(error).__name__}: {error}"
        raise ValueError(op)


@contextmanager
def channel_pair():
    to_kernel_read, to_kernel_write = os.pipe()
    to_grader_read, to_grader_write = os.pipe()
    handler = KernelHandler()
    kernel = Endpoint(to_kernel_read, to_grader_write, KERNEL, handler)
    handler.endpoint = kernel
    served = {}

    def grader_handler(op, args):
        if op == "call_shared":
            handle_id, method, call_args, call_kwargs = args
            shared = grader.exported(handle_id)
            if method not in shared.methods:
                raise PermissionError(method)
            target = shared.obj if method == "__call__" else getattr(shared.obj, method)
            served[method] = served.get(method, 0) + 1
            return target(*call_args, **call_kwargs)
        raise PermissionError(op)

    printed = []
    grader = Endpoint(to_grader_read, to_kernel_write, GRADER, grader_handler, on_output=printed.append)
    thread = threading.Thread(target=kernel.serve_forever, daemon=True)
    thread.start()
    try:
        yield grader, printed, served
    finally:
        grader.request("shutdown")
        thread.join(timeout=5)
        for fd in (to_kernel_read, to_kernel_write, to_grader_read, to_grader_write):
            os.close(fd)


@pytest.mark.parametrize("value", [
    None, True, 0, -7, 2**70, 1.5, float("inf"), "text", b"bytes", [1, [2, 3]], (1, "a"), {"a": 1, 2: "b"},
    {1, 2}, frozenset({3}), range(2, 10, 3), slice(1, 5), 1 + 2j,
])
def test_plain_values_cross_unchanged(value):
    with channel_pair() as (grader, _, _):
        assert grader.request("echo", value) == value


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_tensors_cross_by_value(dtype):
    tensor = (torch.arange(12).reshape(3, 4) % 3).to(dtype)
    with channel_pair() as (grader, _, _):
        back = grader.request("echo", tensor)
        assert type(back) is torch.Tensor and back.dtype == dtype and torch.equal(back, tensor)
        empty = grader.request("echo", torch.empty(0, 5))
        assert empty.shape == (0, 5)
        view = grader.request("echo", torch.arange(10)[::2])  # not contiguous
        assert view.tolist() == [0, 2, 4, 6, 8]


def test_tensors_keep_their_strides():
    """A kernel check hands strided views on purpose: they must arrive strided, not as contiguous copies."""
    qkv = torch.randn(5, 3 * 4 * 8)
    views = {
        "q slice of fused qkv": qkv[:, 32:64].view(5, 4, 8),
        "transposed": torch.randn(6, 7).t(),
        "expanded row (stride 0)": torch.randn(1, 9).expand(4, 9),
        "every other column": torch.randn(4, 10)[:, ::2],
        "offset into storage": torch.arange(40.0)[17:25],
    }
    with channel_pair() as (grader, _, _):
        for name, view in views.items():
            back = grader.request("echo", view)
            assert back.stride() == view.stride(), f"{name}: strides {back.stride()} != {view.stride()}"
            assert back.is_contiguous() == view.is_contiguous(), name
            assert torch.equal(back, view), name


def test_a_tensor_whose_bytes_do_not_match_its_strides_is_refused():
    from course_lib.runner.channel import ProtocolError, _rebuild_tensor

    with pytest.raises(ProtocolError, match="needs 7 elements"):
        _rebuild_tensor("float32", (2, 3), bytes(4 * 6), (4, 1))          # reaches 7 elements, 6 sent
    with pytest.raises(ProtocolError, match="bad strides"):
        _rebuild_tensor("float32", (2, 3), bytes(4 * 6), (-3, 1))


def test_numpy_and_stdlib_containers_become_plain():
    with channel_pair() as (grader, _, _):
        assert np.array_equal(grader.request("echo", np.arange(6).reshape(2, 3)), np.arange(6).reshape(2, 3))
        assert grader.request("echo", np.int64(5)) == 5 and type(grader.request("echo", np.int64(5))) is int
        counted = grader.request("echo", collections.Counter("aab"))
        assert type(counted) is dict and counted == {"a": 2, "b": 1}
        assert grader.request("echo", collections.deque([1, 2])) == [1, 2]
        Point = collections.namedtuple("Point", "x y")
        assert grader.request("echo", Point(1, 2)) == (1, 2)


def test_course_enums_and_frozen_dataclasses_cross_by_value():
    from course_lib.model import ModelConfig
    from course_lib.scheduler import RequestStatus

    config = ModelConfig(num_layers=1, hidden_size=8, num_q_heads=2, num_kv_heads=1, head_dim=4, vocab_size=10,
                         intermediate_size=16, max_position_embeddings=32, rope_theta=10000.0, rms_norm_eps=1e-5)
    with channel_pair() as (grader, _, _):
        assert grader.request("echo", RequestStatus.RUNNING) is RequestStatus.RUNNING
        assert grader.request("echo", config) == config


def test_student_objects_arrive_as_handles_with_identity_equality():
    with channel_pair() as (grader, printed, _):
        thing = grader.request("global", "thing")
        assert isinstance(thing, RemoteObject)
        assert thing == thing and not (thing == 42), "a student's __eq__ must not answer for the grader"
        assert grader.request("global", "thing") is thing, "one object, one handle"
        assert thing.value == 21
        assert thing.double() == 42
        assert len(thing) == 3 and list(thing) == [1, 2, 3]
        made = grader.request("global", "make_thing")(4)
        assert isinstance(made, RemoteObject) and made.value == 4
        assert grader.request("echo", thing) is thing, "a handle sent back stays the same handle"
        import copy

        assert copy.deepcopy(thing) is thing
        with pytest.raises(TypeError):
            pickle.dumps(thing)


def test_grader_objects_only_cross_when_lent_and_only_their_methods():
    class Model:
        def __call__(self, x):
            return x + 1

        def forward(self, x):
            return x * 10

        def secret(self):
            return "hidden"

    with channel_pair() as (grader, _, served):
        with pytest.raises(TypeError, match="cannot send"):
            grader.request("echo", Model())
        lent = Shared(Model(), ("__call__", "forward"))
        assert grader.request("use_shared", lent, "__call__") == 6
        assert grader.request("use_shared", lent, "forward") == 50
        with pytest.raises(AttributeError, match="only these methods"):
            grader.request("use_shared", lent, "secret")
        assert served == {"__call__": 1, "forward": 1}


def test_student_errors_never_become_the_checks_own_exceptions():
    with channel_pair() as (grader, _, _):
        with pytest.raises(StudentError) as caught:
            grader.request("global", "raise_fake_gpu")()
        assert caught.value.ename == "NeedsGPU"
        assert "raise NeedsGPU" in caught.value.remote_traceback


def test_rebuild_error_keeps_builtin_and_platform_types_only():
    from course_lib.paged import OutOfBlocksError

    assert type(rebuild_error(describe_error(ValueError("bad")), trusted=False)) is ValueError
    assert type(rebuild_error(describe_error(NotImplementedError()), trusted=False)) is NotImplementedError
    assert type(rebuild_error(describe_error(OutOfBlocksError("full")), trusted=False)) is OutOfBlocksError
    for module in ("course_lib.checks", "course_lib.runner.channel", "__main__"):
        forged = {"type": "CheckFailed", "module": module, "message": "looks like a pass", "traceback": ""}
        assert type(rebuild_error(forged, trusted=False)) is StudentError
    assert type(rebuild_error({"type": "SystemExit", "module": "builtins", "message": ""}, trusted=False)) \
        is StudentError


@pytest.mark.parametrize("payload", [
    pickle.dumps(os.system, protocol=5),                       # GLOBAL
    pickle.dumps(collections.OrderedDict(a=1), protocol=5),  # REDUCE
    b"\x80\x05cos\nsystem\n(S'true'\ntR.",                     # protocol 0 GLOBAL + REDUCE
    b"\x80\x05\x95",                                          # truncated
])
def test_the_grader_refuses_pickles_that_could_build_objects(payload):
    with pytest.raises(ProtocolError):
        check_opcodes(payload)


def test_plain_pickles_pass_the_opcode_check():
    check_opcodes(pickle.dumps([1, 2.0, "x", b"y", (None, True), [[]], ()], protocol=5))


_COLLIDING = [index * ((1 << 61) - 1) for index in range(1, 200_001)]   # 200,000 ints, one hash


def _long1(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


@pytest.mark.parametrize("container", [b"}(", b"\x8f("], ids=["dict", "set"])
def test_a_dict_or_set_the_frame_builds_itself_is_refused_before_a_key_is_hashed(container):
    """A 2.4 MB frame of a dict (or set) of 200,000 ints k * (2**61 - 1): they share one hash, so building it
    takes n**2 / 2 comparisons in C, where no alarm reaches (the grading process ran past its CPU limit and
    the submission went ungraded). The kernel sends dicts and sets as tuples; a frame that builds one is
    malformed, refused before anything is unpickled."""
    import time

    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    keys = b"".join(_long1(key) + (b"K\x00" if container == b"}(" else b"") for key in _COLLIDING)
    payload = b"\x80\x04" + container + keys + (b"u" if container == b"}(" else b"\x90") + b"."
    started = time.monotonic()
    with pytest.raises(ProtocolError, match="forbidden pickle opcode"):
        grader.loads(payload)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("value", [
    _COLLIDING[:5000],                                        # a list a check may make a set of
    tuple(_COLLIDING[:5000]),
    {key: 0 for key in _COLLIDING[:2000]},                    # (built here in a second; there from its pairs)
    [(key, "x") for key in _COLLIDING[:5000]],                # tuples whose first items collide collide too
], ids=["list", "tuple", "dict", "tuples"])
def test_items_made_to_share_one_hash_are_refused_on_receipt(value):
    """Keys that share a hash cost the square of their number once a dict or set is made of them, by the
    channel or by a check (``set(got)``): a container with more than MAX_SHARED_HASH different items of one
    hash is refused like a value past any other limit, and the channel goes on."""
    import time

    started = time.monotonic()
    with channel_pair() as (grader, _, _):
        with pytest.raises(ValueTooLarge, match="with one hash"):
            grader.request("echo", value)
        assert grader.request("echo", [1, 2]) == [1, 2]
    assert time.monotonic() - started < 10


def test_large_dicts_sets_and_repeated_items_still_cross():
    """Honest values: hashes that differ, and equal items (a repeated token id, a repeated pair) that share one."""
    values = [{index: str(index) for index in range(100_000)}, {(index, index + 1) for index in range(50_000)},
              frozenset(range(3000)), [0] * 100_000, [(1, 2)] * 5000, [2**70 + index for index in range(5000)],
              {"k": [1, {"nested": {3}}]}, collections.Counter("mississippi")]
    with channel_pair() as (grader, _, _):
        for value in values:
            got = grader.request("echo", value)
            assert got == value and type(got) is (dict if isinstance(value, dict) else type(value))


@pytest.mark.parametrize("pid", [
    ("tensor", "float32", ("30000", "30000"), b"\0" * 4, (0, 0), "cpu"),   # sizes as text: 3.6 GB as copied
    ("tensor", "float32", (30000.0, 30000.0), b"\0" * 4, (0, 0), "cpu"),
    ("tensor", "float32", (True,), b"\0" * 4, (1,), "cpu"),
    ("tensor", "float32", (2,), b"\0" * 8, ("1",), "cpu"),
    ("tensor", ["float32"], (1,), b"\0" * 4, (1,), "cpu"),
    ("ndarray", "<f4", ("2",), b"\0" * 8),
    ("ndarray", [("a", "<f4", (100_000_000,))], (1,), b"\0" * 4),
    ("range", "0", "40000000", "1"),                                      # list() of it: 1.5 GB
    ("range", 0, 40_000_000.0, 1),
    ("complex", "1e308", 1.0),
    ("device", ["cuda"]),
    ("dict", ("k",)),
    ("dict", ["k", 1]),
    ("set", [1, 2]),
    ("tensor", "float32"),
], ids=["text-sizes", "float-sizes", "bool-size", "text-stride", "list-dtype", "array-text-size",
        "array-list-dtype", "text-range", "float-range", "text-complex", "list-device", "odd-dict", "list-dict",
        "list-set", "short-tensor"])
def test_a_persistent_id_whose_fields_are_not_what_the_encoder_writes_is_malformed(pid):
    """The bound on tensors read the sizes only when they were ints, the rebuild turned text into ints: a
    30,000 x 30,000 float32 view of 4 bytes (3.6 GB once a check compared it) crossed a 256 MB limit. Every
    field is checked for its exact type first, so the measure and the build read the same values."""
    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    with pytest.raises(ProtocolError, match="malformed"):
        grader.loads(_frame_with_pid(pid))


_plain_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-2**300, max_value=2**300)
    | st.floats(allow_nan=False) | st.text() | st.binary() | st.text(min_size=300, max_size=400),
    lambda children: st.lists(children, max_size=6) | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=5), children, max_size=4)
    | st.frozensets(st.integers(), max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(value=_plain_data, protocol=st.integers(min_value=0, max_value=5))
def test_the_fast_opcode_walk_steps_where_pickletools_does(value, protocol):
    """check_opcodes walks the bytes itself (genops is too slow for every message): it must find the
    same opcodes at the same offsets, and refuse exactly the pickles that use a forbidden one."""
    from course_lib.runner.channel import _SAFE_OPCODES

    payload = pickle.dumps(value, protocol=protocol)
    opcodes = list(pickletools.genops(payload))
    if all(opcode.name in _SAFE_OPCODES for opcode, _, _ in opcodes):
        positions: list[int] = []
        check_opcodes(payload, positions)
        assert positions == [position for _, _, position in opcodes]
    else:   # old protocols spell sets and big ints with GLOBAL and REDUCE
        with pytest.raises(ProtocolError, match="forbidden"):
            check_opcodes(payload)


@settings(max_examples=200, deadline=None)
@given(value=_plain_data, cut=st.integers(min_value=1, max_value=50), junk=st.binary(min_size=1, max_size=4))
def test_a_truncated_or_garbled_pickle_is_refused_never_read_past(value, cut, junk):
    payload = pickle.dumps(value, protocol=5)
    with pytest.raises(ProtocolError):
        check_opcodes(payload[:max(0, len(payload) - cut)])
    garbled = payload[:-1] + junk   # STOP replaced: whatever the bytes are, the walk must end in a refusal
    if junk[:1] != pickle.STOP:
        try:
            check_opcodes(garbled)
        except ProtocolError:
            pass
        else:   # accepted only if the walk found a STOP, so the unpickler stops there too
            assert pickle.STOP in garbled


class _CheapHashPair(tuple):
    """A student's tuple look-alike with a constant hash: it crosses as a plain tuple (like a named tuple)."""

    _fields = ()

    def __hash__(self):
        return 0


def _doubling(leaf, depth, container):
    value = leaf
    for _ in range(depth):
        value = container((value, value))
    return value


@pytest.mark.parametrize("bomb", [
    # A dict keyed by a tuple of tuples 2**40 leaves wide: unpickling hashes the key, hours of C in the grader.
    lambda: {_CheapHashPair(_doubling(1, 40, tuple)): 1},
    lambda: frozenset({_CheapHashPair(_doubling(1, 40, tuple))}),
    # A list 2**31 items wide once unfolded: torch.tensor(...) of it in a check asks for 16 GiB.
    lambda: _doubling(1, 31, list),
    # A big string used a million times: each use counts its bytes.
    lambda: ["x" * 1_000_000] * 100_000,
], ids=["dict-key", "frozenset", "list", "string"])
def test_a_value_that_unfolds_into_billions_of_items_is_refused_before_it_is_built(bomb):
    """The memo lets a 200-byte pickle describe a value of 2**40 items; the grader refuses it before
    unpickling (where the hash of a dict key runs in C, out of reach of the cell's alarm)."""
    import time

    kernel = Endpoint(-1, -1, KERNEL, lambda op, args: None)
    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    payload = kernel.dumps({"reply": 1, "value": bomb()})
    assert len(payload) < 2_000_000
    started = time.monotonic()
    with pytest.raises(ProtocolError, match="unfolds into more than"):
        grader.loads(payload)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("nested", [
    b"\x8c\x04dict)" + b"\x85" * 2_000_000 + b"K\x01\x86\x86Q",  # {((((...)))): 1}: a tuple 2 million deep as a key
    b"]" + b"(" * 3000 + b"l" * 3000 + b"a",                     # [[[[...]]]]: lists 3000 deep
], ids=["dict-key", "lists"])
def test_a_value_nested_thousands_deep_is_refused(nested):
    """A kernel can write its own frames. Hashing the dict key of the first one (as building the dict does)
    recursed in C until the grader crashed with a segmentation fault; now it never gets that far."""
    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    # {"reply": 1, "value": nested}, as the kernel sends a dict: ("dict", (key, value, key, value)) by id
    payload = b"\x80\x04\x8c\x04dict(\x8c\x05replyK\x01\x8c\x05value" + nested + b"t\x86Q."
    with pytest.raises(ProtocolError, match="nested more than"):
        grader.loads(payload)


def test_many_shallow_containers_still_cross():
    kernel = Endpoint(-1, -1, KERNEL, lambda op, args: None)
    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    message = {"reply": 1, "value": [(index, [index, {"k": (index,)}]) for index in range(5000)]}
    assert grader.loads(kernel.dumps(message)) == message
    deep = [1]
    for _ in range(MAX_DEPTH - 1):   # the checks' values nest five deep at most
        deep = [deep]
    assert grader.loads(kernel.dumps({"reply": 1, "value": deep})) == {"reply": 1, "value": deep}


def test_a_tensor_view_that_describes_more_than_a_frame_is_refused():
    """A stride-0 view of 2**40 elements crosses in 4 bytes; a check's isfinite(got) on it would fill the
    grader's memory in C. Honest views (expanded, transposed) of a frame's size still cross as they are."""
    kernel = Endpoint(-1, -1, KERNEL, lambda op, args: None)
    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    huge = torch.zeros(1).expand(2**40)
    with pytest.raises(ValueTooLarge, match="as copied"):
        grader.loads(kernel.dumps({"reply": 1, "value": huge}))
    many = [torch.zeros(1).expand(2**25) for _ in range(5)]   # 128 MB each as copied, 640 MB together
    with pytest.raises(ValueTooLarge, match="512 MB of them in one value"):
        grader.loads(kernel.dumps({"reply": 1, "value": many}))
    view = torch.arange(6.0).reshape(1, 6).expand(1000, 6)
    got = grader.loads(kernel.dumps({"reply": 1, "value": view}))["value"]
    assert torch.equal(got, view) and got.stride() == (0, 1)


def test_a_value_that_contains_itself_is_refused():
    kernel = Endpoint(-1, -1, KERNEL, lambda op, args: None)
    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    looped: list = [1]
    looped.append(looped)
    with pytest.raises(ProtocolError, match="contains itself"):
        grader.loads(kernel.dumps({"reply": 1, "value": [looped]}))


@settings(max_examples=200, deadline=None)
@given(value=_plain_data, copies=st.integers(min_value=2, max_value=50))
def test_plain_data_with_shared_parts_crosses_unchanged(value, copies):
    """Honest sharing (the same list, string or tuple used several times) unfolds into little and passes."""
    kernel = Endpoint(-1, -1, KERNEL, lambda op, args: None)
    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    shared = [value] * copies
    message = {"reply": 1, "value": [shared, (value, value), {"k": shared}]}
    assert grader.loads(kernel.dumps(message)) == message


def test_a_method_call_on_a_handle_is_one_request_and_looks_the_method_up_when_called():
    with channel_pair() as (grader, printed, _):
        thing = grader.request("global", "thing")
        sent = []
        original_send = grader.send
        grader.send = lambda message: (sent.append(message.get("op")), original_send(message))[1]
        method = thing.double
        assert isinstance(method, RemoteMethod) and sent == [], "reading a method costs no request"
        assert method() == 42 and sent == ["call_method"]
        assert thing.double == method and hash(thing.double) == hash(method)
        assert "double" in repr(method)
        sent.clear()
        assert thing.value == 21 and sent == ["getattr"], "a data attribute is still read when asked"
        grader.send = original_send
        # The kernel looks the method up when the call arrives, as Python would: an attribute of the
        # instance with the method's name wins over the class's method.
        assert grader.request("global", "shadowed").double() == "the instance's own"
    with channel_pair() as (grader, _, _):
        thing = grader.request("global", "thing")
        echoed = grader.request("echo", thing.double)   # goes home as the bound method, comes back as a handle
        assert isinstance(echoed, RemoteObject) and echoed() == 42


def test_a_module_from_the_kernel_is_a_handle_and_never_imported_in_the_grader():
    """A module object the kernel returns crosses as a handle; a frame that names a module (the old way,
    or an enum of a course module the grader never loaded) is refused without importing anything."""
    import io
    import sys

    with channel_pair() as (grader, _, _):
        module = grader.request("global", "a_module")
        assert isinstance(module, RemoteObject) and module is not os
    to_read, to_write = os.pipe()
    try:
        endpoint = Endpoint(to_read, to_write, GRADER, lambda op, args: None)
        unloaded = "course_lib.runner.__never_loaded__"

        class Persistent(pickle.Pickler):
            def persistent_id(self, obj):
                return obj if isinstance(obj, tuple) and obj and obj[0] in ("module", "enum", "dataclass") else None

        for pid in [("module", "course_lib.server.__main__"), ("enum", unloaded, "Kind", "A"),
                    ("dataclass", unloaded, "Thing", {})]:
            buffer = io.BytesIO()
            Persistent(buffer, protocol=5).dump({"reply": 1, "value": pid})
            loaded = sys.modules.pop(pid[1], None)   # another test in this process may have imported it
            try:
                with pytest.raises(ProtocolError):
                    endpoint.loads(buffer.getvalue())
                assert pid[1] not in sys.modules
            finally:
                if loaded is not None:
                    sys.modules[pid[1]] = loaded
        assert rebuild_error({"type": "Boom", "module": unloaded, "message": "x"}, trusted=False).ename == "Boom"
        assert unloaded not in sys.modules
    finally:
        os.close(to_read)
        os.close(to_write)


def test_a_write_to_a_kernel_that_stopped_reading_ends_at_the_deadline():
    """write_frame never blocks past its deadline: on_timeout decides (here: give up)."""
    import time

    from course_lib.runner.channel import ChannelTimeout, write_frame

    read_fd, write_fd = os.pipe()
    try:
        started = time.monotonic()
        with pytest.raises(ChannelTimeout):
            write_frame(write_fd, b"x" * (4 << 20), deadline=time.monotonic() + 0.5)
        assert time.monotonic() - started < 5
        calls = []

        def on_timeout():
            calls.append(1)
            if len(calls) > 1:
                raise TimeoutError("given up")
            return time.monotonic() + 0.2

        with pytest.raises(TimeoutError, match="given up"):
            write_frame(write_fd, b"x" * (4 << 20), deadline=time.monotonic() + 0.2, on_timeout=on_timeout)
        assert len(calls) == 2
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_the_grader_reads_no_frame_larger_than_its_kernel_limit():
    from course_lib.runner.channel import MAX_KERNEL_FRAME_BYTES, FrameReader

    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, (MAX_KERNEL_FRAME_BYTES + 1).to_bytes(8, "big"))
        with pytest.raises(ProtocolError, match="limit"):
            FrameReader(read_fd, MAX_KERNEL_FRAME_BYTES).read(deadline=None)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_exception_messages_and_tracebacks_cross_clipped_both_ways():
    from course_lib.runner.bounded import MESSAGE_BYTES, TRACEBACK_BYTES

    described = describe_error(ValueError("m" * (30 << 20)))
    assert len(described["message"]) < MESSAGE_BYTES + 200 and "bytes of error message cut" in described["message"]
    forged = {"type": "T" * 10_000, "module": "__main__", "message": "x" * (5 << 20), "traceback": "t" * (5 << 20)}
    rebuilt = rebuild_error(forged, trusted=False)
    assert isinstance(rebuilt, StudentError)
    assert len(str(rebuilt)) < MESSAGE_BYTES + 1000
    assert len(rebuilt.remote_traceback) < TRACEBACK_BYTES + 200
    assert rebuild_error("not a dict", trusted=False) is not None


def test_a_late_reply_to_an_abandoned_request_is_dropped():
    """A request the grader gave up on (its cell timed out) may be answered later: that reply must not
    be taken for the next request's, nor break the channel."""
    with channel_pair() as (grader, _, _):
        grader._abandoned.add(10_000)
        assert grader.request("echo_after_a_late_reply", 10_000, "fresh") == "fresh"
        with pytest.raises(ProtocolError):   # a reply to a request never made is still refused
            grader.request("echo_after_a_late_reply", 20_000, "fresh")


# ---- nothing from the kernel is the grader's own (docs/trust-model.md) ----------------------------

FORGED_ERRORS = [
    ("course_lib", "runner.student.KernelDied"),        # the forgery: reached through attributes
    ("course_lib.runner.student", "KernelDied"),
    ("course_lib.runner.student", "CellTimeout"),
    ("course_lib.runner.receipt", "ValueTooLarge"),
    ("course_lib.runner.channel", "ProtocolError"),
    ("course_lib.checks", "CheckFailed"),
    ("course_lib.checks", "NeedsGPU"),
    ("course_lib", "checks.CheckFailed"),
    ("course_lib", "paged.OutOfBlocksError"),           # a library error, but not under its own name
    ("course_lib.server.shipping", "ShippingError"),     # a library error no check expects
    ("builtins", "KeyboardInterrupt"),
    ("builtins", "SystemExit"),
    ("__main__", "KernelDied"),
]


@pytest.mark.parametrize("module, qualname", FORGED_ERRORS)
def test_an_error_from_the_kernel_is_the_students_whatever_it_claims(module, qualname):
    """A student's class that names itself course_lib + runner.student.KernelDied was rebuilt as the grader's
    own KernelDied, which the grader trusted with its text (42 KB of hidden inputs came out that way). Every
    error from the kernel is now a StudentError (its name kept as the student gave it) or, for built-in and a
    few library types, that type; either way marked as the kernel's."""
    import course_lib.runner.student  # noqa: F401 - the grader has its own classes loaded
    from course_lib.runner.channel import from_kernel

    info = {"type": qualname, "module": module, "message": "limit of SECRET files in the scratch folder reached",
            "traceback": ""}
    error = rebuild_error(info, trusted=False)
    assert type(error) is StudentError and error.ename == qualname
    assert from_kernel(error)
    with channel_pair() as (grader, _, _):
        with pytest.raises(StudentError) as raised:
            grader.request("raise_as", module, qualname, "forged")
        assert raised.value.ename == qualname and from_kernel(raised.value)


def test_builtin_and_listed_library_errors_keep_their_type_and_are_marked_as_the_kernels():
    import course_lib.paged  # noqa: F401
    from course_lib.paged import OutOfBlocksError
    from course_lib.runner.channel import from_kernel

    for error in (ValueError("v"), KeyError("k"), StopIteration(), FileNotFoundError("f"), OutOfBlocksError("o")):
        rebuilt = rebuild_error(describe_error(error), trusted=False)
        assert type(rebuilt) is type(error) and from_kernel(rebuilt)
    assert not from_kernel(ValueError("the grader's own"))


@pytest.mark.parametrize("value, words", [
    (range(40_000_000), "range of 40,000,000 items"),
    (range(0, 2**5000, 2**4990), "int of 5,001 bits"),
    (range(2**4000), "range of"),
    (list(range(MAX_ITEMS + 1)), f"list of {MAX_ITEMS + 1:,} items"),
    ({index: index for index in range(MAX_ITEMS + 1)}, "dict of"),
    ("x" * (MAX_STR_CHARS + 1), "string of"),
    (b"x" * (MAX_BYTES + 1), "bytes value of"),
    (2 ** (MAX_INT_BITS + 1), "int of"),
    ([[index] * 900 for index in range(MAX_MESSAGE_ITEMS // 900 + 1)], "items in one value"),
], ids=["range", "range-end", "range-len", "list", "dict", "str", "bytes", "int", "message"])
def test_a_value_past_a_limit_is_refused_on_receipt_and_the_channel_goes_on(value, words):
    """range(40_000_000) crosses as three ints; the batching check's list() of it took 1.5 GB of the grader's
    memory in one C call. Each kind of value is measured before a check sees it; one past a limit is refused
    with a sentence, the check gets ValueTooLarge (no ValueError: a check expecting one must not be fooled),
    and the kernel and the channel go on."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with channel_pair() as (grader, _, _):
        with pytest.raises(ValueTooLarge, match=words) as refused:
            grader.request("echo", value)
        assert not isinstance(refused.value, (ValueError, TypeError))
        assert grader.request("echo", [1, 2, 3]) == [1, 2, 3]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 600, f"the test process's peak memory grew {grown_mb:.0f} MB"


def test_values_as_large_as_the_checks_need_still_cross():
    """The largest values the reference answers of every lab send the grader (measured), with room to spare."""
    ids = list(range(200_000))
    nested = [1]
    for _ in range(MAX_DEPTH - 1):
        nested = [nested]
    with channel_pair() as (grader, _, _):
        assert grader.request("echo", ids) == ids
        assert grader.request("echo", range(MAX_ITEMS)) == range(MAX_ITEMS)
        assert grader.request("echo", "é" * 1_000_000) == "é" * 1_000_000
        assert grader.request("echo", nested) == nested
        assert grader.request("echo", torch.zeros(512, 49_152)).shape == (512, 49_152)
        assert grader.request("echo", {"k": 2**4000}) == {"k": 2**4000}


def test_a_request_from_the_kernel_with_a_value_past_a_limit_fails_in_the_students_code():
    calls = []
    lent = Shared(lambda value: calls.append(value) or "served", ("__call__",))
    with channel_pair() as (grader, _, _):
        assert grader.request("lend_back", lent, [1, 2]) == "served"
        answer = grader.request("lend_back", lent, range(40_000_000))
        assert answer.startswith("ValueTooLarge: your code gave the grader a range of 40,000,000 items")
        assert calls == [[1, 2]], "the lent object never saw the refused value"


def _frame_with_pid(pid: tuple) -> bytes:
    """A reply whose value is the persistent id ``pid``: what a kernel that writes its own frames sends."""
    import io

    from course_lib.runner.channel import _hashed_pid

    marker = object()

    class Forger(pickle.Pickler):
        def persistent_id(self, obj):
            if obj is marker:
                return pid
            return _hashed_pid(obj) if type(obj) is dict else None   # dicts as the kernel sends them

    buffer = io.BytesIO()
    Forger(buffer, protocol=5).dump({"reply": 1, "value": marker})
    return buffer.getvalue()


@pytest.mark.parametrize("pid", [
    ("dataclass", "course_lib.runner.limits", "KernelLimits", {"memory": 1 << 40}),   # the grader's own
    ("dataclass", "course_lib", "runner.limits.KernelLimits", {"memory": 1 << 40}),   # reached through attributes
    ("dataclass", "course_lib", "model_config.ModelConfig", {}),                       # not its own name
    ("dataclass", "course_lib.scheduler", "Request", {"request_id": 1}),              # mutable: a handle, never a value
    ("enum", "course_lib", "scheduler.RequestStatus", "RUNNING"),
    ("enum", "course_lib.runner.sandbox", "Isolation", "NONE"),
], ids=["runner", "runner-by-attribute", "by-attribute", "mutable", "enum-by-attribute", "runner-enum"])
def test_a_course_object_is_rebuilt_only_under_its_own_name_and_never_the_platforms(pid):
    import course_lib.model_config  # noqa: F401
    import course_lib.runner.limits  # noqa: F401
    import course_lib.scheduler  # noqa: F401

    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    with pytest.raises(ProtocolError):
        grader.loads(_frame_with_pid(pid))


def test_what_a_handle_says_about_itself_is_kept_small():
    grader = Endpoint(-1, -1, GRADER, lambda op, args: None)
    info = {"type": "T" * 100_000, "callable": "yes", "class_methods": [f"m{i}" for i in range(100_000)] + [7],
            "injected": "x"}
    handle = grader.loads(_frame_with_pid(("handle", KERNEL, 5, info)))["value"]
    assert len(handle._info["type"]) < 1000 and handle._info["callable"] is False and "injected" not in handle._info
    assert len(handle._info["class_methods"]) <= 1000


def test_a_reply_whose_id_is_not_a_number_is_a_malformed_message():
    """{"reply": [1]}: the grader's lookup among abandoned requests raised TypeError (unhashable) in the check."""
    with channel_pair() as (grader, _, _):
        grader._abandoned.add(10_000)
        with pytest.raises(ProtocolError, match="without a request id"):
            grader.request("echo_after_a_late_reply", [10_000], "fresh")
        assert grader.failure is not None


def test_a_dict_that_holds_itself_is_an_error_of_the_students_code_and_the_channel_goes_on():
    """Dicts cross as tuples of their items, so one that holds itself cannot be encoded: the reply is the
    error (a RecursionError, as the student's), never a broken channel."""
    looped: dict = {"name": "loop"}
    looped["self"] = looped
    with channel_pair() as (grader, _, _):
        with pytest.raises(RecursionError):
            grader.request("echo", looped)
        assert grader.request("echo", {"fine": 1}) == {"fine": 1}
