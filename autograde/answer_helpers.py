"""Platform code that computes an exercise's answer, found from what the references and the checks call.

The student edition stubs every definition marked ``@exercise`` for a locked lab. That is not
enough: a reference leans on helpers (``naive_attention`` on ``causal_mask`` and
``repeat_kv_heads``), and the checks name other platform functions as references of their own
(``free_holes``, ``kv_bytes_per_token``, ``PagedKVCache.bytes_per_block``, ``sdpa_reference``):
each computes part of an answer, and a student could hand it in. This module finds them:

1. it reads every module of ``course_lib`` (its syntax trees, nothing is imported) and builds a
   call graph: a name in a function's body that resolves, through the module's imports, to a
   course_lib function, class or method (``self.method`` inside a class too);
2. the roots are the marked references of the locked labs, what the checks of those labs wrap
   with ``reference(...)``, and the names they register with ``register_reference_names`` (a
   checks module belongs to the labs of the marked references it names);
3. everything the roots reach is an *answer helper*, unless ``PLATFORM`` keeps it and says why:
   the data types, the model and its loader, the engine's parts the kits run, the outside
   implementations. A helper of a checks module that the kit's visible tests call directly (not
   through ``reference``, which replays a recording there) is stubbed in the grading edition only.

``build_edition`` stubs the answer helpers of the locked labs like the marked references. A test
runs the generator on the whole library and fails on a definition it reaches that is neither
stubbed nor kept for a stated reason, so a new helper is classified by whoever adds it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["AnswerHelper", "EXTRA_ROOTS", "PLATFORM", "answer_helpers", "library_index"]

# Machinery: the course's tools, not its library. Never stubbed, never followed.
MACHINERY = ("course_lib.runner", "course_lib.commands", "course_lib.handin", "course_lib.cli")

# Definitions (or prefixes: a module, a class) the kits need working, each with the reason it is not an
# answer. Reached from a reference, they stay; the helpers they call are not stubbed on their account.
PLATFORM: dict[str, str] = {
    "course_lib.exercises": "the exercise markers and the edition's own bookkeeping",
    "course_lib.disk_cache": "the cache of public artifacts (corpus, dequantized weights)",
    "course_lib.gguf_file": "reads the model file's header; no exercise parses GGUF",
    "course_lib.model": "the model every kit runs (its forward is the platform; exercises plug into it)",
    "course_lib.model_config": "the model's sizes, read from the GGUF header (a data type)",
    "course_lib.kv_cache.KVCache": "the contiguous cache the model runs with in every kit",
    "course_lib.attention.AttentionContext": "a protocol: no code",
    "course_lib.attention.UncachedAttention": "the model's attention without a cache: torch's SDPA on its layout",
    "course_lib.attention.sdpa_attention": "torch's fused attention on the engine's layout, the model's attention in "
                                           "every kit (it no longer calls the course's mask helper); an answer that "
                                           "calls it is refused by require_own_implementation, a registered reference",
    "course_lib.attention._default_scale": "1/sqrt(head_dim): given in the text",
    "course_lib.scheduler.Request": "a request's data (the exercises move it along)",
    "course_lib.scheduler.RequestStatus": "an enum",
    "course_lib.scheduler.ScheduledChunk": "a data type",
    "course_lib.scheduler.SchedulerConfig": "a data type",
    "course_lib.scheduler.SchedulerOutput": "a data type",
    "course_lib.scheduler.VerifiedTokens": "a data type",
    "course_lib.scheduler._without_chunking": "a config copy with chunking off (a platform switch)",
    "course_lib.paged.AllocatorProtocol": "a protocol: no code",
    "course_lib.paged.OutOfBlocksError": "an exception type",
    "course_lib.paged._warn_once": "a warning helper",
    "course_lib.paged.hash_block": "sha256 of one block's tokens and its parent's hash (given in the text; the "
                                   "exercise is the chain, hash_blocks)",
    "course_lib.metrics": "latency records the engine and server fill in every kit",
    "course_lib.roofline.Cost": "a data type with a sum",
    "course_lib.roofline._ModelSizes": "a model's shape as numbers (no formula)",
    "course_lib.sampling.SamplingParams": "a data type",
    "course_lib.sampling.filtered_probs": "the platform sampler's composition of the exercises' filters (stubs in a "
                                          "locked edition)",
    "course_lib.sampling._per_row": "a per-row argument as a column",
    "course_lib.sim.batching.BatchState": "a data type",
    "course_lib.sim.batching.SimRequest": "a data type",
    "course_lib.sim.fragmentation.Reservation": "a data type",
    "course_lib.tokenizer._Piece": "a data type",
    "course_lib.tokenizer._progress_bar": "a progress bar",
    "course_lib.tokenizer._special_token_regex": "special tokens as a regex: given in the text",
    "course_lib.tokenizer._split_on_special_tokens": "cuts special tokens out of text before BPE (the model's "
                                                     "tokenizer needs it); no exercise asks for it",
    "course_lib.tokenizer.pretokenize": "the GPT-2 word pattern, given to students as scaffolding",
    "course_lib.tokenizer.BPETokenizer": "SmolLM2's tokenizer in every kit; with tables other than the model file's "
                                         "it refuses to encode or decode until Lab 0.1 unlocks",
    "course_lib.kernels.paged_attention.paged_decode_attention_ref": "the torch version Lab 0.3 chapters 3 and 4 show "
                                                                     "and run; the exercise is the Triton kernel",
    "course_lib.kernels.paged_attention.gather_sequence_kv": "part of the torch version chapter 3 shows",
    "course_lib.kernels.paged_attention.store_kv_ref": "the torch version chapter 4 shows; the exercise is the kernel",
    "course_lib.kernels.paged_attention._num_sms": "reads the GPU's SM count",
    "course_lib.kernels.paged_attention._padded": "rounds up to a power of two (Triton's tile rule)",
    "course_lib.kernels.paged_attention._tile_size": "Triton's tile rule",
    "course_lib.kernels.rmsnorm.add_rmsnorm_ref": "the torch version Lab 0.3 chapter 2 shows; the exercise is the kernel",
    "course_lib.kernels.rmsnorm.unfused_add_rmsnorm": "chapter 2 prints it and counts its bytes",
    "course_lib.kernels.timing.median": "statistics' median: outside code",
    "course_lib.model_runner.paged_decode_attention_torch": "the engine's paged attention on a CPU in every kit (and "
                                                            "shown in Lab 0.3 chapters 3 and 5)",
    "course_lib.loadtest": "the load generator the server labs run; its exercises are marked",
    "course_lib.quantization.quantize_model": "composes the lab's quantizers (stubs in a locked edition)",
    "course_lib.quantization.QuantizedLinear": "a quantized layer's storage and forward, on the lab's quantizers",
    "course_lib.quantization._fused_op": "PyTorch's fused weight-only kernels (outside code)",
    "course_lib.quantization._locked_reference": "the message a locked lab gives",
    "course_lib.quantization.fused_kernel_available": "whether PyTorch has the fused kernel",
    "course_lib.quantization._fp16_field": "reads a GGUF block's fp16 field",
    "course_lib.quantization._model_device": "where a model's weights live",
    "course_lib.quantization._safe_scale": "a scale that is never zero",
    "course_lib.quantization._blocks": "a weight viewed as blocks (the GGUF layout, given in the text)",
    "course_lib.server.routing.token_bytes": "token ids as bytes for a hash",
    "course_lib.server.routing.stable_hash": "sha256 as an int",
    "course_lib.speculative.sample_with_uniform": "inverse-CDF sampling with a given uniform (the platform's sampler)",
    "course_lib.speculative.SpeculativeConfig": "a data type",
    "course_lib.speculative.Speculator": "the engine's speculation on the lab's verifier (stubs in a locked edition)",
    "course_lib.speculative.greedy_verify": "the engine's greedy acceptance (platform)",
    "course_lib.speculative._reference_or_locked": "the message a locked lab gives",
    "course_lib.engine": "the engine every kit runs; its exercises (allocator, scheduler, sampler...) plug into it",
    "course_lib.model_runner": "the engine's model runner",
    "course_lib.detokenizer": "the engine's streaming detokenizer",
    "course_lib.paged.PagedKVCache": "the paged cache's storage (its bytes_per_block is an answer: EXTRA_ROOTS)",
    "course_lib.sampling.sample": "the engine's sampler, on the lab's filters",
    "course_lib.sampling.make_generator": "a seeded torch generator",
    "course_lib.scheduler.SchedulerProtocol": "a protocol: no code",
    "course_lib.sim.batching.RequestTrace": "a data type",
    "course_lib.kernels.byte_counter": "the byte counter Lab 0.3 chapter 2 runs (a measuring tool)",
    "course_lib.checks.smollm2": "the model for notebooks and checks (a loader)",
    "course_lib.checks._cached_smollm2": "the model for notebooks and checks (a loader)",
    "course_lib.checks._shared.CountingModel": "a check's wrapper that counts what the model ran",
    "course_lib.checks.decode.tiny_model": "a small random model for notebooks and checks",
    "course_lib.checks.chunked_prefill.run_engine_with": "runs the engine with given parts (the student's, in checks)",
    "course_lib.checks.chunked_prefill._scenario_model": "picks a model for a scenario",
    "course_lib.checks.prefix_caching.serve_shared_prompt": "runs the engine with given parts",
    "course_lib.checks.prefix_caching._engine_model": "picks a model",
    "course_lib.checks.kernels_engine._engine_settings": "engine settings of a scenario",
    "course_lib.checks.batching._trace": "a trace as data",
}

# Argument checks (``_check_shapes``, ``_require_int``, ``_is_number``...) raise clear errors and compute nothing.
_ARGUMENT_CHECK = ("_check", "_require", "_is_")

# Platform functions the checks compare with directly (not through ``reference``), so the generator
# cannot see them as references: each is an answer of the lab named.
EXTRA_ROOTS: dict[str, str] = {
    "course_lib.paged.PagedKVCache.bytes_per_block": "lab01-text-to-tensors",
}


@dataclass(frozen=True)
class AnswerHelper:
    """A definition that computes part of an answer: where it is and the labs whose answers it serves."""

    module: str
    qualname: str
    labs: frozenset[str]
    reached_from: str        # the reference (or check) it was reached from

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclass
class _Definition:
    module: str
    qualname: str
    node: ast.AST
    owner: str | None        # the class, for a method


@dataclass
class LibraryIndex:
    """course_lib's definitions, the names each module imports, the calls of each definition."""

    definitions: dict[str, _Definition] = field(default_factory=dict)
    scopes: dict[str, dict[str, str]] = field(default_factory=dict)
    calls: dict[str, set[str]] = field(default_factory=dict)
    marked: dict[str, str] = field(default_factory=dict)           # qualified name -> lab
    reference_roots: dict[str, set[str]] = field(default_factory=dict)   # checks module -> roots
    live: dict[str, set[str]] = field(default_factory=dict)   # checks module -> names it calls directly


