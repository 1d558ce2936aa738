"""The channel between the grader and one student kernel: plain data, tensors and handles, nothing else.

A graded notebook's code runs in a separate, isolated process (the *kernel*, see ``kernel.py``);
the checks run in the grader. They talk over a pair of pipes, one message at a time, and every
message is a length-prefixed frame of a *restricted* pickle:

- Values that cross by value: None, bools, ints, floats, complex numbers, strings, bytes, lists,
  tuples, dicts, sets, ranges, slices, torch tensors and numpy arrays (rebuilt from their raw
  bytes on the receiving side, so a tensor subclass with a clever ``__eq__`` arrives as a plain
  tensor), torch dtypes and devices, the members of ``course_lib`` enums and its frozen dataclasses
  (looked up in the receiver's own library; from the kernel, only under their own names and never
  the platform's). Standard containers (Counter, defaultdict, deque, named tuples) become dicts,
  lists and tuples. On the grader's side every value is measured on receipt (``receipt``): one past
  a limit (a ``range(40_000_000)``, a 30-million-item list) is refused with ``ValueTooLarge``.
- Everything else the kernel sends becomes a *handle*: a numbered entry in the sender's table of
  exported objects, which the receiver sees as a ``RemoteObject`` proxy. Calling the proxy, reading
  its attributes or iterating it sends a request back to the owner. A handle sent back to its owner
  turns into the original object again.
- The grader sends only plain data, proxies it received (back to their owner) and objects it lends
  explicitly (``Shared``: the kernel may call the named methods and nothing else).

The grader never unpickles a class: ``find_class`` refuses everything, and before loading a frame
from the kernel the grader checks that the pickle uses only the opcodes of plain data and of
persistent ids (no REDUCE, BUILD, GLOBAL...), so a hand-made frame can neither run code in the
grader nor change one of its objects. Nor does the unpickler build a dict or a set from the kernel:
hashing their keys is quadratic when the keys share one hash (200,000 ints ``k * (2**61 - 1)``, a
2.4 MB frame, kept the grader's C code busy past its CPU limit), so the kernel sends each as its
lists of keys and values, and the grader builds it only once those lists are measured, their
hashes included (``receipt``). Each persistent id's fields are checked for their exact types
before they are measured, and the object is built from those fields as they are (a tensor's
sizes sent as text once slipped past the measure, which skipped them, into the build, which
read them as ints). Modules never cross: a module the student's code returns
is a handle like any other object, and a test cell imports what it needs itself. Exceptions cross
as (type name, module, message, traceback text), each clipped to a few kilobytes; the grader
rebuilds every one as the student's error (``rebuild_error``), never as one of its own classes.
docs/trust-model.md gives the rule for each kind of object, and the test that forges it.

Every wait is bounded: a read and a write both end at the current deadline (a kernel that stops
itself, ``SIGSTOP``, after reading half a request blocks the grader's write no longer than a read),
and then ``on_timeout`` decides (interrupt, then kill). Frames from the kernel are at most
``MAX_KERNEL_FRAME_BYTES``.

``Endpoint`` is the request/reply loop on either side. It is re-entrant: while one side waits for a
reply it serves the other side's requests (the grader calls the student's scheduler, which calls
the grader's allocator, which ...), all on one thread.
"""

from __future__ import annotations

import builtins
import collections
import dataclasses
import enum
import importlib
import io
import itertools
import math
import os
import pickle
import pickletools
import select
import struct
import sys
import threading
import time
import traceback
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from course_lib.runner.receipt import (HASH_CHECKED_ITEMS, ValueTooLarge, copied_bytes, hash_refusal, message_refusal, range_refusal,
                                      refusal, tensor_refusal)

__all__ = [
    "ChannelClosed",
    "ChannelTimeout",
    "Endpoint",
    "ProtocolError",
    "RemoteMethod",
    "RemoteObject",
    "Shared",
    "StudentError",
    "describe_error",
    "rebuild_error",
]

_HEADER = struct.Struct("!Q")
MAX_FRAME_BYTES = 1 << 31  # 2 GiB: what the grader may send (no honest message comes near it)
MAX_KERNEL_FRAME_BYTES = 256 << 20  # what the grader reads from a kernel: tensors of a check's sizes fit easily
WRITE_GRACE_S = 30  # a frame whose first bytes left gets this long past the deadline to finish
KERNEL, GRADER = "kernel", "grader"


class ChannelClosed(EOFError):
    """The other side closed the channel (its process ended)."""


class ChannelTimeout(TimeoutError):
    """No message arrived before the deadline."""


class ProtocolError(RuntimeError):
    """A frame that is not a valid message of this protocol."""


class StudentError(Exception):
    """An exception raised by the student's code whose type the grader does not rebuild.

    ``ename`` is the original type's name (what the feedback shows); the message follows it.
    """

    def __init__(self, ename: str, message: str) -> None:
        super().__init__(f"{ename}: {message}" if message else ename)
        self.ename = ename


# --------------------------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------------------------


PIPE_BYTES = 1 << 20  # a megabyte pipe buffer: a tensor argument crosses in one write, not sixteen


