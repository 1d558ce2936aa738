"""Checks for Lab 0.1, chapter 4 (paging the KV cache): a student's block allocator against the reference.

The student writes ``BlockAllocator(num_blocks, block_size)`` with the members of
:class:`course_lib.paged.AllocatorProtocol` (without prefix caching) plus ``fork`` and ``slot``.
Every check drives the student's allocator and the reference
``course_lib.paged.BlockAllocator(num_blocks, block_size, enable_prefix_caching=False)`` through
the same operations (``_Mirror``) and compares, after each one, what came back and the state:

- the number of free blocks;
- each live sequence's block table: same length, ids in ``range(num_blocks)``;
- the *sharing pattern*: physical ids may differ (a free list can hand blocks out in any order),
  but student and reference blocks must correspond one to one across all tables, so two
  sequences share a block in one allocator exactly when they share it in the other;
- an operation the reference refuses must raise the documented error and change nothing:
  ``OutOfBlocksError`` (from ``course_lib.paged``) when the pool is short, ``ValueError`` for a bad
  request (a sequence id that already holds blocks, a position outside the sequence). Any other
  exception (an ``IndexError`` from popping an empty free list) is a crash, not a refusal: the
  scheduler catches neither.

``check_random_operations`` does the same on a long, seeded random sequence of operations
(allocate, append, fork, free, and the questions), the property-based test of the chapter: the
seed makes it reproducible, and the feedback lists the operations that led to the first difference.
"""

from __future__ import annotations

import random
from typing import Any

from course_lib.checks import (
    CheckFailed,
    where_it_raised,
    call_methods,
    call_student,
    fail,
    is_remote,
    register_reference_names,
    require_own_implementation,
    short_repr,
)
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.paged import BlockAllocator, OutOfBlocksError

__all__ = [
    "REQUIRED_MEMBERS",
    "check_allocate_and_free",
    "check_append_slot",
    "check_blocks_needed",
    "check_fork_and_copy_on_write",
    "check_interface",
    "check_random_operations",
    "check_slot",
]

register_reference_names("BlockAllocator")

_ReferenceAllocator = reference(BlockAllocator)

REQUIRED_MEMBERS = ("num_free_blocks", "blocks_needed", "can_allocate", "allocate", "can_append", "append_slot",
                    "mark_computed", "free", "block_table", "fork", "slot")

_HISTORY_SHOWN = 12


def _tokens(num_tokens: int) -> list[int]:
    return list(range(100, 100 + num_tokens))


def _describe(operation: str, args: tuple) -> str:
    if operation in ("allocate", "can_allocate"):
        *head, token_ids = args
        shown = [repr(a) for a in head] + [f"<{len(token_ids)} tokens>"]
        return f"{operation}({', '.join(shown)})"
    return f"{operation}({', '.join(repr(a) for a in args)})"


def _require_own_class(student_cls: Any) -> None:
    require_own_implementation(student_cls, "BlockAllocator")
    # Locally (the kit, not grading) a subclass of the reference inherits the answer; when grading,
    # the student's kernel has no reference to inherit from.
    if not is_remote(student_cls) and isinstance(student_cls, type):
        for base in student_cls.__mro__[1:]:
            if (base.__module__ or "").startswith("course_lib"):
                fail(f"BlockAllocator inherits from the course's {base.__module__}.{base.__name__}.",
                     hint="write the class yourself (it may inherit from object only).", show_values=False)


