"""What the grader accepts from a student's kernel: every value bounded on receipt.

A frame from the kernel is at most ``MAX_KERNEL_FRAME_BYTES`` and may not unfold into more than it
holds (``channel.check_expansion``), so decoding it is bounded. What it decodes into is not yet:
three ints describe ``range(40_000_000)``, and a check that runs ``list()`` on it takes 1.5 GB of
the grader's memory in one C call that no alarm interrupts; a 30-million-item list, a string of
200 MB or an int of a million digits cost the grader the same way as soon as a check compares,
hashes, formats or multiplies them. So before a check sees anything the kernel sent, the grader
measures it (``refusal``) against limits sized to what the course's checks need, with room to
spare (the largest values measured while grading the reference answers of every lab are in the
comments):

- ``MAX_ITEMS`` items in one container or one range (the longest legitimate ones: a tokenizer's
  ids for a chapter's text, a vocabulary);
- ``MAX_MESSAGE_ITEMS`` items in one message, all containers together, a shared part counted at
  each use;
- ``MAX_STR_CHARS`` characters in one string, ``MAX_BYTES`` in one bytes value;
- ``MAX_INT_BITS`` bits in one int (ids, byte counts and hashes take 64 bits or less; 4096 bits still
  print, where Python refuses to turn an int of more than 4300 digits into text);
- ``MAX_DEPTH`` containers nested in one another;
- ``MAX_TENSOR_BYTES`` bytes in one tensor or array, ``MAX_MESSAGE_TENSOR_BYTES`` in all those of one
  message (as copied: a view counts every element it shows, not the storage behind it, so a
  thousand stride-0 views of four bytes each count as what they show);
- ``MAX_SHARED_HASH`` distinct items of one container with one hash. A dict or a set of ``n`` keys
  that share a hash costs ``n**2 / 2`` comparisons to build, in C: 200,000 ints ``k * (2**61 - 1)``
  (2.4 MB) take the grader half an hour, and ints of 61 bits or more, tuples, frozensets and complex
  numbers can be made to collide as often as one likes (strings and bytes cannot: their hashes are
  salted per process). So every container of more than ``HASH_CHECKED_ITEMS`` items is checked
  before a dict or set is made of it, by the channel (the kernel sends dicts and sets as lists) or
  by a check (``set(got)``).

A value past a limit is refused whole: the check gets ``ValueTooLarge`` instead of it (a reply)
or the student's code gets it (a request the kernel made of a lent object), with a plain sentence
that names the limit, and the cell fails; the kernel and the rest of the notebook go on.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Any

__all__ = ["HASH_CHECKED_ITEMS", "MAX_BYTES", "MAX_DEPTH", "MAX_INT_BITS", "MAX_ITEMS", "MAX_MESSAGE_ITEMS",
           "MAX_MESSAGE_TENSOR_BYTES", "MAX_SHARED_HASH", "MAX_STR_CHARS", "MAX_TENSOR_BYTES", "ValueTooLarge",
           "copied_bytes", "hash_refusal", "message_refusal", "range_refusal", "refusal", "shared_hash_refusal", "tensor_refusal"]

# The largest of each the reference answers of the five labs send the grader, measured while grading them
# (the ``correct`` demo student, every chapter, on a CPU): a list of 1,683 items, a dict of 350, 1,684 items
# in one message, strings of 154 KB (a cell's outputs), bytes of 16, ints of 64 bits, five levels of
# nesting, tensors of 230 KB. Each limit leaves a hundred times that or more for honest answers that are
# wrong in a larger way (and for the GPU-only checks, which time kernels on tensors of up to 64 MB), and
# keeps what one value can cost a check in the tens of megabytes.
MAX_ITEMS = 1 << 20            # items in one container or range
MAX_MESSAGE_ITEMS = 1 << 22    # items in one message
MAX_STR_CHARS = 1 << 24        # characters in one string (a cell's image, base64, within the output limit)
MAX_BYTES = 1 << 22            # bytes in one bytes value
MAX_INT_BITS = 4096            # bits in one int
MAX_DEPTH = 32                 # containers nested in one another
MAX_TENSOR_BYTES = 256 << 20   # bytes of one tensor or array, as copied
MAX_MESSAGE_TENSOR_BYTES = 512 << 20   # bytes of all the tensors and arrays of one message, as copied
MAX_SHARED_HASH = 64           # distinct items of one container with one hash (random 64-bit hashes: 1 or 2)
HASH_CHECKED_ITEMS = 1024      # containers larger than this have their items' hashes counted

_NUMBERS = frozenset({int, bool, float, complex, type(None)})
# Hashes salted per process, which a kernel cannot aim (unless this process was started with a fixed seed).
_SALTED = frozenset({str, bytes}) if os.environ.get("PYTHONHASHSEED", "random") == "random" else frozenset()
_UNHASHABLE = frozenset({list, dict, set})   # in no dict or set at all
_NO_COLLISIONS_BELOW_BITS = 60      # distinct ints under 2**60 in magnitude never share a hash (it is x mod 2**61 - 1)
_SEQUENCES = frozenset({list, tuple, set, frozenset})


class ValueTooLarge(Exception):
    """A value from the student's kernel past one of the grader's limits (see the module docstring).

    Raised by the grader, never rebuilt from what a kernel sends: the message is the grader's own
    sentence. It is no subclass of the errors checks catch (ValueError, TypeError): a check that
    expects the student's code to raise one must not take a refused value for it.
    """


def _limit_sentence(what: str, limit: str) -> str:
    return (f"your code gave the grader {what}; the grader takes at most {limit} (no check of the course "
            "needs more), so the value was refused and this test fails")


def range_refusal(value: range) -> str | None:
    """Why a range from the kernel is refused (it is lazy: three ints can describe forty million items;
    its three ints are measured as ints)."""
    step = value.step   # len() itself fails past 2**63 items: count them here
    length = max(0, (value.stop - value.start + step - 1) // step if step > 0 else (value.start - value.stop - step - 1)
                 // -step)
    if length > MAX_ITEMS:
        return _limit_sentence(f"a range of {length:,} items", f"{MAX_ITEMS:,} items in one range or container")
    return None


def shared_hash_refusal(items) -> str | None:
    """Why a container's items would make a dict or set of them quadratic to build, or None: more than
    ``MAX_SHARED_HASH`` distinct items with one hash. Unhashable items are left out (no dict holds them)."""
    try:
        hashes = list(map(hash, items))
    except TypeError:
        hashes = [_hash_or_none(item) for item in items]
    counts = collections.Counter(hashes)
    crowded = {value for value, count in counts.items() if count > MAX_SHARED_HASH and value is not None}
    if not crowded:
        return None
    distinct: dict[int, list] = {value: [] for value in crowded}
    for item, value in zip(items, hashes):
        if value in crowded:
            seen = distinct[value]
            if not any(item == other for other in seen):   # equal items (a repeated token) share a hash honestly
                seen.append(item)
                if len(seen) > MAX_SHARED_HASH:
                    return _limit_sentence(f"more than {MAX_SHARED_HASH} different items with one hash in one "
                                           "container (made to collide: a dict or set of them costs the square "
                                           "of their number)", f"{MAX_SHARED_HASH} items of one container with "
                                                                "one hash")
    return None


def hash_refusal(items) -> str | None:
    """``shared_hash_refusal`` for a container large enough to matter whose items can be made to collide."""
    if len(items) <= HASH_CHECKED_ITEMS:
        return None
    items = items if isinstance(items, (list, tuple)) else list(items)
    return shared_hash_refusal(items) if _may_collide(items, set(map(type, items))) else None


def _hash_or_none(item: Any) -> int | None:
    try:
        return hash(item)
    except TypeError:
        return None


def _may_collide(items, kinds: set[type]) -> bool:
    """Whether items of these kinds can be made to share hashes (see the module docstring)."""
    kinds = kinds - _UNHASHABLE
    if kinds <= _SALTED:
        return False
    if kinds <= {int, bool, float, type(None)}:   # floats share a hash with a few dozen others at most
        ints = [item for item in items if type(item) is int]
        return bool(ints) and max(max(ints), -min(ints), key=int.bit_length).bit_length() >= _NO_COLLISIONS_BELOW_BITS
    return True


def copied_bytes(shape: tuple, element_bytes: int) -> int:
    """Bytes a tensor or array of ``shape`` takes once copied (a broadcast view describes 2**40 elements in
    a few bytes of storage; one elementwise operation of a check copies them all)."""
    count = 1
    for size in shape:
        count *= int(size)
    return count * element_bytes


def tensor_refusal(kind: str, shape: tuple, element_bytes: int, earlier_bytes: int = 0) -> str | None:
    """Why a tensor or array of ``shape`` is refused, ``earlier_bytes`` being those of the message's
    tensors before it; or None."""
    size = copied_bytes(shape, element_bytes)
    if size > MAX_TENSOR_BYTES:
        return _limit_sentence(f"a {kind} of shape {tuple(shape)} ({size:,} bytes as copied)",
                               f"{MAX_TENSOR_BYTES >> 20} MB in one {kind}")
    if earlier_bytes + size > MAX_MESSAGE_TENSOR_BYTES:
        return _limit_sentence(f"tensors and arrays of more than {MAX_MESSAGE_TENSOR_BYTES >> 20} MB in one value "
                               "(as copied)", f"{MAX_MESSAGE_TENSOR_BYTES >> 20} MB of them in one value")
    return None


class _Measure:
    """One walk over a received value, stopping at the first limit it passes."""

    def __init__(self) -> None:
        self.items = 0

    def count(self, items: int) -> str | None:
        self.items += items
        if self.items > MAX_MESSAGE_ITEMS:
            return _limit_sentence(f"more than {MAX_MESSAGE_ITEMS:,} items in one value",
                                   f"{MAX_MESSAGE_ITEMS:,} items in one value, its containers together")
        return None

    def value(self, value: Any, depth: int) -> str | None:  # noqa: C901 - one dispatch on the kinds of values
        kind = type(value)
        if kind in _NUMBERS:
            return self.number(value) if kind is int else None
        if kind is str:
            return self.string(value)
        if kind is bytes:
            return self.bytes(value)
        if kind is range:
            return range_refusal(value)
        if kind is slice:
            return self.sequence((value.start, value.stop, value.step), depth)
        if kind in _SEQUENCES:
            return self.sequence(value, depth)
        if kind is dict:
            return self.mapping(value, depth)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):   # a course_lib dataclass rebuilt here
            return self.sequence([getattr(value, field.name) for field in dataclasses.fields(value)], depth)
        return None   # enum members, tensors and arrays (bounded as they are rebuilt), handles, dtypes, devices

    @staticmethod
    def number(value: int) -> str | None:
        if value.bit_length() > MAX_INT_BITS:
            return _limit_sentence(f"an int of {value.bit_length():,} bits", f"{MAX_INT_BITS}-bit ints")
        return None

    @staticmethod
    def string(value: str) -> str | None:
        if len(value) > MAX_STR_CHARS:
            return _limit_sentence(f"a string of {len(value):,} characters", f"{MAX_STR_CHARS:,} characters in one "
                                                                               "string")
        return None

    @staticmethod
    def bytes(value: bytes) -> str | None:
        if len(value) > MAX_BYTES:
            return _limit_sentence(f"a bytes value of {len(value):,} bytes", f"{MAX_BYTES:,} bytes in one bytes "
                                                                               "value")
        return None

    def sequence(self, items, depth: int) -> str | None:
        if depth >= MAX_DEPTH:
            return _limit_sentence(f"containers nested more than {MAX_DEPTH} deep", f"{MAX_DEPTH} levels")
        if len(items) > MAX_ITEMS:
            return _limit_sentence(f"a {type(items).__name__} of {len(items):,} items",
                                   f"{MAX_ITEMS:,} items in one range or container")
        if (problem := self.count(len(items))) is not None:
            return problem
        return self.items_of(items, depth + 1) or self.hashes_of(items)

    def mapping(self, value: dict, depth: int) -> str | None:
        if depth >= MAX_DEPTH:
            return _limit_sentence(f"containers nested more than {MAX_DEPTH} deep", f"{MAX_DEPTH} levels")
        if len(value) > MAX_ITEMS:
            return _limit_sentence(f"a dict of {len(value):,} items", f"{MAX_ITEMS:,} items in one range or container")
        if (problem := self.count(2 * len(value))) is not None:
            return problem
        return self.items_of(value.keys(), depth + 1) or self.items_of(value.values(), depth + 1) \
            or self.hashes_of(value.values())

    @staticmethod
    def hashes_of(items) -> str | None:
        return hash_refusal(items)

    def items_of(self, items, depth: int) -> str | None:
        """Every item of a container; a container of numbers only (most large ones) is measured in C."""
        kinds = set(map(type, items))
        if kinds <= _NUMBERS:
            if int in kinds:
                ints = items if kinds <= {int, bool} else [item for item in items if type(item) is int]
                return self.number(max(max(ints), -min(ints), key=int.bit_length)) if ints else None
            return None
        if kinds == {str}:
            return self.string(max(items, key=len)) if items else None
        for item in items:
            if (problem := self.value(item, depth)) is not None:
                return problem
        return None


def message_refusal(message: dict) -> str | None:
    """``refusal`` for a whole message from the kernel: each of its parts (a reply's value, a request's
    arguments, an error's description) measured as a value of its own, their items counted together.
    What the student's code printed (``output``) is text the grader cuts, not a value it refuses."""
    measure = _Measure()
    if (problem := measure.count(len(message))) is not None:
        return problem
    for key, part in message.items():
        if key == "output":
            continue
        if key == "args" and type(part) is tuple:
            problem = next((found for item in part if (found := measure.value(item, 0)) is not None), None)
        else:
            problem = measure.value(key, 0) or measure.value(part, 0)
        if problem is not None:
            return problem
    return None


def refusal(value: Any) -> str | None:
    """None when ``value`` (decoded from a kernel's frame) is within every limit, else the plain sentence
    saying which limit it passes (what the check, or the student's code, gets as ``ValueTooLarge``)."""
    return _Measure().value(value, 0)
