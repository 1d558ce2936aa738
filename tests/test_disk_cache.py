"""The disk cache of slow artifacts (course_lib.disk_cache), the corpus and the GGUF weights through it."""

from __future__ import annotations

import os

import numpy as np
import pytest

from course_lib import disk_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(disk_cache.CACHE_ENVIRONMENT, str(folder))
    return folder


def counting(value):
    calls = []

    def build():
        calls.append(1)
        return value

    return build, calls


def test_text_is_built_once_and_read_back(cache):
    build, calls = counting("naïve café 🙂\n\n" * 100)
    key = disk_cache.fingerprint("corpus", 1)
    assert disk_cache.cached_text("corpus", key, build) == "naïve café 🙂\n\n" * 100
    assert disk_cache.cached_text("corpus", key, build) == "naïve café 🙂\n\n" * 100
    assert len(calls) == 1
    assert disk_cache.read_text("corpus", disk_cache.fingerprint("corpus", 2)) is None  # another key: nothing
    assert not [path for path in (cache / "text").iterdir() if path.name.endswith(".partial")]


def test_a_damaged_text_entry_is_rebuilt_not_trusted(cache):
    key = disk_cache.fingerprint("x")
    disk_cache.cached_text("corpus", key, lambda: "the real text")
    entry = next((cache / "text").iterdir())
    raw = bytearray(entry.read_bytes())
    raw[-3] ^= 0x20  # one flipped bit in the text: the checksum no longer matches
    entry.write_bytes(bytes(raw))
    assert disk_cache.read_text("corpus", key) is None
    build, calls = counting("the real text")
    assert disk_cache.cached_text("corpus", key, build) == "the real text" and calls == [1]
    assert disk_cache.read_text("corpus", key) == "the real text"  # and the entry is whole again