def widen_pipe(fd: int) -> None:
    """Ask Linux for a larger pipe buffer (F_SETPIPE_SZ); elsewhere, or past the system's cap, keep the default."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except (ImportError, OSError):
        pass


def write_frame(fd: int, payload: bytes, deadline: float | None = None,
                on_timeout: Callable[[], float] | None = None) -> None:
    """Send one frame (length + payload); with a ``deadline`` (``time.monotonic()``), never block past it.

    The descriptor is made non-blocking and each write waits (``select``) only until the deadline;
    then ``on_timeout()`` gives a new deadline or raises (a kernel that stopped reading is killed).
    Without ``on_timeout`` a late write raises ChannelTimeout, and the channel is unusable.
    """
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    if deadline is not None:
        os.set_blocking(fd, False)
    while data:
        if deadline is not None:
            wait = deadline - time.monotonic()
            ready = wait > 0 and select.select([], [fd], [], wait)[1]
            if not ready:
                if on_timeout is None:
                    raise ChannelTimeout(f"the other side stopped reading ({len(data)} bytes not sent)")
                deadline = on_timeout()
                continue
        try:
            written = os.write(fd, data)
        except BlockingIOError:   # a descriptor left non-blocking by an earlier write with a deadline
            if deadline is None:
                select.select([], [fd], [])
            continue
        except BrokenPipeError:
            raise ChannelClosed("the other side of the channel is gone") from None
        data = data[written:]


class FrameReader:
    """Frames from a blocking file descriptor, read in chunks of up to a megabyte.

    A small message (most requests and replies: a method call, a list of block ids) usually arrives
    whole in one read, so it costs one ``select`` and one ``read`` instead of two of each (header,
    then payload): a check may exchange a hundred thousand of them with the kernel.
    """

    CHUNK = 1 << 20

    def __init__(self, fd: int, max_frame: int = MAX_FRAME_BYTES) -> None:
        self.fd = fd
        self.max_frame = max_frame
        self._buffer = bytearray()

    def read(self, deadline: float | None = None) -> bytes:
        """Receive one frame; ``deadline`` is a ``time.monotonic()`` value (None: wait forever)."""
        self._fill(_HEADER.size, deadline)
        (size,) = _HEADER.unpack_from(self._buffer)
        if size > self.max_frame:
            raise ProtocolError(f"frame of {size} bytes announced; the limit is {self.max_frame}")
        # Once a frame has started, the rest follows at once: give it time even past the deadline.
        self._fill(_HEADER.size + size, None if deadline is None else max(deadline, time.monotonic() + WRITE_GRACE_S))
        end = _HEADER.size + size
        with memoryview(self._buffer) as view:
            frame = bytes(view[_HEADER.size:end])
        del self._buffer[:end]
        return frame

    def _fill(self, needed: int, deadline: float | None) -> None:
        while len(self._buffer) < needed:
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0 or not select.select([self.fd], [], [], wait)[0]:
                    raise ChannelTimeout(f"no message within the time limit ({len(self._buffer)} of {needed} "
                                         "bytes read)")
            chunk = os.read(self.fd, min(max(needed - len(self._buffer), 1 << 16), self.CHUNK))
            if not chunk:
                raise ChannelClosed("the other side of the channel closed it")
            self._buffer += chunk


# --------------------------------------------------------------------------------------------
# What may cross, and how
# --------------------------------------------------------------------------------------------

_PLAIN = frozenset({type(None), bool, int, float, str, bytes, list, tuple, dict, set, frozenset})

# Opcodes of plain data, lists, tuples, the memo and persistent ids: everything else (GLOBAL, REDUCE,
# BUILD, INST, OBJ, NEWOBJ, EXT*, buffers) could build or change arbitrary objects, and the dict and
# set opcodes would hash keys in C before anything is measured (the kernel sends dicts and sets as
# persistent ids of their lists, ``_hashed_pid``).
_SAFE_OPCODES = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
    "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE",
    "BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GET", "BINGET", "LONG_BINGET",
    "PERSID", "BINPERSID",
})
_HASHED = frozenset({dict, set, frozenset})
_HASHED_TAGS = frozenset({"dict", "set", "frozenset"})

@dataclass(frozen=True)
class Shared:
    """A grader object lent to the kernel: it may call ``methods`` ("__call__" for the object itself)."""

    obj: Any
    methods: tuple[str, ...]


def _enum_pid(member: enum.Enum) -> tuple | None:
    cls = type(member)
    if (cls.__module__ or "").startswith("course_lib"):
        return ("enum", cls.__module__, cls.__qualname__, member.name)
    return None


def _dataclass_pid(obj: Any, side: str) -> tuple | None:
    """course_lib dataclasses cross by value: frozen ones both ways, mutable ones only to the kernel.

    A mutable dataclass the student's code holds (a Request its scheduler moves along) must keep its
    identity, so from the kernel it travels as a handle; a check that needs to see the student's
    changes to one of its own builds it in the kernel with ``checks.make``.
    """
    kind = type(obj)
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return None
    if not (kind.__module__ or "").startswith("course_lib") or kind.__qualname__.startswith("_") \
            or "._" in kind.__qualname__ or "<" in kind.__qualname__:
        return None
    if not kind.__dataclass_params__.frozen and side == KERNEL:
        return None
    values = {field.name: getattr(obj, field.name) for field in dataclasses.fields(obj) if field.init}
    return ("dataclass", kind.__module__, kind.__qualname__, values)


def _hashed_pid(obj: dict | set | frozenset) -> tuple:
    """A dict, set or frozenset as a tuple of what it holds: ``("dict", (key, value, key, value...))``,
    ``("set", (item, item...))``. How the kernel sends them (the grader's unpickler builds no dict or set:
    see the module docstring)."""
    if isinstance(obj, dict):
        return ("dict", tuple(itertools.chain.from_iterable(obj.items())))
    return ("frozenset" if isinstance(obj, frozenset) else "set", tuple(obj))


def _build_hashed(tag: str, flat: tuple) -> dict | set | frozenset:
    """The dict, set or frozenset ``_hashed_pid`` describes (its keys' hashes checked, on the grader)."""
    if tag == "dict":
        if len(flat) % 2:
            raise ProtocolError(f"malformed dict: {len(flat)} items, not pairs of a key and a value")
        pairs = iter(flat)
        return dict(zip(pairs, pairs))
    return set(flat) if tag == "set" else frozenset(flat)


def _stdlib_container_pid(obj: Any) -> tuple | None:
    """Standard containers become their plain equivalents (a Counter is a dict of counts)."""
    if isinstance(obj, (collections.Counter, collections.OrderedDict, collections.defaultdict)):
        return _hashed_pid(obj)
    if isinstance(obj, collections.deque):
        return ("list", list(obj))
    if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):  # a named tuple
        return ("tuple", tuple(obj))
    return None


class _Pickler(pickle.Pickler):
    def __init__(self, file, endpoint: "Endpoint") -> None:
        super().__init__(file, protocol=5)
        self.endpoint = endpoint

    def persistent_id(self, obj: Any):  # noqa: C901 - one dispatch on the kinds of values
        kind = type(obj)
        if kind in _PLAIN:
            return _hashed_pid(obj) if kind in _HASHED and self.endpoint.side == KERNEL else None
        if isinstance(obj, (RemoteObject, _SharedProxy)):
            return ("ref", obj._owner, obj._id)
        if isinstance(obj, RemoteMethod):
            return ("method", obj._target._owner, obj._target._id, obj._name)
        if isinstance(obj, Shared):
            return ("handle", self.endpoint.side, self.endpoint.export(obj), _describe(obj.obj, obj.methods))
        module = kind.__module__
        if module == "torch" or module.startswith("torch."):
            encoded = _torch_pid(obj)
            if encoded is not None:
                return encoded
        if module == "numpy" or module.startswith("numpy."):
            encoded = _numpy_pid(obj)
            if encoded is not None:
                return encoded
        if kind is complex:
            return ("complex", obj.real, obj.imag)
        if kind is bytearray:
            return ("bytes", bytes(obj))
        if kind is range:
            return ("range", obj.start, obj.stop, obj.step)
        if kind is slice:
            return ("slice", obj.start, obj.stop, obj.step)
        if isinstance(obj, enum.Enum):
            encoded = _enum_pid(obj)
            if encoded is not None:
                return encoded
        encoded = _dataclass_pid(obj, self.endpoint.side)
        if encoded is not None:
            return encoded
        encoded = _stdlib_container_pid(obj)
        if encoded is not None:
            return encoded
        if self.endpoint.side == KERNEL:  # a module too: the grader never imports a module the kernel names
            return ("handle", KERNEL, self.endpoint.export(obj), _describe(obj))
        raise TypeError(
            f"the grader cannot send a {kind.__module__}.{kind.__qualname__} to the student's kernel: pass plain "
            "data, build the object there with checks.make(...), or lend it with checks.share(...)"
        )


def _torch_pid(obj: Any) -> tuple | None:
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.layout is not torch.strided or obj.is_quantized:
            raise TypeError(f"only dense tensors cross the channel, got layout {obj.layout}")
        return _encode_tensor(obj.detach())
    if isinstance(obj, torch.Size):
        return ("tuple", tuple(obj))
    if isinstance(obj, torch.dtype):
        return ("dtype", str(obj).removeprefix("torch."))
    if isinstance(obj, torch.device):
        return ("device", str(obj))
    return None