def _module_name(package_dir: Path, path: Path) -> str:
    parts = ("course_lib", *path.relative_to(package_dir).with_suffix("").parts)
    return ".".join(parts).removesuffix(".__init__")


def _imports(tree: ast.Module, module: str) -> dict[str, str]:
    """Names a module binds to course_lib things: ``name -> qualified name`` (imports anywhere in it)."""
    names: dict[str, str] = {}
    package = module if module.endswith("__init__") else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base.startswith("course_lib"):
                for alias in node.names:
                    names.setdefault(alias.asname or alias.name, f"{base}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("course_lib"):
                    names.setdefault(alias.asname or alias.name.split(".")[0],
                                     alias.name if alias.asname else alias.name.split(".")[0])
    return names


def library_index(package_dir: Path) -> LibraryIndex:
    """Read every module of the package at ``package_dir`` (a course_lib folder) into a LibraryIndex."""
    from autograde.marks import marked_definitions

    index = LibraryIndex()
    trees: dict[str, ast.Module] = {}
    for path in sorted(Path(package_dir).rglob("*.py")):
        module = _module_name(Path(package_dir), path)
        if module.startswith(MACHINERY):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        trees[module] = tree
        index.scopes[module] = _imports(tree, module)
        for marked in marked_definitions(tree):
            index.marked[f"{module}.{marked.qualname}"] = marked.exercise.lab

        def visit(body, prefix: str, owner: str | None) -> None:
            for node in body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    qualname = f"{prefix}{node.name}"
                    index.definitions[f"{module}.{qualname}"] = _Definition(module, qualname, node, owner)
                    if isinstance(node, ast.ClassDef):
                        visit(node.body, f"{qualname}.", f"{module}.{qualname}")
                elif isinstance(node, (ast.If, ast.Try)):   # definitions under `if TYPE_CHECKING:` and the like
                    visit(getattr(node, "body", []), prefix, owner)

        visit(tree.body, "", None)
        for node in tree.body:   # module-level names: its own definitions
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                index.scopes[module].setdefault(node.name, f"{module}.{node.name}")
    for name, definition in index.definitions.items():
        index.calls[name] = _calls(index, definition)
    for module, tree in trees.items():
        if module.startswith("course_lib.checks"):
            index.reference_roots[module] = _check_roots(index, module, tree)
            index.live[module] = _called_directly(tree)
    return index


def _called_directly(tree: ast.Module) -> set[str]:
    """Names a checks module calls as ``name(...)``: run live by its visible tests (a ``reference(name)(...)``
    call is replayed from a recording in the kit, never run)."""
    return {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def _resolve(index: LibraryIndex, name: str) -> str | None:
    """A qualified name to its definition, following re-exports (``course_lib.x.f`` defined in ``course_lib.x.y``)."""
    seen = set()
    while name not in index.definitions and name not in seen:
        seen.add(name)
        module, _, attribute = name.rpartition(".")
        target = index.scopes.get(module, {}).get(attribute)
        if target is None:
            return None
        name = target
    return name if name in index.definitions else None


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _calls(index: LibraryIndex, definition: _Definition) -> set[str]:
    """The course_lib definitions a definition's code names (a class: its methods too)."""
    scope = index.scopes.get(definition.module, {})
    found: set[str] = set()
    for node in ast.walk(definition.node):
        if not isinstance(node, (ast.Name, ast.Attribute)):
            continue
        parts = _dotted(node)
        if not parts:
            continue
        if parts[0] in ("self", "cls") and definition.owner and len(parts) >= 2:
            target = _resolve(index, f"{definition.owner}.{parts[1]}")
        elif parts[0] in scope:
            target = None
            base = scope[parts[0]]
            for end in range(len(parts), 0, -1):
                target = _resolve(index, ".".join([base, *parts[1:end]]))
                if target:
                    break
        else:
            target = None
        if target:
            found.add(target)
    if isinstance(definition.node, ast.ClassDef):
        found.update(f"{definition.module}.{definition.qualname}.{child.name}" for child in definition.node.body
                     if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    found.discard(f"{definition.module}.{definition.qualname}")
    return found


def _check_roots(index: LibraryIndex, module: str, tree: ast.Module) -> set[str]:
    """What a checks module treats as references: ``reference(X)`` targets and registered names."""
    scope = index.scopes.get(module, {})
    roots: set[str] = set()
    registered: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        if node.func.id == "reference" and node.args:
            parts = _dotted(node.args[0])
            if parts and parts[0] in scope:
                target = _resolve(index, ".".join([scope[parts[0]], *parts[1:]]))
                if target:
                    roots.add(target)
        elif node.func.id == "register_reference_names":
            registered.update(arg.value for arg in node.args if isinstance(arg, ast.Constant)
                              and isinstance(arg.value, str))
    for name, definition in index.definitions.items():
        if definition.qualname.rpartition(".")[2] in registered and (
                not definition.module.startswith("course_lib.checks") or definition.module == module):
            roots.add(name)
    return roots


def _kept(name: str) -> str | None:
    """Why ``name`` stays in every edition (None: it does not)."""
    if name in EXTRA_ROOTS:
        return None
    if name.rpartition(".")[2].startswith(_ARGUMENT_CHECK):
        return "argument checks"
    for prefix, reason in PLATFORM.items():
        if name == prefix or name.startswith(prefix + "."):
            return reason
    return None


def _in_marked(index: LibraryIndex, name: str) -> bool:
    """Whether ``name`` is marked, or a member of a marked class (stubbed with it)."""
    parts = name.split(".")
    return any(".".join(parts[:end]) in index.marked for end in range(2, len(parts) + 1))


def answer_helpers(index: LibraryIndex, locked: set[str] | frozenset[str], *, grading: bool = False
                   ) -> list[AnswerHelper]:
    """The definitions a student edition locking ``locked`` must stub besides the marked ones.

    ``grading``: the edition of a grading kernel, where the visible tests do not run, so the checks'
    helpers that those tests call directly (``live``) are stubbed too; in a kit they stay.
    """
    locked = set(locked)
    reached: dict[str, tuple[set[str], str]] = {}

    def reach(start: str, labs: set[str]) -> None:
        todo = [start]
        while todo:
            current = todo.pop()
            for callee in index.calls.get(current, ()):
                if _in_marked(index, callee):
                    continue
                entry = reached.setdefault(callee, (set(), current))
                if labs <= entry[0]:
                    continue
                entry[0].update(labs)
                if _kept(callee) is None:
                    todo.append(callee)

    for name, lab in index.marked.items():
        if lab in locked:
            reach(name, {lab})
    for name, lab in EXTRA_ROOTS.items():
        if lab in locked and name in index.definitions:
            reached.setdefault(name, (set(), "compared with directly by the checks"))[0].add(lab)
            reach(name, {lab})
    for module, roots in index.reference_roots.items():
        labs = {index.marked[root] for root in roots if root in index.marked}
        labs |= {index.marked[callee] for root in roots for callee in index.calls.get(root, ()) if callee in index.marked}
        if not labs & locked:
            continue
        for root in roots:
            if _in_marked(index, root):
                continue
            reached.setdefault(root, (set(), f"{module} (a reference of the checks)"))[0].update(labs)
            if _kept(root) is None:
                reach(root, labs)
    helpers = []
    for name, (labs, origin) in sorted(reached.items()):
        if _in_marked(index, name) or not labs & locked or _kept(name) is not None:
            continue
        definition = index.definitions[name]
        if definition.module.startswith("course_lib.checks") and not grading \
                and definition.qualname.split(".")[0] in index.live.get(definition.module, set()):
            continue   # the kit's visible tests compute with it
        helpers.append(AnswerHelper(definition.module, definition.qualname, frozenset(labs & locked), origin))
    return helpers
