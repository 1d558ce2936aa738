"""Shared fixtures. Heavy objects (our model, the transformers reference) load once per test process."""

from __future__ import annotations

import os
import warnings

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# The files that take minutes, in the order the two CI workers should start them. `make test` runs
# `-n 2 --dist loadfile --no-loadscope-reorder`: each worker takes whole files in collection order
# and starts with two, so the first worker runs the term (a quarter of the suite's time, in one
# module fixture) and the third file here while the second works through everything else. Left to
# xdist's default (the files with the most tests first) the term started last and ran alone at the end.
LONGEST_FIRST = ("test_term.py", "test_class_grading.py", "test_engine.py", "test_course_pipeline.py",
                 "test_grading_rules.py")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)   # stable: each file keeps its own order, and the other files theirs


@pytest.fixture(scope="session")
def gguf_file():
    from course_lib.model import gguf_path

    return gguf_path()


@pytest.fixture(scope="session")
def hf_tokenizer(gguf_file):
    """Hugging Face tokenizer built by transformers from the same GGUF file (the outside oracle)."""
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)


@pytest.fixture(scope="session")
def hf_model(gguf_file):
    """transformers' LlamaForCausalLM loaded (dequantized to fp32) from the same GGUF file."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_file.parent), gguf_file=gguf_file.name, dtype=torch.float32
        )
    return model.eval()


@pytest.fixture(scope="session")
def smollm2():
    """Our own SmolLM2 forward and tokenizer: (model, tokenizer) from course_lib.model.load_smollm2."""
    import torch

    from course_lib.model import load_smollm2

    return load_smollm2(dtype=torch.float32, device="cpu")
