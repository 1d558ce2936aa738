"""SmolLM2 (Llama architecture): finding the model file and running our own forward pass."""

from course_lib.gguf_file import ModelFileMissing, gguf_path, read_tokenizer_metadata

__all__ = ["ModelFileMissing", "gguf_path", "read_tokenizer_metadata"]