class _Mirror:
    """Runs each operation on the student's allocator and the reference, and compares them."""

    def __init__(self, student_cls: Any, num_blocks: int, block_size: int) -> None:
        _require_own_class(student_cls)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.history: list[str] = [f"BlockAllocator(num_blocks={num_blocks}, block_size={block_size})"]
        self.student = call_student(student_cls, f"BlockAllocator({num_blocks}, {block_size})", num_blocks, block_size,
                                    show_args=False)
        self.reference = _ReferenceAllocator(num_blocks, block_size, enable_prefix_caching=False)
        self.live: list[Any] = []  # sequence ids that hold blocks, in the order they got them
        # The student's free count and live block tables as last read (with the last operation, or
        # on their own); nothing changes the student's allocator between two operations, so it stays
        # valid until the next one, which saves a round trip per read when graded.
        self._state: dict | None = None
        self._compare_state("right after construction")

    # ----- feedback ----------------------------------------------------------------------------

    def _where(self) -> str:
        shown = self.history[-_HISTORY_SHOWN:]
        skipped = len(self.history) - len(shown)
        lines = ([f"    ... {skipped} earlier operations"] if skipped else []) + [f"    {line}" for line in shown]
        return "operations so far (the last one is where it went wrong):\n" + "\n".join(lines)

    def _fail(self, what: str, *, expected: Any = None, got: Any = None, hint: str | None = None,
              show_values: bool = True) -> None:
        fail(f"{what}\n  {self._where()}", expected=expected, got=got, hint=hint, show_values=show_values)

    # ----- running one operation ---------------------------------------------------------------

    def run(self, operation: str, *args: Any) -> Any:
        """Apply ``operation`` to both allocators; fail on the first difference. Returns the student's result."""
        self.history.append(_describe(operation, args))
        table_before = self._student_table(args[0]) if operation == "append_slot" and args[0] in self.live else None
        expected, expected_error = _apply(self.reference, operation, args)
        live_after = _live_after(self.live, operation, args, expected_error)
        # The operation and the reads of the state after it (free count, every live block table) in
        # one go: when graded, that is one round trip to the student's kernel instead of several.
        self._state = None
        results = call_methods(self.student, [(operation, args), *self._state_calls(live_after)])
        got, error = self._student_result(operation, results[0])
        self._state = self._state_from(live_after, results[1:])
        if expected_error is not None:
            self._expect_refusal(operation, args, expected_error, error)
        elif error is not None:
            raise CheckFailed(
                f"{_describe(operation, args)} raised {type(error).__name__}: {error}\n  {self._where()}\n"
                f"  hint: the reference does this operation without an error. {where_it_raised(error)}"
            ) from error
        else:
            self._compare_result(operation, args, expected, got, table_before)
        self.live = live_after
        self._compare_state(f"after {_describe(operation, args)}", "refused" if expected_error else operation)
        return got

    def _student_result(self, operation: str, result: tuple[str, Any]) -> tuple[Any, Exception | None]:
        """(value, None), or (None, the error the student's operation raised)."""
        status, value = result
        if status == "missing":
            self._fail(f"your BlockAllocator has no member {operation!r}", show_values=False,
                       hint=f"the allocator needs: {', '.join(REQUIRED_MEMBERS)}.")
        if status == "error":
            if isinstance(value, NotImplementedError):
                raise value
            return None, value
        return value, None

    # ----- reading the student's state ---------------------------------------------------------

    @staticmethod
    def _state_calls(live: list[Any]) -> list[tuple[str, tuple | None]]:
        return [("num_free_blocks", None), *(("block_table", (seq_id,)) for seq_id in live)]

    @staticmethod
    def _state_from(live: list[Any], results: list[tuple[str, Any]]) -> dict:
        return {"free": results[0], "tables": dict(zip(live, results[1:]))}

    def _read_state(self) -> dict:
        """The student's free count and live block tables: as read with the last operation, or read now."""
        if self._state is None:
            self._state = self._state_from(self.live, call_methods(self.student, self._state_calls(self.live)))
        return self._state

    def _expect_refusal(self, operation: str, args: tuple, expected_error: Exception, error: Exception | None) -> None:
        documented = OutOfBlocksError if isinstance(expected_error, OutOfBlocksError) else ValueError
        if error is not None and not isinstance(error, documented):
            if documented is OutOfBlocksError:
                hint = ("check that enough blocks are free BEFORE taking any, and raise OutOfBlocksError (imported "
                        "from course_lib.paged) yourself: the scheduler asks can_allocate / can_append first, and "
                        "any other error means a bug, not a full pool.")
            else:
                hint = f"refuse it explicitly with raise ValueError(...): {expected_error}"
            raise CheckFailed(
                f"{_describe(operation, args)} raised {type(error).__name__}: {error}\n  {self._where()}\n"
                f"  expected: {documented.__name__} (the documented refusal)\n  got:      {type(error).__name__}\n"
                f"  hint: {hint}") from error
        if error is not None:
            return
        if isinstance(expected_error, OutOfBlocksError):
            hint = ("there are not enough free blocks for this: raise an error (OutOfBlocksError from "
                    "course_lib.paged) and take nothing, so the caller can wait and retry.")
            if operation == "append_slot":
                hint = ("the last block is full (or shared) and no block is free: raise an error instead of "
                        "handing out a block that is not free.")
            self._fail(f"{_describe(operation, args)} should fail: only {self.reference.num_free_blocks} blocks "
                       "are free", show_values=False, hint=hint)
        self._fail(f"{_describe(operation, args)} should raise an error", expected=type(expected_error).__name__,
                   got="no error", hint=str(expected_error))

    def _compare_result(self, operation: str, args: tuple, expected: Any, got: Any,
                        table_before: list[int] | None) -> None:
        call = _describe(operation, args)
        if operation in ("can_allocate", "can_append"):
            if bool(got) != bool(expected) or not isinstance(got, bool):
                hint = ("compare blocks_needed(len(token_ids)) with num_free_blocks." if operation == "can_allocate"
                        else "a token fits if the last block has a free slot that only this sequence holds; "
                             "otherwise a free block is needed.")
                self._fail(f"{call} answered wrongly", expected=expected, got=got, hint=hint)
        elif operation == "blocks_needed":
            if got != expected:
                hint = "round UP: 50 tokens in blocks of 16 need 4 blocks (-(-n // block_size)), and 0 tokens need 0."
                self._fail(f"{call} with block_size={self.block_size}", expected=expected, got=got, hint=hint)
        elif operation == "allocate":
            if got != 0:
                self._fail(f"{call} must return 0", expected=0, got=got,
                           hint="allocate returns how many tokens are already cached; without prefix caching: 0.")
        elif operation == "append_slot":
            self._compare_copy(call, expected, got, table_before, args[0])
        elif operation == "slot":
            self._compare_slot(call, got, args)

    def _compare_copy(self, call: str, expected: Any, got: Any, table_before: list[int], seq_id: Any) -> None:
        """append_slot's copy pair. What it should be comes from the reference (its own block ids, which may
        differ from yours); your block table only describes what your allocator did."""
        if expected is None:
            if got is not None:
                self._fail(f"{call} returned a copy {short_repr(got)}, but in the reference this sequence's last block "
                           "is its own now (no other sequence holds it), so nothing is copied", expected=None, got=got,
                           hint="if your allocator still thinks that block is shared, a reference count was never "
                                "decreased: when append_slot gives a sequence a private copy, the shared block it "
                                "leaves loses one reference (ref count - 1), and free drops one reference from every "
                                "block of the sequence. Return (src, dst) only when you really copied.")
            return
        wanted = f"{tuple(expected)} in the reference's block ids: (its shared last block, the free block it copies into)"
        if got is None:
            self._fail(f"{call} must return (src, dst): the last block is shared with another sequence", expected=wanted,
                       got=None,
                       hint="copy-on-write: the sequence is about to write into a block another sequence still "
                            "reads; take a free block, put it in place of the shared one, drop one reference to "
                            "the shared block, and return (shared block, new block).")
        table_after = self._student_table(seq_id)
        if not isinstance(got, tuple) or len(got) != 2:
            self._fail(f"{call} must return a pair (src, dst) of block ids", expected=wanted, got=got,
                       hint="return a tuple (shared block, new block).")
        if table_after[-1] == table_before[-1]:
            self._fail(f"{call} returned {short_repr(got)}, but your block table still ends with block "
                       f"{table_before[-1]}, the shared one", expected=wanted, got=got,
                       hint="copy-on-write: take a free block and put it in place of the shared one at the END of "
                            "this sequence's block table, then return (shared block, new block).")
        if tuple(got) != (table_before[-1], table_after[-1]):
            self._fail(f"{call}: the copy pair must name the block your table ended with and the one that replaced "
                       f"it (your table went from ...{table_before[-1:]} to ...{table_after[-1:]})", expected=wanted,
                       got=got, hint="return (old last block, new last block) of this sequence's block table.")

    def _compare_slot(self, call: str, got: Any, args: tuple) -> None:
        seq_id, position = args
        table = self._student_table(seq_id)
        expected = table[position // self.block_size] * self.block_size + position % self.block_size
        if got != expected:
            self._fail(f"{call} with your block table {table}", expected=expected, got=got,
                       hint="slot = block_table[position // block_size] * block_size + position % block_size.")

    # ----- comparing the state ------------------------------------------------------------------

    def _student_table(self, seq_id: Any) -> list[int]:
        known = self._state["tables"] if self._state is not None else {}
        status, table = known[seq_id] if seq_id in known else \
            call_methods(self.student, [("block_table", (seq_id,))])[0]
        if status != "value":
            if isinstance(table, NotImplementedError):
                raise table
            raise CheckFailed(f"block_table({seq_id!r}) raised {type(table).__name__}: {table}\n  {self._where()}\n"
                              "  hint: the sequence holds blocks; return its list of block ids.") from table
        if not isinstance(table, (list, tuple)) or not all(isinstance(b, int) for b in table):
            self._fail(f"block_table({seq_id!r}) must return a list of ints", expected="list[int]", got=table)
        return list(table)

    def _compare_state(self, when: str, operation: str | None = None) -> None:
        status, free = self._read_state()["free"]
        if status != "value":
            raise free  # the student's own error, with its traceback (NotImplementedError: not written yet)
        expected_free = self.reference.num_free_blocks
        if free != expected_free:
            self._fail(f"num_free_blocks {when}", expected=expected_free, got=free, hint=_free_hint(operation, free,
                                                                                                  expected_free))
        student_to_reference: dict[int, tuple[int, Any, int]] = {}
        reference_to_student: dict[int, tuple[int, Any, int]] = {}
        for seq_id in self.live:
            table = self._student_table(seq_id)
            expected = self.reference.block_table(seq_id)
            if len(table) != len(expected):
                self._fail(f"block_table({seq_id!r}) {when} has the wrong number of blocks", expected=len(expected),
                           got=f"{len(table)} blocks: {short_repr(table)}",
                           hint=f"a sequence of n tokens holds ceil(n / {self.block_size}) blocks; append_slot takes "
                                "a new block only when the last one is full.")
            for index, (block, reference_block) in enumerate(zip(table, expected)):
                if not 0 <= block < self.num_blocks:
                    self._fail(f"block_table({seq_id!r}) {when} holds block id {block}", show_values=False,
                               hint=f"block ids are 0 .. num_blocks - 1 = {self.num_blocks - 1}.")
                seen = student_to_reference.setdefault(block, (reference_block, seq_id, index))
                if seen[0] != reference_block:
                    self._fail(f"{when}: block {block} is entry {index} of {seq_id!r}'s table and entry {seen[2]} of "
                               f"{seen[1]!r}'s, but the reference holds two different blocks there", show_values=False,
                               hint="a block went to two sequences that should not share it. Was it handed out while "
                                    "still in use? A freed block returns to the free list only when its ref count "
                                    "reaches 0.")
                seen_back = reference_to_student.setdefault(reference_block, (block, seq_id, index))
                if seen_back[0] != block:
                    self._fail(f"{when}: entry {index} of {seq_id!r}'s table and entry {seen_back[2]} of "
                               f"{seen_back[1]!r}'s should be the same physical block (the reference shares it), "
                               f"but yours are {block} and {seen_back[0]}", show_values=False,
                               hint="fork shares every block of the parent (ref count + 1) instead of copying; a "
                                    "block is copied only by append_slot, when the sequence writes into a shared "
                                    "last block.")


def _free_hint(operation: str | None, got: Any, expected: int) -> str:
    if not isinstance(got, int):
        return "num_free_blocks is a property that returns an int (the length of your free list)."
    if operation == "refused":
        return ("an operation that fails must change nothing: check that enough blocks are free BEFORE taking "
                "any (ask can_allocate / can_append first), then raise OutOfBlocksError.")
    if operation == "free" and got > expected:
        return ("too many blocks came back: a block that another sequence still holds (after fork) must stay "
                "taken; decrease its ref count and return it to the free list only when the count reaches 0.")
    if operation == "free" and got < expected:
        return "blocks went missing: free must return every block whose ref count drops to 0."
    if operation == "fork":
        return "fork takes no new blocks: the child shares the parent's blocks (ref count + 1 each)."
    if operation == "allocate":
        return "allocate takes ceil(len(token_ids) / block_size) blocks from the free list."
    if operation == "append_slot":
        return ("append_slot takes a new block only when the last block is full, or shared and must be copied; "
                "otherwise the token fits in the last block.")
    return "num_free_blocks must count the blocks no sequence holds."


def _live_after(live: list[Any], operation: str, args: tuple, expected_error: Exception | None) -> list[Any]:
    """The sequences holding blocks after ``operation``, as the reference's outcome says."""
    if expected_error is not None:
        return live
    if operation == "allocate":
        return [*live, args[0]]
    if operation == "fork":
        return [*live, args[1]]
    if operation == "free":
        return [seq_id for seq_id in live if seq_id != args[0]]
    return live


def _apply(allocator: BlockAllocator, operation: str, args: tuple) -> tuple[Any, Exception | None]:
    try:
        return getattr(allocator, operation)(*args), None
    except (OutOfBlocksError, ValueError) as error:
        return None, error


# ---------------------------------------------------------------------------------------------
# The checks the test cells call
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_interface(student_cls: Any) -> None:
    """The class can be built with (num_blocks, block_size) and has every member the engine calls."""
    mirror = _Mirror(student_cls, 4, 16)
    missing = [name for name in REQUIRED_MEMBERS if not hasattr(mirror.student, name)]
    if missing:
        fail("your BlockAllocator is missing members", expected=list(REQUIRED_MEMBERS), got=f"missing: {missing}",
             hint="keep every method of the skeleton; the engine of chapter 5 calls them all.")
    mirror.run("allocate", "a", _tokens(20))
    mirror.run("mark_computed", "a", _tokens(20), 20)  # nothing to do without prefix caching
    for name, value in (("num_blocks", 4), ("block_size", 16)):
        if getattr(mirror.student, name, None) != value:
            fail(f"BlockAllocator(4, 16).{name}", expected=value, got=getattr(mirror.student, name, None),
                 hint="store the constructor's arguments as attributes with these names.")


@recorded_check
def check_blocks_needed(student_cls: Any, block_size: int, lengths: list[int]) -> None:
    """``blocks_needed(n)`` equals ceil(n / block_size) for every n in ``lengths``."""
    mirror = _Mirror(student_cls, 8, block_size)
    for num_tokens in lengths:
        mirror.run("blocks_needed", num_tokens)


@recorded_check
def check_allocate_and_free(student_cls: Any, num_blocks: int = 4, block_size: int = 4) -> None:
    """Allocate until the pool is short, refuse what does not fit, free, and allocate again."""
    mirror = _Mirror(student_cls, num_blocks, block_size)
    mirror.run("can_allocate", _tokens(2 * block_size + 1))
    mirror.run("allocate", "a", _tokens(2 * block_size + 1))
    mirror.run("can_allocate", _tokens(num_blocks * block_size))
    mirror.run("allocate", "b", _tokens(num_blocks * block_size))  # too big: must raise and take nothing
    mirror.run("allocate", "c", _tokens(1))
    mirror.run("free", "a")
    mirror.run("allocate", "d", _tokens(3 * block_size))
    mirror.run("free", "c")
    mirror.run("free", "d")


@recorded_check
def check_append_slot(student_cls: Any, num_blocks: int = 4, block_size: int = 4) -> None:
    """Tokens fill the last block before a new block is taken; a full pool refuses to grow."""
    mirror = _Mirror(student_cls, num_blocks, block_size)
    start = max(1, block_size - 1)
    mirror.run("allocate", "a", _tokens(start))
    for _ in range(2 * block_size - start + 1):  # fill two blocks, then one token into a third
        mirror.run("can_append", "a")
        mirror.run("append_slot", "a")
    mirror.run("allocate", "b", _tokens(1))
    for _ in range(block_size):
        mirror.run("can_append", "b")
        mirror.run("append_slot", "b")  # with 4 blocks the last one needs a block and none is free
    mirror.run("free", "a")
    mirror.run("append_slot", "b")


@recorded_check
def check_slot(student_cls: Any, block_size: int = 4, num_tokens: int = 11) -> None:
    """``slot(seq, p)`` goes through the block table for every position of two interleaved sequences."""
    mirror = _Mirror(student_cls, 8, block_size)
    mirror.run("allocate", "a", _tokens(2))
    mirror.run("allocate", "b", _tokens(block_size + 1))
    for _ in range(num_tokens - 2):
        mirror.run("append_slot", "a")
    for seq_id, length in (("a", num_tokens), ("b", block_size + 1)):
        for position in range(length):
            mirror.run("slot", seq_id, position)


@recorded_check
def check_fork_and_copy_on_write(student_cls: Any, block_size: int = 4) -> None:
    """A fork shares every block; writing into a shared last block copies it; free respects ref counts."""
    mirror = _Mirror(student_cls, 6, block_size)
    mirror.run("allocate", "parent", _tokens(block_size + 2))
    mirror.run("fork", "parent", "child")
    mirror.run("can_append", "child")
    mirror.run("append_slot", "child")  # last block shared: copy-on-write
    mirror.run("append_slot", "parent")  # now the parent's last block is its own: no copy
    mirror.run("fork", "child", "grandchild")
    mirror.run("free", "parent")  # the first block is still held by the child and the grandchild
    mirror.run("allocate", "other", _tokens(2 * block_size))
    mirror.run("free", "child")
    mirror.run("append_slot", "grandchild")
    mirror.run("free", "grandchild")
    mirror.run("free", "other")


@recorded_check
def check_random_operations(student_cls: Any, seed: int, num_operations: int = 300, num_blocks: int | None = None,
                            block_size: int | None = None) -> None:
    """A seeded random sequence of operations, compared with the reference after every one.

    The mix favours what breaks allocators: small pools (so allocations and appends are refused),
    forks followed by appends (copy-on-write) and frees of shared blocks (ref counts).
    """
    rng = random.Random(seed)
    num_blocks = num_blocks or rng.randint(3, 12)
    block_size = block_size or rng.choice([1, 2, 3, 4, 8, 16])
    mirror = _Mirror(student_cls, num_blocks, block_size)
    next_id = 0
    for _ in range(num_operations):
        choice = rng.random()
        if not mirror.live or choice < 0.2:
            num_tokens = rng.randint(1, max(1, (num_blocks // 2 + 1) * block_size))
            if rng.random() < 0.3:
                mirror.run("can_allocate", _tokens(num_tokens))
            mirror.run("allocate", f"s{next_id}", _tokens(num_tokens))
            next_id += 1
        elif choice < 0.55:
            seq_id = rng.choice(mirror.live)
            if rng.random() < 0.3:
                mirror.run("can_append", seq_id)
            mirror.run("append_slot", seq_id)
        elif choice < 0.65:
            mirror.run("fork", rng.choice(mirror.live), f"s{next_id}")
            next_id += 1
        elif choice < 0.85:
            mirror.run("free", rng.choice(mirror.live))
        elif choice < 0.92:
            seq_id = rng.choice(mirror.live)
            mirror.run("slot", seq_id, rng.randrange(mirror.reference.num_slots(seq_id)))
        elif choice < 0.94:
            seq_id = rng.choice(mirror.live)
            mirror.run("mark_computed", seq_id, _tokens(mirror.reference.num_slots(seq_id)), 1)
        else:
            mirror.run("blocks_needed", rng.randint(0, 5 * block_size))
