"""Reference implementations and course infrastructure for the LLM inference systems workbook.

One module per concept (see shared/DESIGN.md):

- ``tokenizer`` (byte-level BPE), ``corpus`` (real text available offline)
- ``gguf_file`` (finding and reading the SmolLM2 GGUF file), ``model`` (our own Llama forward)
- ``attention`` (naive, tiled online-softmax, SDPA), ``kv_cache`` (contiguous per-request cache)
- ``paged`` (block allocator, prefix caching, paged KV storage), ``kernels.paged_attention`` (Triton)
- ``sampling``, ``scheduler`` (continuous batching), ``model_runner`` (one flat batch over the
  paged cache), ``detokenizer`` (streaming text), ``engine`` (``LLMEngine``), ``metrics``
- ``server`` (the OpenAI-compatible HTTP server, admission, routing, disaggregation), ``wire``
  (latency from a streamed answer), ``loadtest`` (open-loop load), ``kv_transfer`` (shipping KV)
- ``quantization`` (int8/int4 weight-only, GGUF blocks, int8 KV), ``speculative`` (the verifier,
  drafts, speculation in the engine)
- ``viz`` (figures for the book and the labs)

and the course machinery: ``checks`` (what notebook test cells call), ``grading`` (release,
autograde, feedback, reports) and ``cli`` with ``commands`` (the ``course`` command).
"""

__version__ = "0.1.0"
