"""Shared fixtures. Heavy objects (our model, the transformers reference) load once per test process."""

from __future__ import annotations

import os
import warnings

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


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