def test_a_folder_that_cannot_be_written_only_costs_the_build(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv(disk_cache.CACHE_ENVIRONMENT, str(blocker / "cache"))
    build, calls = counting("built")
    assert disk_cache.cached_text("corpus", "k", build) == "built"
    assert disk_cache.cached_text("corpus", "k", build) == "built"
    assert len(calls) == 2
    array = disk_cache.cached_array("table", "k", lambda: np.arange(6, dtype=np.float32))
    assert array.tolist() == [0, 1, 2, 3, 4, 5]


def test_arrays_come_back_equal_and_writable(cache):
    original = np.random.default_rng(0).standard_normal((7, 5)).astype(np.float32)
    build, calls = counting(original)
    first = disk_cache.cached_array("table", "k", build)
    second = disk_cache.cached_array("table", "k", build)
    assert calls == [1] and second.dtype == np.float32 and second.shape == (7, 5)
    np.testing.assert_array_equal(first, second)
    assert second.flags.writeable  # torch.from_numpy would warn (on stderr) about a read-only array


def test_a_truncated_array_entry_is_rebuilt(cache):
    disk_cache.cached_array("table", "k", lambda: np.ones((100, 100), dtype=np.float32))
    entry = next((cache / "arrays").iterdir())
    entry.write_bytes(entry.read_bytes()[:1000])
    build, calls = counting(np.ones((100, 100), dtype=np.float32))
    assert disk_cache.cached_array("table", "k", build).shape == (100, 100) and calls == [1]


@pytest.mark.parametrize("name", ["../escape", "a/b", "", "a b"])
def test_entry_names_stay_inside_the_folder(cache, name):
    with pytest.raises(ValueError, match="name must be"):
        disk_cache.cached_text(name, "k", lambda: "x")


def test_file_fingerprint_changes_when_the_file_does(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"1234")
    before = disk_cache.file_fingerprint(path)
    path.write_bytes(b"12345")
    assert disk_cache.file_fingerprint(path) != before


# ---- the corpus through the cache ------------------------------------------------------------


def test_a_corpus_prefix_is_the_same_text_with_and_without_the_cached_whole(cache):
    """A prefix parses only the files it needs; with the whole corpus cached it is cut from that.
    Both must give the same bytes, also for cuts that end inside a separator between documents."""
    from course_lib import corpus

    corpus._stdlib_docstrings.cache_clear()
    whole = corpus.load_corpus("stdlib-docstrings")
    first_separator = whole.encode("utf-8").index(corpus.DOCUMENT_SEPARATOR.encode())
    cuts = [0, 1, first_separator - 1, first_separator, first_separator + 1, first_separator + 2, 4_321, 123_457]
    for max_bytes in cuts:
        parsed = corpus._parse_stdlib_docstrings(max_bytes).encode("utf-8")
        assert len(parsed) >= max_bytes, max_bytes
        assert parsed[:max_bytes] == whole.encode("utf-8")[:max_bytes], max_bytes
        corpus._stdlib_docstrings.cache_clear()
        assert corpus.load_corpus("stdlib-docstrings", max_bytes=max_bytes).encode("utf-8") == \
            whole.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore").encode("utf-8")
    corpus._stdlib_docstrings.cache_clear()
    assert corpus.load_corpus("stdlib-docstrings") == whole  # read back from the cache this time
    assert any(path.name.startswith("stdlib-docstrings-") for path in (cache / "text").iterdir())


# ---- GGUF weights through the cache ----------------------------------------------------------


def test_cached_dequantized_weights_equal_the_gguf_package(cache):
    import gguf

    from course_lib.gguf_file import dequantize, open_gguf

    tensors = {tensor.name: tensor for tensor in open_gguf(None).tensors}
    for name in ("token_embd.weight", "blk.3.attn_k.weight", "output_norm.weight"):
        tensor = tensors[name]
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        for _ in range(2):  # built, then read back
            np.testing.assert_array_equal(dequantize(tensor), expected)
    stored = sorted(path.name.rsplit("-", 1)[0] for path in (cache / "arrays").iterdir())
    assert stored == ["gguf-blk.3.attn_k.weight", "gguf-output_norm.weight", "gguf-token_embd.weight"]
    assert not any(name.endswith(".partial") for name in os.listdir(cache / "arrays"))


def test_a_new_version_of_an_entry_replaces_the_old_one(cache):
    """A changed input (a reinstalled model file) gives a new key; the old entry goes, others stay."""
    disk_cache.cached_array("gguf-blk.1.attn_q.weight", disk_cache.fingerprint(1), lambda: np.zeros(3))
    disk_cache.cached_array("gguf-blk.1.attn_q.weight_scale", disk_cache.fingerprint(1), lambda: np.zeros(2))
    disk_cache.cached_array("gguf-blk.1.attn_q.weight", disk_cache.fingerprint(2), lambda: np.ones(3))
    names = sorted(path.name for path in (cache / "arrays").iterdir())
    assert names == sorted([f"gguf-blk.1.attn_q.weight-{disk_cache.fingerprint(2)}.npy",
                            f"gguf-blk.1.attn_q.weight_scale-{disk_cache.fingerprint(1)}.npy"])


def test_a_cached_tensor_is_read_by_name_without_parsing_the_gguf_header(cache, monkeypatch):
    import gguf

    from course_lib import gguf_file

    tensor = next(t for t in gguf_file.open_gguf(None).tensors if t.name == "blk.0.ffn_down.weight")
    expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    np.testing.assert_array_equal(gguf_file.dequantize_by_name("blk.0.ffn_down.weight"), expected)  # a miss

    def no_parsing(*args, **kwargs):
        raise AssertionError("the GGUF header was parsed although the tensor is cached")

    monkeypatch.setattr(gguf_file, "open_gguf", no_parsing)
    np.testing.assert_array_equal(gguf_file.dequantize_by_name("blk.0.ffn_down.weight"), expected)
    with pytest.raises(AssertionError, match="header was parsed"):
        gguf_file.dequantize_by_name("blk.0.ffn_up.weight")  # not cached yet: it must read the file


def test_cached_metadata_equals_the_gguf_readers_fields(cache):
    from course_lib import gguf_file

    gguf_file._read_metadata.cache_clear()
    reader = gguf_file.open_gguf(None)
    for _ in range(2):  # parsed, then read back from the cache
        metadata = gguf_file.read_metadata()
        assert set(metadata) == set(reader.fields)
        for key, field in reader.fields.items():
            assert metadata[key] == field.contents(), key
        gguf_file._read_metadata.cache_clear()


def test_cached_tensor_infos_equal_the_gguf_readers_tensors(cache):
    from course_lib import gguf_file

    gguf_file._read_tensor_infos.cache_clear()
    tensors = gguf_file.open_gguf(None).tensors
    for _ in range(2):  # parsed, then read back from the cache
        infos = gguf_file.read_tensor_infos()
        assert [info.name for info in infos] == [tensor.name for tensor in tensors]
        for info, tensor in zip(infos, tensors):
            assert (info.type, info.shape, info.n_elements, info.n_bytes) == \
                (tensor.tensor_type.name, tuple(int(size) for size in tensor.shape), int(tensor.n_elements),
                 int(tensor.n_bytes)), info.name
        gguf_file._read_tensor_infos.cache_clear()


def test_a_warm_cache_loads_the_model_without_parsing_the_gguf_header(cache, monkeypatch):
    """The kernel of every graded notebook and the grader load SmolLM2: after the first, in well under a
    second, because neither the header (3 s) nor the dequantization (1 s) is repeated."""
    import torch

    from course_lib import gguf_file, model

    for cached in (gguf_file._read_metadata, gguf_file._read_tokenizer_metadata, model.read_gguf_weights):
        cached.cache_clear()
    first = model.read_gguf_weights()

    def no_parsing(*args, **kwargs):
        raise AssertionError("the GGUF header was parsed although everything is cached")

    monkeypatch.setattr(gguf_file, "open_gguf", no_parsing)
    for cached in (gguf_file._read_metadata, gguf_file._read_tokenizer_metadata, model.read_gguf_weights):
        cached.cache_clear()
    second = model.read_gguf_weights()
    assert model.ModelConfig.from_gguf().num_layers == 30
    assert second.keys() == first.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name
    for cached in (gguf_file._read_metadata, gguf_file._read_tokenizer_metadata, model.read_gguf_weights):
        cached.cache_clear()  # the next test must not keep weights read from this test's folder


# ---- filling the cache before graded kernels start ---------------------------------------------


def _tiny_gguf(path) -> dict[str, np.ndarray]:
    """A GGUF file of two small tensors (fp32 and fp16), written by the gguf package; returns them."""
    import gguf

    tensors = {"tiny.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
               "tiny.norm": np.linspace(0.5, 1.5, 8).astype(np.float16)}
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tensors


def test_filling_the_cache_dequantizes_each_tensor_once_and_then_reads_without_the_header(cache, tmp_path,
                                                                                           monkeypatch):
    from course_lib import gguf_file

    tensors = _tiny_gguf(tmp_path / "tiny.gguf")
    assert gguf_file.fill_disk_cache(tmp_path / "tiny.gguf") == 2
    assert gguf_file.fill_disk_cache(tmp_path / "tiny.gguf") == 0   # full: nothing is dequantized again

    def no_parsing(*args, **kwargs):
        raise AssertionError("the GGUF header was parsed although the cache was filled")

    monkeypatch.setattr(gguf_file, "open_gguf", no_parsing)
    for name, array in tensors.items():
        np.testing.assert_array_equal(gguf_file.dequantize_by_name(name, tmp_path / "tiny.gguf"),
                                      array.astype(np.float32))


def test_the_grader_fills_the_shared_cache_once_per_process_under_a_lock(cache, monkeypatch):
    """Graded kernels only read the cache: the grader fills it (model and corpus) before the first one."""
    from course_lib import corpus, gguf_file
    from course_lib.runner import sandbox

    calls = []
    monkeypatch.setattr(gguf_file, "fill_disk_cache", lambda: calls.append("model") or 0)
    monkeypatch.setattr(corpus, "load_corpus", lambda name: calls.append(name) or "")
    sandbox.fill_shared_cache.cache_clear()
    try:
        assert sandbox.fill_shared_cache() and sandbox.fill_shared_cache()
        assert calls == ["model", "stdlib-docstrings"], "filled once per process, model and corpus"
        assert (cache / ".filling.lock").is_file()
    finally:
        sandbox.fill_shared_cache.cache_clear()


def test_a_missing_model_leaves_the_corpus_filled_and_the_grader_running(cache, monkeypatch):
    from course_lib import corpus, gguf_file
    from course_lib.runner import sandbox

    def missing():
        raise gguf_file.ModelFileMissing("no model here")

    filled = []
    monkeypatch.setattr(gguf_file, "fill_disk_cache", missing)
    monkeypatch.setattr(corpus, "load_corpus", lambda name: filled.append(name) or "")
    sandbox.fill_shared_cache.cache_clear()
    try:
        assert sandbox.fill_shared_cache() is True and filled == ["stdlib-docstrings"], "the corpus is filled all the same"
    finally:
        sandbox.fill_shared_cache.cache_clear()