def _storage_span(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Storage elements a view of ``shape`` and ``stride`` reaches, from its first element on."""
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride))


def _encode_tensor(tensor) -> tuple:
    """A tensor as its dtype, shape, strides, device and the storage bytes its view reaches.

    Strides cross as they are: a check that hands a kernel a strided view (a slice of a fused QKV
    tensor, a transposed matrix, an expanded row) must test the kernel on that layout, not on a
    contiguous copy. So does the device: a CUDA tensor stays on the GPU of a GPU worker.
    """
    import torch

    shape, stride = tuple(tensor.shape), tuple(tensor.stride())
    span = _storage_span(shape, stride)
    region = torch.as_strided(tensor, (span,), (1,)).to("cpu").contiguous() if span else tensor.new_empty(0, device="cpu")
    raw = region.view(torch.uint8).numpy().tobytes() if span else b""
    return ("tensor", str(tensor.dtype).removeprefix("torch."), shape, raw, stride, str(tensor.device))


def _numpy_pid(obj: Any) -> tuple | None:
    import numpy as np

    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            return None
        array = np.ascontiguousarray(obj)
        return ("ndarray", array.dtype.str, tuple(array.shape), array.tobytes())
    if isinstance(obj, np.generic) and not isinstance(obj, np.object_):
        return ("value", obj.item())
    return None


def _describe(obj: Any, methods: tuple[str, ...] | None = None) -> dict:
    kind = type(obj)
    info = {"type": f"{kind.__module__}.{kind.__qualname__}", "callable": callable(obj),
            "is_class": isinstance(obj, type)}
    name = getattr(obj, "__qualname__", None) if isinstance(obj, type) or callable(obj) else None
    if isinstance(name, str):
        info["name"] = name
    if methods is not None:
        info["methods"] = list(methods)
    elif not isinstance(obj, type):
        info["class_methods"] = _class_methods(kind)
    return info


def _class_methods(kind: type) -> list[str]:
    """Names of the plain functions ``kind`` defines or inherits (not object's): its methods.

    Sent with a handle so that ``handle.method(...)`` costs one request (``call_method``) instead of
    two (read the attribute, then call it). The kernel still looks the attribute up when the call
    arrives, so an instance attribute or a method replaced later wins, as it would locally.
    """
    names: set[str] = set()
    for cls in kind.__mro__:
        if cls is object:
            continue
        names.update(name for name, value in vars(cls).items()
                     if isinstance(value, types.FunctionType) and not name.startswith("__"))
    return sorted(names)


def _rebuild_tensor(dtype_name: str, shape: tuple, raw: bytes, stride: tuple | None = None,
                    device_name: str = "cpu"):
    """The tensor ``_encode_tensor`` described: same dtype, shape, strides, and device when this side has it."""
    import torch

    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise ProtocolError(f"unknown tensor dtype {dtype_name!r}")
    if stride is not None and (len(stride) != len(shape) or any(step < 0 for step in stride)):
        raise ProtocolError(f"bad strides {stride} for shape {shape}")
    device = _receiving_device(device_name)
    span = _storage_span(shape, stride) if stride is not None else math.prod(shape)
    if not raw or span == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)
    if flat.numel() != span:
        raise ProtocolError(f"a tensor of shape {shape} and strides {stride} needs {span} elements, got {flat.numel()}")
    flat = flat.to(device)
    return flat.as_strided(shape, stride) if stride is not None else flat.reshape(shape)


def _receiving_device(device_name: str):
    """``device_name`` if this process can use it (a CUDA tensor on a GPU worker), else the CPU."""
    import torch

    try:
        device = torch.device(device_name)
    except (RuntimeError, TypeError):
        raise ProtocolError(f"unknown device {device_name!r}") from None
    if device.type == "cuda" and torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count():
        return device
    return torch.device("cpu")


def _rebuild_ndarray(dtype_str: str, shape: tuple, raw: bytes):
    import numpy as np

    dtype = np.dtype(dtype_str)
    if dtype.hasobject:
        raise ProtocolError("numpy arrays of Python objects do not cross the channel")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


# The platform's modules, whose objects the grader never rebuilds from a name the kernel sends: the
# runner (the grader's own deaths, timeouts and limits), the student's tools and commands. (The checks'
# frozen dataclasses do cross back: a check lends a ConfigSizes, and a call in place returns it.)
PLATFORM_MODULES = ("course_lib.runner", "course_lib.handin", "course_lib.commands", "course_lib.cli")


def _resolve_course_attribute(module_name: str, qualname: str, *, import_missing: bool = True) -> Any:
    """``module_name.qualname`` of course_lib. ``import_missing=False`` (a name the kernel chose): only a
    module this process has already imported, so no name from the kernel ever runs a module's code here;
    no module of ``PLATFORM_MODULES``; and only an object that is what the name says, defined there
    under that name (``course_lib`` + ``runner.student.KernelDied`` reaches the grader's KernelDied
    through attributes, but it is not ``course_lib.KernelDied``)."""
    if not isinstance(module_name, str) or not isinstance(qualname, str) \
            or not (module_name == "course_lib" or module_name.startswith("course_lib.")):
        raise ProtocolError(f"only course_lib names may be looked up, got {module_name!r}")
    if import_missing:
        target: Any = importlib.import_module(module_name)
    else:
        if _in_platform(module_name):
            raise ProtocolError(f"{module_name} is the grader's own: its names are not looked up for the kernel")
        target = sys.modules.get(module_name)
        if target is None:
            raise ProtocolError(f"{module_name} is not loaded in the grader; a check that expects its objects "
                                "imports it")
    for part in qualname.split("."):
        if part.startswith("_"):
            raise ProtocolError(f"private name {qualname!r} may not be looked up")
        target = getattr(target, part)
    if not import_missing and (getattr(target, "__module__", None) != module_name
                               or getattr(target, "__qualname__", None) != qualname):
        raise ProtocolError(f"{module_name}.{qualname} is not defined under that name")
    return target


def _in_platform(module_name: str) -> bool:
    return any(module_name == wing or module_name.startswith(wing + ".") for wing in PLATFORM_MODULES)


class _Unpickler(pickle.Unpickler):
    """Plain data and the objects of persistent ids; on the grader's side, each of those bounded as it is
    built (``receipt``): one past a limit becomes None and its sentence goes to ``refusals``."""

    def __init__(self, file, endpoint: "Endpoint") -> None:
        super().__init__(file)
        self.endpoint = endpoint
        self.refusals: list[str] = []
        self.tensor_bytes = 0   # of the tensors and arrays built so far, as copied

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"the channel carries no classes ({module}.{name} refused)")

    def persistent_load(self, pid: Any):
        if not isinstance(pid, tuple) or not pid or not isinstance(pid[0], str):
            raise ProtocolError(f"malformed persistent id {pid!r}")
        if self.endpoint.side == GRADER:
            if pid[0] in _HASHED_TAGS and len(pid) == 2 and type(pid[1]) is tuple \
                    and len(pid[1]) <= 2 * HASH_CHECKED_ITEMS:   # too few keys to collide at any cost
                return _build_hashed(pid[0], pid[1])   # (most messages: the envelope is one)
            check_fields(pid[0], pid[1:])
            problem = _pid_refusal(pid, self)
            if problem is not None:
                self.refusals.append(problem)
                return None
        return self._load(pid[0], pid[1:])

    def _load(self, tag: str, fields: tuple):  # noqa: C901 - one dispatch on the tags of _Pickler
        if tag == "tensor":
            return _rebuild_tensor(*fields)
        if tag == "ndarray":
            return _rebuild_ndarray(*fields)
        if tag in ("value", "list", "tuple", "bytes"):
            value = fields[0]
            expected = {"list": list, "tuple": tuple, "bytes": bytes}.get(tag)
            if expected is not None and type(value) is not expected:
                raise ProtocolError(f"{tag} expected, got {type(value).__name__}")
            return value
        if tag in _HASHED_TAGS:   # on the grader, its keys' hashes are checked first (_pid_refusal)
            (flat,) = fields
            if type(flat) is not tuple:
                raise ProtocolError(f"malformed {tag}: it crosses as a tuple of what it holds")
            return _build_hashed(tag, flat)
        if tag == "complex":
            return complex(*fields)
        if tag == "range":
            return range(*fields)
        if tag == "slice":
            return slice(*fields)
        if tag == "dtype":
            import torch

            dtype = getattr(torch, fields[0], None)
            if not isinstance(dtype, torch.dtype):
                raise ProtocolError(f"unknown dtype {fields[0]!r}")
            return dtype
        if tag == "device":
            import torch

            return torch.device(fields[0])
        trusted = self.endpoint.side == KERNEL   # what the grader sends may name any course_lib module
        if tag == "enum":
            module_name, qualname, member = fields
            cls = _resolve_course_attribute(module_name, qualname, import_missing=trusted)
            if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
                raise ProtocolError(f"{module_name}.{qualname} is not an enum")
            return cls[member]
        if tag == "dataclass":
            module_name, qualname, values = fields
            cls = _resolve_course_attribute(module_name, qualname, import_missing=trusted)
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)) or not isinstance(values, dict):
                raise ProtocolError(f"{module_name}.{qualname} is not a dataclass")
            if not trusted and not cls.__dataclass_params__.frozen:   # the kernel's mutable ones are handles
                raise ProtocolError(f"{module_name}.{qualname} is not a frozen dataclass")
            return cls(**values)
        if tag == "ref":
            owner, handle_id = fields
            return self.endpoint.resolve(owner, handle_id)
        if tag == "method":  # a RemoteMethod of the grader's, coming home to the kernel
            owner, handle_id, name = fields
            if self.endpoint.side != KERNEL or owner != KERNEL or not isinstance(name, str):
                raise ProtocolError("a method reference travels only from the grader to its owner")
            return getattr(self.endpoint.resolve(owner, handle_id), name)
        if tag == "handle":
            owner, handle_id, info = fields
            return self.endpoint.proxy(owner, handle_id, info)
        raise ProtocolError(f"unknown tag {tag!r}")


_INT, _NAME = "int", "str"   # field kinds beside Python types: an exact int (no bool), a string
_PID_FIELDS: dict[str, tuple] = {
    "tensor": (_NAME, "shape", bytes, "shape", _NAME), "ndarray": (_NAME, "shape", bytes),
    "complex": (float, float), "range": (_INT, _INT, _INT), "dtype": (_NAME,), "device": (_NAME,),
    "list": (list,), "tuple": (tuple,), "bytes": (bytes,), "dict": (tuple,), "set": (tuple,),
    "frozenset": (tuple,), "enum": (_NAME, _NAME, _NAME), "dataclass": (_NAME, _NAME, dict),
    "ref": (_NAME, _INT), "handle": (_NAME, _INT, dict),
}   # "value" (a numpy scalar's number) and "slice" hold plain values, built as they are


def check_fields(tag: str, fields: tuple) -> None:
    """Refuse (``ProtocolError``) a persistent id from the kernel whose fields are not exactly what the
    grader's own encoder writes: the measure and the build then read the same values (the sizes of a
    tensor are ints, never text that the build would read as ints while the measure skipped it)."""
    if tag in ("value", "slice"):
        if len(fields) != (1 if tag == "value" else 3):
            raise ProtocolError(f"malformed {tag}: {len(fields)} fields")
        return
    kinds = _PID_FIELDS.get(tag)
    if kinds is None:
        raise ProtocolError(f"unknown tag {clip_repr(tag)}")
    if len(fields) != len(kinds) or not all(_field_is(field, kind) for field, kind in zip(fields, kinds)):
        raise ProtocolError(f"malformed {tag}: its fields are not those of one "
                            f"({', '.join(type(field).__name__ for field in fields[:8])})")


def _field_is(field: Any, kind: Any) -> bool:
    if kind == _INT:
        return type(field) is int
    if kind == _NAME:
        return type(field) is str
    if kind == "shape":   # sizes or strides: a tuple of ints >= 0
        return type(field) is tuple and all(type(size) is int and size >= 0 for size in field)
    return type(field) is kind


def _pid_refusal(pid: tuple, unpickler: _Unpickler) -> str | None:
    """Why the object a persistent id from the kernel describes is past the grader's limits, or None.

    Checked before it is built: a range is lazy (its length, not its three ints, is what a check's
    ``list()`` costs), a tensor's or array's shape says what one elementwise operation on it copies,
    a dict's or set's keys are hashed to build it (quadratic when they share a hash), and a
    dataclass's values go through its ``__init__``. Lists, tuples and the contents of dicts and sets
    are measured with the whole message once it is built (``message_refusal``); every other field is
    plain data, measured here like any value.
    """
    tag, fields = pid[0], pid[1:]   # checked by check_fields
    if tag in ("tensor", "ndarray"):
        dtype_name, shape = fields[0], fields[1]
        problem = refusal((dtype_name, shape) + tuple(fields[3:]))   # not the raw bytes: the frame bounds them
        if problem is None:
            element_bytes = _element_bytes(tag, dtype_name)
            problem = tensor_refusal("tensor" if tag == "tensor" else "array", shape, element_bytes,
                                     unpickler.tensor_bytes)
            unpickler.tensor_bytes += copied_bytes(shape, element_bytes) if problem is None else 0
        return problem
    if tag in _HASHED_TAGS:
        return hash_refusal(fields[0][0::2] if tag == "dict" else fields[0])
    if tag in ("list", "tuple", "bytes", "value"):
        return None
    problem = refusal(fields)
    if problem is None and tag == "range" and fields[2] != 0:
        problem = range_refusal(range(*fields))
    return problem


def _element_bytes(tag: str, dtype_name: Any) -> int:
    """Bytes per element of a tensor's torch dtype name or an array's numpy dtype string (1 if unknown:
    the rebuild refuses an unknown dtype itself)."""
    try:
        if tag == "tensor":
            import torch

            dtype = getattr(torch, str(dtype_name), None)
            return max(1, torch.empty(0, dtype=dtype).element_size()) if isinstance(dtype, torch.dtype) else 1
        import numpy as np

        return max(1, np.dtype(str(dtype_name)).itemsize)
    except Exception:  # noqa: BLE001 - a malformed dtype is refused when the value is rebuilt
        return 1


def _opcode_table() -> dict[int, int]:
    """Byte -> argument length of every allowed opcode, from pickletools' own descriptions.

    A length >= 0 is a fixed number of bytes; the negative codes are pickletools' (up to a newline,
    or a length prefix of 1, 4 or 8 bytes). Deriving the table from ``pickletools.opcodes`` keeps
    the walk below in step with what ``genops`` and the unpickler read.
    """
    return {ord(opcode.code.encode("latin-1")): opcode.arg.n if opcode.arg is not None else 0
            for opcode in pickletools.opcodes if opcode.name in _SAFE_OPCODES}


_ALLOWED_OPCODES = _opcode_table()
_OPCODE_NAMES = {ord(opcode.code.encode("latin-1")): opcode.name for opcode in pickletools.opcodes}
_LENGTH_PREFIX = {pickletools.TAKEN_FROM_ARGUMENT1: (1, False), pickletools.TAKEN_FROM_ARGUMENT4: (4, True),
                  pickletools.TAKEN_FROM_ARGUMENT4U: (4, False), pickletools.TAKEN_FROM_ARGUMENT8U: (8, False)}
_STOP = ord(pickle.STOP)


def check_opcodes(payload: bytes, positions: list[int] | None = None) -> None:
    """Refuse a pickle that uses anything but plain-data and persistent-id opcodes.

    Walks the opcodes the way ``pickletools.genops`` does (each opcode, then its argument), but
    without building a description of each: every message from the kernel passes here, and a
    check can send a hundred thousand of them. ``positions`` (for the tests) collects the offset
    of every opcode.
    """
    index, end = 0, len(payload)
    reuses, containers = False, 0
    # A short string used again (a persistent id's tag, a dict key) is one item per use, like a new one:
    # the memo slots MEMOIZE gave such strings may be taken again without the unfolding walk. Any other
    # reuse, or a memo slot the frame numbers itself (PUT), needs the walk.
    short_strings: set[int] = set()
    memoized, after_short_string = 0, False
    while index < end:
        code = payload[index]
        length = _ALLOWED_OPCODES.get(code)
        if length is None:
            name = _OPCODE_NAMES.get(code)
            raise ProtocolError(f"forbidden pickle opcode {name}" if name else
                                f"unreadable frame: unknown opcode byte {code:#x} at {index}")
        if positions is not None:
            positions.append(index)
        index += 1
        if code in _REUSE:
            if code != _BINGET or index >= end or payload[index] not in short_strings:
                reuses = True
        elif code in _CONTAINERS:
            containers += 1
        elif code == _MEMOIZE:
            if after_short_string:
                short_strings.add(memoized)
            memoized += 1
        elif code in _NUMBERED_PUTS:
            reuses = True
        after_short_string = code in _SHORT_STRINGS
        if code == _STOP:
            # Only a frame that refers to an object twice can unfold into more than its bytes, and only
            # one with more containers than MAX_NESTING can nest them deeper than that.
            if reuses or containers > MAX_NESTING:
                check_expansion(payload)
            return
        if length >= 0:
            index += length
        elif length == pickletools.UP_TO_NEWLINE:
            newline = payload.find(b"\n", index)
            if newline < 0:
                break
            index = newline + 1
        else:
            size, signed = _LENGTH_PREFIX[length]
            if index + size > end:
                break
            count = int.from_bytes(payload[index:index + size], "little", signed=signed)
            if count < 0:
                raise ProtocolError(f"unreadable frame: negative length at {index}")
            index += size + count
    raise ProtocolError("unreadable frame: truncated pickle (no STOP opcode)")


_CODES = {opcode.name: ord(opcode.code.encode("latin-1")) for opcode in pickletools.opcodes}
_REUSE = frozenset(_CODES[name] for name in ("GET", "BINGET", "LONG_BINGET", "DUP"))
_BINGET, _MEMOIZE = _CODES["BINGET"], _CODES["MEMOIZE"]
_NUMBERED_PUTS = frozenset(_CODES[name] for name in ("PUT", "BINPUT", "LONG_BINPUT"))
_SHORT_STRINGS = frozenset(_CODES[name] for name in ("SHORT_BINUNICODE", "SHORT_BINBYTES", "SHORT_BINSTRING"))
MAX_EXPANDED_ITEMS = 1 << 25   # items a message from the kernel may unfold into (each use of a shared object counted)
MAX_NESTING = 500              # containers inside containers: Python's own recursion limit is 1000
_BIG_ITEM_BYTES = 256          # a string, bytes or int counts one item more per this many bytes
_NEW_ATOM = frozenset(_CODES[name] for name in (
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT",
    "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "EMPTY_LIST", "EMPTY_TUPLE", "PERSID"))
_FROM_MARK = frozenset(_CODES[name] for name in ("LIST", "TUPLE"))
_CONTAINERS = frozenset(_CODES[name] for name in (
    "EMPTY_LIST", "EMPTY_TUPLE", "LIST", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"))
_TUPLE_N = {_CODES["TUPLE1"]: 1, _CODES["TUPLE2"]: 2, _CODES["TUPLE3"]: 3}
_GETS = {_CODES["GET"]: None, _CODES["BINGET"]: 1, _CODES["LONG_BINGET"]: 4}
_PUTS = {_CODES["PUT"]: None, _CODES["BINPUT"]: 1, _CODES["LONG_BINPUT"]: 4}


class _Unfolding:
    """The objects a pickle builds, each as its unfolded size: what ``check_expansion`` simulates."""

    def __init__(self, limit: int, nesting: int) -> None:
        self.limit, self.nesting = limit, nesting
        self.sizes: list[int] = []
        self.depths: list[int] = []
        self.shared: list[bool] = []   # taken again from the memo: complete, never changed again

    def new(self, size: int, items: list[int] = ()) -> int:
        depth = 1 + max((self.depths[item] for item in items), default=0) if items else 0
        self._within(size, depth)
        self.sizes.append(size)
        self.depths.append(depth)
        self.shared.append(False)
        return len(self.sizes) - 1

    def grow(self, target: int, items: list[int]) -> None:
        if self.shared[target]:
            raise ProtocolError("a value that contains itself does not cross the channel")
        self.sizes[target] += sum(self.sizes[item] for item in items)
        self.depths[target] = max(self.depths[target], 1 + max(self.depths[item] for item in items))
        self._within(self.sizes[target], self.depths[target])

    def _within(self, size: int, depth: int) -> None:
        if size > self.limit:
            raise ProtocolError(f"a message that unfolds into more than {self.limit:,} items (an object used "
                                "over and over) does not cross the channel")
        if depth > self.nesting:
            raise ProtocolError(f"a value nested more than {self.nesting} containers deep does not cross the channel")


def check_expansion(payload: bytes, limit: int = MAX_EXPANDED_ITEMS, nesting: int = MAX_NESTING) -> None:
    """Refuse a pickle whose value, unfolded, holds more than ``limit`` items, nests containers deeper
    than ``nesting``, or contains itself.

    The memo lets a 200-byte pickle describe a tuple of tuples 2**40 leaves wide (each level holds the
    level below twice). Building it is cheap, but the grader would then hash it (a dict key, a set
    item: minutes to hours in C, where no alarm reaches) or turn it into a tensor (terabytes). So
    the walk counts what each object unfolds into, a shared object as often as it is used. An object
    taken from the memo is complete in any honest pickle (a pickler memoizes a container before
    filling it only so that it may contain itself), so adding to it afterwards is refused too.
    A tuple nested a million deep (2 MB, no memo needed) crashed the grader outright: hashing it, as a
    dict key, recurses in C until the stack runs out. ``check_opcodes`` has already vetted the opcodes;
    this walk runs on frames that reuse an object or build many containers.
    """
    index, end = 0, len(payload)
    objects = _Unfolding(limit, nesting)
    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    try:
        while index < end:
            code = payload[index]
            length = _ALLOWED_OPCODES[code]
            index += 1
            argument = b""
            if length >= 0:
                argument = payload[index:index + length]
                index += length
                extra = 0
            elif length == pickletools.UP_TO_NEWLINE:
                newline = payload.find(b"\n", index)
                argument = payload[index:newline]
                extra = newline - index
                index = newline + 1
            else:
                size, signed = _LENGTH_PREFIX[length]
                extra = int.from_bytes(payload[index:index + size], "little", signed=signed)
                index += size + extra
            if code == _STOP:
                return
            if code in _NEW_ATOM:
                stack.append(objects.new(1 + extra // _BIG_ITEM_BYTES))
            elif code in _GETS or code == _CODES["DUP"]:
                target = stack[-1] if code == _CODES["DUP"] else memo[_memo_key(code, argument, _GETS)]
                objects.shared[target] = True
                stack.append(target)
            elif code in _PUTS:
                memo[_memo_key(code, argument, _PUTS)] = stack[-1]
            elif code == _CODES["MEMOIZE"]:
                memo[len(memo)] = stack[-1]
            elif code == _CODES["MARK"]:
                marks.append(len(stack))
            elif code == _CODES["POP"]:
                if marks and marks[-1] == len(stack):
                    marks.pop()
                else:
                    stack.pop()
            elif code == _CODES["POP_MARK"]:
                del stack[marks.pop():]
            elif code == _CODES["APPEND"]:
                item = stack.pop()
                objects.grow(stack[-1], [item])
            elif code == _CODES["APPENDS"]:
                start = marks.pop()
                items = stack[start:]
                del stack[start:]
                if items:
                    objects.grow(stack[-1], items)
            elif code in _FROM_MARK:
                start = marks.pop()
                items = stack[start:]
                del stack[start:]
                stack.append(objects.new(1 + sum(objects.sizes[item] for item in items), items))
            elif code in _TUPLE_N:
                count = _TUPLE_N[code]
                items = stack[-count:]
                if len(items) != count:
                    raise IndexError
                del stack[-count:]
                stack.append(objects.new(1 + sum(objects.sizes[item] for item in items), items))
            elif code == _CODES["BINPERSID"]:   # the object persistent_load makes from its id: the id's size
                stack.append(objects.new(objects.sizes[stack.pop()]))
            # PROTO and FRAME change nothing on the stack
    except (IndexError, KeyError, ValueError):
        raise ProtocolError("unreadable frame: a pickle that uses a value it never made") from None
    raise ProtocolError("unreadable frame: truncated pickle (no STOP opcode)")


def _memo_key(code: int, argument: bytes, table: dict[int, int | None]) -> int:
    width = table[code]
    return int(argument) if width is None else int.from_bytes(argument, "little")


# --------------------------------------------------------------------------------------------
# Proxies
# --------------------------------------------------------------------------------------------


class _Handle:
    """What every handle to the kernel shares: copying it gives the same handle (checks deep-copy
    arguments before a call), and it never leaves the channel any other way."""

    __slots__ = ()

    def __copy__(self):
        return self

    def __deepcopy__(self, memo: dict):
        return self

    def __reduce_ex__(self, protocol):
        raise TypeError("a handle to the student's kernel cannot be pickled outside the channel")


class RemoteObject(_Handle):
    """A handle to an object on the other side of the channel.

    Calls, attribute reads and writes, ``len``, iteration, indexing and ``in`` go to the owner.
    Equality and hashing are by identity only: a student's object cannot make ``==`` say True to
    a check. ``isinstance`` sees a RemoteObject, never the student's class.
    """

    __course_remote__ = True
    __slots__ = ("_endpoint", "_owner", "_id", "_info", "__weakref__")

    def __init__(self, endpoint: "Endpoint", owner: str, handle_id: int, info: dict) -> None:
        object.__setattr__(self, "_endpoint", endpoint)
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_id", handle_id)
        object.__setattr__(self, "_info", info)

    # identity semantics
    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return hash((self._owner, self._id))

    def _request(self, op: str, *args: Any) -> Any:
        return self._endpoint.request(op, self, *args)

    def _call_methods(self, calls: list[tuple[str, tuple | None]]) -> list[tuple[str, Any]]:
        """Several reads or calls of this object in one request (``checks.call_methods``).

        Each result is ``("value", value)``, ``("missing", AttributeError)`` when the attribute
        could not be read, or ``("error", exception)`` when the call raised; the exceptions are
        rebuilt here as for a single call (look-alikes of the checks' own become StudentError).
        """
        results = self._request("call_methods", calls)
        if not isinstance(results, list) or len(results) != len(calls):
            raise ProtocolError("call_methods: one result per call expected")
        rebuilt = []
        for result in results:
            if not (isinstance(result, tuple) and len(result) == 2 and result[0] in ("value", "missing", "error")):
                raise ProtocolError("call_methods: malformed result")
            status, value = result
            if status != "value":
                if not isinstance(value, dict):
                    raise ProtocolError("call_methods: malformed error")
                value = rebuild_error(value, trusted=False)
            rebuilt.append((status, value))
        return rebuilt

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name not in ("__name__", "__qualname__", "__doc__"):
            raise AttributeError(name)
        if name in self._info.get("class_methods", ()):
            return RemoteMethod(self, name)   # looked up when called: one request for obj.method(...)
        return self._request("getattr", name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._request("setattr", name, value)

    def __delattr__(self, name: str) -> None:
        self._request("delattr", name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._request("call", args, kwargs)

    def _call_in_place(self, args: tuple, kwargs: dict) -> Any:
        """Call, then copy what the call changed in the arguments (tensors, arrays, lists, dicts) back into them.

        The arguments crossed by value, so a function that fills a tensor it was given filled the
        kernel's copy; this puts the result where a local call would have left it.
        """
        value, new_args, new_kwargs = self._request("call_in_place", args, kwargs)
        _write_back_arguments(args, kwargs, new_args, new_kwargs)
        return value

    def __len__(self) -> int:
        return _expect(self._request("special", "len", ()), int, "len()")

    def __bool__(self) -> bool:
        return bool(_expect(self._request("special", "bool", ()), bool, "bool()"))

    def __iter__(self):
        iterator = self._request("special", "iter", ())
        if not isinstance(iterator, RemoteObject):  # the owner sent a plain list: iterate it here
            return iter(iterator)
        return _RemoteIterator(iterator)

    def __getitem__(self, key: Any) -> Any:
        return self._request("special", "getitem", (key,))

    def __setitem__(self, key: Any, value: Any) -> None:
        self._request("special", "setitem", (key, value))

    def __delitem__(self, key: Any) -> None:
        self._request("special", "delitem", (key,))

    def __contains__(self, item: Any) -> bool:
        return bool(_expect(self._request("special", "contains", (item,)), bool, "in"))

    def __float__(self) -> float:
        return float(_expect(self._request("special", "float", ()), (float, int), "float()"))

    def __int__(self) -> int:
        return _expect(self._request("special", "int", ()), int, "int()")

    def __index__(self) -> int:
        return _expect(self._request("special", "index", ()), int, "index")

    def __repr__(self) -> str:
        try:
            text = self._request("special", "repr", ())
        except Exception:
            text = None
        if not isinstance(text, str):
            return f"<{self._info.get('type', 'object')} in the student's kernel>"
        return text if len(text) <= 300 else text[:297] + "..."

    def __str__(self) -> str:
        return repr(self)

    def __dir__(self):
        return []


class RemoteMethod(_Handle):
    """``handle.name`` where ``name`` is a method of the remote object's class, not yet looked up.

    Calling it sends one ``call_method`` request: the kernel reads the attribute and calls it, so
    ``allocator.free(seq)`` costs one round trip, not two. Anything else asked of it (its
    attributes, its repr) goes to the real bound method over there.
    """

    __course_remote__ = True
    __slots__ = ("_target", "_name")

    def __init__(self, target: RemoteObject, name: str) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_name", name)

    @property
    def _info(self) -> dict:
        return {"type": "builtins.method", "callable": True, "name": self._name}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target._request("call_method", self._name, args, kwargs, False)

    def _call_in_place(self, args: tuple, kwargs: dict) -> Any:
        value, new_args, new_kwargs = self._target._request("call_method", self._name, args, kwargs, True)
        _write_back_arguments(args, kwargs, new_args, new_kwargs)
        return value

    def _request(self, op: str, *args: Any) -> Any:
        return self._bound()._request(op, *args)

    def _bound(self) -> Any:
        bound = self._target._request("getattr", self._name)
        if not isinstance(bound, RemoteObject):
            raise TypeError(f"{self._name} of the student's object is no longer a method")
        return bound

    def __getattr__(self, name: str) -> Any:
        if name == "__name__":
            return self._name
        if name.startswith("__") and name not in ("__qualname__", "__doc__"):
            raise AttributeError(name)
        return getattr(self._bound(), name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteMethod) and other._target is self._target and other._name == self._name

    def __hash__(self) -> int:
        return hash((self._target, self._name))

    def __repr__(self) -> str:
        return f"<method {self._name} of {self._target._info.get('type', 'an object')} in the student's kernel>"


def _write_back_arguments(args: tuple, kwargs: dict, new_args: Any, new_kwargs: Any) -> None:
    if not isinstance(new_args, (list, tuple)) or not isinstance(new_kwargs, dict):
        raise ProtocolError("a call in place must send back its arguments")
    for original, changed in zip(args, new_args):
        write_back(original, changed)
    for key, original in kwargs.items():
        write_back(original, new_kwargs.get(key))


def write_back(original: Any, changed: Any) -> None:
    """Make ``original`` equal to ``changed`` in place, for the mutable kinds a call can change."""
    kind = type(original).__module__
    if kind.startswith("torch"):
        import torch

        if isinstance(original, torch.Tensor) and isinstance(changed, torch.Tensor) \
                and changed.shape == original.shape and changed.dtype == original.dtype:
            with torch.no_grad():
                original.copy_(changed.to(original.device))
    elif kind.startswith("numpy"):
        import numpy as np

        if isinstance(original, np.ndarray) and isinstance(changed, np.ndarray) and changed.shape == original.shape:
            original[...] = changed
    elif type(original) is list and type(changed) is list:
        if len(original) != len(changed):
            original[:] = changed
            return
        for index, (item, new_item) in enumerate(zip(original, changed)):
            if type(item) in (list, dict) or type(item).__module__.startswith(("torch", "numpy")):
                write_back(item, new_item)
            else:
                original[index] = new_item
    elif type(original) is dict and type(changed) is dict:
        original.clear()
        original.update(changed)


class _RemoteIterator:
    """Iterates a remote iterator one ``next`` at a time."""

    def __init__(self, iterator: RemoteObject) -> None:
        self.iterator = iterator

    def __iter__(self):
        return self

    def __next__(self) -> Any:
        return self.iterator._request("special", "next", ())


def _expect(value: Any, kinds, what: str) -> Any:
    if not isinstance(value, kinds) or (kinds is int and isinstance(value, bool) and what != "bool()"):
        raise TypeError(f"{what} of the student's object returned {type(value).__name__}")
    return value


class _SharedProxy:
    """The kernel's view of an object the grader lent with ``Shared``: only its named methods."""

    __course_remote__ = True
    __slots__ = ("_endpoint", "_owner", "_id", "_info", "__weakref__")

    def __init__(self, endpoint: "Endpoint", owner: str, handle_id: int, info: dict) -> None:
        self._endpoint, self._owner, self._id, self._info = endpoint, owner, handle_id, info

    def _method(self, name: str) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._endpoint.request("call_shared", self._id, name, args, kwargs)

        call.__name__ = name
        return call

    def __getattr__(self, name: str) -> Any:
        if name in self._info.get("methods", ()) and name != "__call__":
            return self._method(name)
        raise AttributeError(f"the check lent this {self._info.get('type', 'object')} with only these methods: "
                             f"{', '.join(self._info.get('methods', ()))}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "__call__" not in self._info.get("methods", ()):
            raise TypeError(f"the check lent this {self._info.get('type', 'object')} without a call")
        return self._method("__call__")(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self._info.get('type', 'object')} lent by the check>"


# --------------------------------------------------------------------------------------------
# Exceptions
# --------------------------------------------------------------------------------------------

# Built-in exceptions rebuilt as themselves: checks rely on their types (a refused allocation is an
# error of the documented type, iteration ends with StopIteration, a stub is NotImplementedError).
# Only Exception's: KeyboardInterrupt, SystemExit and GeneratorExit from the kernel are StudentErrors.
_BUILTIN_ERRORS = {
    name: value for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception) and not issubclass(value, Warning)
}
# The library's own errors a student's code is asked to raise, or that checks give a hint for, rebuilt
# as themselves; exactly these (module, name) pairs, never a name looked up from what the kernel says.
LIBRARY_ERRORS = (("course_lib.paged", "OutOfBlocksError"),
                  ("course_lib.kernels.interpreter_guard", "OutOfBoundsAccess"),
                  ("course_lib.sim.batching", "PolicyError"))


def describe_error(error: BaseException) -> dict:
    """An exception as plain data: its type, module, message and formatted traceback, each clipped."""
    from course_lib.runner.bounded import MESSAGE_BYTES, NAME_BYTES, TRACEBACK_BYTES, clip

    kind = type(error)
    try:
        message = str(error)
    except Exception:
        message = "<the exception's message could not be turned into text>"
    try:
        text = "".join(traceback.format_exception(error, limit=50))
    except Exception:
        text = ""
    return {"type": clip(str(kind.__qualname__), NAME_BYTES), "module": clip(str(kind.__module__ or ""), NAME_BYTES),
            "message": clip(message, MESSAGE_BYTES, "error message"),
            "traceback": clip(text, TRACEBACK_BYTES, "traceback")}


def from_kernel(error: BaseException) -> bool:
    """Whether ``error`` was rebuilt from an error the other side (the student's kernel) described.

    The mark is set here, by the receiving side, on the object it builds: nothing the kernel sends can
    set it on, or take it off, an exception the grader made.
    """
    return isinstance(error, StudentError) or getattr(error, "remote_traceback", None) is not None


def rebuild_error(info: dict, *, trusted: bool) -> BaseException:
    """The exception to raise on this side for an error described by the other side.

    On the grader's side (``trusted=False``) every error from the kernel is the student's, whatever it
    claims: an instance of a built-in exception type (``ValueError``, ``NotImplementedError``...) or
    of one of ``LIBRARY_ERRORS`` when it names one, else a ``StudentError`` that keeps the name it gave.
    Its type, module and message are only ever words the student chose: a class that claims to be
    the grader's (``KernelDied``, ``CheckFailed``, ``NeedsGPU``, any module, any qualname) is a
    StudentError like any other. Each rebuilt error carries ``remote_type`` and ``remote_traceback``
    (``from_kernel``). The kernel (``trusted=True``) rebuilds the grader's errors from any course_lib
    module; anything else becomes a RuntimeError there.
    """
    from course_lib.runner.bounded import MESSAGE_BYTES, NAME_BYTES, TRACEBACK_BYTES, clip

    if not isinstance(info, dict):
        info = {}
    name = clip(info.get("type", "Exception"), NAME_BYTES)
    module = clip(info.get("module", ""), NAME_BYTES)
    message = clip(info.get("message", ""), MESSAGE_BYTES, "error message")
    cls = _error_class(module, name, trusted=trusted)
    error: BaseException | None = None
    if cls is not None:
        try:
            error = cls(message)
        except Exception:
            error = None
    if error is None:
        error = StudentError(name, message) if not trusted else RuntimeError(f"{name}: {message}")
    error.remote_traceback = clip(info.get("traceback", ""), TRACEBACK_BYTES, "traceback")  # type: ignore[attr-defined]
    error.remote_type = name  # type: ignore[attr-defined]
    return error


def _error_class(module: str, name: str, *, trusted: bool) -> type | None:
    """The class an error described as ``module.name`` is rebuilt as on this side, or None."""
    if module == "builtins":
        return _BUILTIN_ERRORS.get(name)
    if not trusted:
        if (module, name) not in LIBRARY_ERRORS:
            return None
        loaded = sys.modules.get(module)
        cls = getattr(loaded, name, None) if loaded is not None else None
        return cls if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == module else None
    if module == "course_lib" or module.startswith("course_lib."):
        try:
            cls = _resolve_course_attribute(module, name)
        except Exception:
            return None
        return cls if isinstance(cls, type) and issubclass(cls, Exception) else None
    return None


# --------------------------------------------------------------------------------------------
# The request/reply loop
# --------------------------------------------------------------------------------------------


class Endpoint:
    """One side of the channel: sends requests, serves the other side's, owns the handle tables.

    ``side`` is "kernel" or "grader". ``handler(op, args)`` serves a request (and raises to reply
    with an error); ``on_output(text)`` receives what the student's code printed while the other
    side served a request (only on the grader). ``on_timeout()`` is called when a reply is late and
    returns a new deadline (or raises to give up).
    """

    def __init__(self, read_fd: int, write_fd: int, side: str, handler: Callable[[str, tuple], Any], *,
                 on_output: Callable[[str], None] | None = None) -> None:
        if side not in (KERNEL, GRADER):
            raise ValueError(f"side must be {KERNEL!r} or {GRADER!r}, got {side!r}")
        self.read_fd, self.write_fd, self.side = read_fd, write_fd, side
        self._frames = FrameReader(read_fd, MAX_KERNEL_FRAME_BYTES if side == GRADER else MAX_FRAME_BYTES)
        self._abandoned: set[int] = set()   # requests given up on (timed out): their late replies are dropped
        self.failure: BaseException | None = None   # the first ChannelClosed or ProtocolError a request ended with
        self.writing_late = False
        self.handler = handler
        self.on_output = on_output
        self.on_timeout: Callable[[], float] | None = None
        self.deadline: float | None = None
        self._exports: dict[int, Any] = {}
        self._export_ids: dict[int, int] = {}
        self._proxies: "weakref.WeakValueDictionary[tuple[str, int], Any]" = weakref.WeakValueDictionary()
        self._request_ids = itertools.count(1)
        self._export_counter = itertools.count(1)
        # One conversation at a time: a check's server thread may call the student's code while the
        # main thread does too. Re-entrant, because serving the other side's request can make one.
        self._lock = threading.RLock()

    # ---- handles ----------------------------------------------------------------------------

    def export(self, obj: Any) -> int:
        """The handle number of one of this side's objects (the same number for the same object)."""
        key = id(obj.obj) if isinstance(obj, Shared) else id(obj)
        handle_id = self._export_ids.get(key)
        if handle_id is None:
            handle_id = next(self._export_counter)
            self._exports[handle_id] = obj
            self._export_ids[key] = handle_id
        return handle_id

    def exported(self, handle_id: Any) -> Any:
        if not isinstance(handle_id, int) or handle_id not in self._exports:
            raise ProtocolError(f"no object with handle {handle_id!r}")
        return self._exports[handle_id]

    def resolve(self, owner: str, handle_id: int) -> Any:
        """A handle coming home: this side's own object; the other side's handles become proxies."""
        if owner == self.side:
            exported = self.exported(handle_id)
            return exported.obj if isinstance(exported, Shared) else exported
        return self.proxy(owner, handle_id, {})

    def proxy(self, owner: str, handle_id: int, info: dict) -> Any:
        if owner == self.side:
            return self.resolve(owner, handle_id)
        if not isinstance(handle_id, int) or not isinstance(info, dict):
            raise ProtocolError("malformed handle")
        key = (owner, handle_id)
        existing = self._proxies.get(key)
        if existing is not None:
            return existing
        if self.side == GRADER:
            if owner != KERNEL:
                raise ProtocolError("the kernel may only hand out its own objects")
            created: Any = RemoteObject(self, owner, handle_id, _handle_info(info))
        else:
            created = _SharedProxy(self, owner, handle_id, info)
        self._proxies[key] = created
        return created

    # ---- encoding ---------------------------------------------------------------------------

    def dumps(self, message: Any) -> bytes:
        buffer = io.BytesIO()
        _Pickler(buffer, self).dump(message)
        return buffer.getvalue()

    def loads(self, payload: bytes) -> Any:
        """A frame's message; on the grader's side, ValueTooLarge when a value in it is past a limit."""
        message, refused = self._decode(payload)
        if refused is not None:
            raise ValueTooLarge(refused)
        return message

    def _decode(self, payload: bytes) -> tuple[Any, str | None]:
        """A frame's message, and on the grader's side why part of it is refused (``receipt``), or None."""
        if self.side == GRADER:
            check_opcodes(payload)
        unpickler = _Unpickler(io.BytesIO(payload), self)
        try:
            message = unpickler.load()
        except (ProtocolError, pickle.UnpicklingError):
            raise
        except Exception as error:
            raise ProtocolError(f"could not decode a message: {type(error).__name__}: {error}") from None
        if self.side != GRADER:
            return message, None
        if unpickler.refusals:
            return message, unpickler.refusals[0]
        return message, message_refusal(message) if isinstance(message, dict) else None

    def send(self, message: dict) -> None:
        """Send one message; on the grader's side no longer than the current deadline (then ``on_timeout``)."""
        if self.side == GRADER and self.deadline is not None:
            write_frame(self.write_fd, self.dumps(message), self.deadline, self._late_write)
        else:
            write_frame(self.write_fd, self.dumps(message))

    def _late_write(self) -> float:
        self.writing_late = True   # on_timeout may say so: the kernel stopped reading, not answering
        if self.on_timeout is None:
            raise ChannelTimeout("the kernel stopped reading")
        self.deadline = self.on_timeout()
        return self.deadline

    def receive(self, deadline: float | None) -> tuple[dict, str | None]:
        """The next message, and why a value in it is refused (grader's side), or None."""
        message, refused = self._decode(self._frames.read(deadline))
        if not isinstance(message, dict):
            raise ProtocolError("a message must be a dict")
        return message, refused

    # ---- requests ---------------------------------------------------------------------------

    def request(self, op: str, *args: Any) -> Any:
        """Send a request and wait for its reply, serving the other side's requests meanwhile."""
        with self._lock:
            request_id = next(self._request_ids)
            try:
                return self._request_locked(request_id, op, args)
            except (ChannelClosed, ProtocolError) as error:
                if self.failure is None:   # the grader's record: a check that catches this cannot hide it
                    self.failure = error
                self._abandoned.add(request_id)
                raise
            except BaseException:
                self._abandoned.add(request_id)   # a timeout or an alarm: its reply may still come
                raise

    def _request_locked(self, request_id: int, op: str, args: tuple) -> Any:
        self.send({"id": request_id, "op": op, "args": args})
        while True:
            try:
                message, refused = self.receive(self.deadline)
            except ChannelTimeout:
                if self.on_timeout is None:
                    raise
                self.deadline = self.on_timeout()
                continue
            if "op" in message:
                if refused is not None:   # the student's code asked with a value past a limit: it gets the error
                    self.send({"reply": message.get("id"), "error": describe_error(ValueTooLarge(refused))})
                else:
                    self.serve(message)
                continue
            if type(message.get("reply")) is not int:   # (a list would not even hash: the set below raises)
                raise ProtocolError(f"a reply without a request id: {clip_repr(message.get('reply'))}")
            if message.get("reply") in self._abandoned and message.get("reply") != request_id:
                self._abandoned.discard(message.get("reply"))
                continue
            if message.get("reply") != request_id:
                raise ProtocolError(f"reply to request {message.get('reply')!r} while waiting for {request_id}")
            output = message.get("output")
            if isinstance(output, str) and output and self.on_output is not None:
                self.on_output(_cut_printed(output))
            if refused is not None:
                raise ValueTooLarge(refused)
            if "error" in message:
                raise rebuild_error(message["error"], trusted=self.side == KERNEL)
            return message.get("value")

    def serve(self, message: dict) -> None:
        """Serve one request from the other side and send the reply."""
        request_id, op, args = message.get("id"), message.get("op"), message.get("args", ())
        if not isinstance(op, str) or not isinstance(args, tuple):
            self.send({"reply": request_id, "error": describe_error(ProtocolError("malformed request"))})
            return
        try:
            value = self.handler(op, args)
        except BaseException as error:  # noqa: BLE001 - every failure, KeyboardInterrupt included, is a reply
            reply = {"reply": request_id, "error": describe_error(error)}
            output = getattr(error, "captured_output", None)
            if output:
                reply["output"] = output
            stops_here = self.side == GRADER and (getattr(error, "stops_the_cell", False)
                                                  or not isinstance(error, Exception))
            try:
                self.send(reply)
            except Exception:  # noqa: BLE001 - the cell is over anyway when the grader's own time ran out
                if not stops_here:
                    raise
            if stops_here:   # the grader's time limit (or Ctrl-C) ends the test cell, not only the lent call
                raise
            return
        if isinstance(value, _WithOutput):
            reply = {"reply": request_id, "value": value.value, "output": value.output}
        else:
            reply = {"reply": request_id, "value": value}
        try:
            self.send(reply)
        except (TypeError, pickle.PicklingError, ProtocolError, RecursionError) as error:   # (a dict that holds itself)
            self.send({"reply": request_id, "error": describe_error(error)})

    def serve_forever(self) -> None:
        """The kernel's main loop: serve requests until the channel closes."""
        while True:
            try:
                message, _ = self.receive(None)
            except ChannelClosed:
                return
            if "op" not in message:
                raise ProtocolError("a reply arrived with no request outstanding")
            if message["op"] == "shutdown":
                self.send({"reply": message.get("id"), "value": None})
                return
            self.serve(message)


def clip_repr(value: Any, limit: int = 80) -> str:
    """A short repr of a value the kernel sent, for the grader's own messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _handle_info(info: dict) -> dict:
    """What the grader keeps of the description a kernel sends with a handle: the keys it reads, each
    of its kind and clipped (a type name shows in a check's message; method names save a request)."""
    from course_lib.runner.bounded import NAME_BYTES, clip

    kept: dict = {key: info[key] is True for key in ("callable", "is_class") if key in info}
    for key in ("type", "name"):
        if isinstance(info.get(key), str):
            kept[key] = clip(info[key], NAME_BYTES)
    methods = info.get("class_methods")
    if isinstance(methods, list):
        kept["class_methods"] = [name for name in methods[:MAX_CLASS_METHODS]
                                 if isinstance(name, str) and len(name) <= NAME_BYTES]
    return kept


MAX_CLASS_METHODS = 1000        # method names kept per handle (the library's largest class has a few dozen)
PRINTED_CHARS = 4 << 20         # characters of printed text taken from one reply (the cell keeps far fewer)


def _cut_printed(text: str) -> str:
    """What the student's code printed during a request, cut to its head and tail before the cell's
    own limit (``bounded.TextKeeper``) measures it: slicing a string costs no copy of the whole."""
    if len(text) <= PRINTED_CHARS:
        return text
    half = PRINTED_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters of output cut here ...]\n{text[-half:]}"


@dataclass
class _WithOutput:
    """A handler's result together with what the student's code printed while producing it."""

    value: Any
    output: str


def with_output(value: Any, output: str) -> Any:
    return _WithOutput(value, output) if output else value
