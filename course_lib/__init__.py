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

the teaching aids: ``checks`` (what notebook test cells call), ``viz``, ``sim``, ``claims`` and
``chapters``; and the student's half of the platform: ``handin`` (``course check``, ``course
submit``), ``runner`` (a notebook's cells in a fresh kernel, and the channel the checks use) and
``cli`` with ``commands`` (the kit's ``course``). Imports point down that list only, and nothing
here imports the instructor's platform, the package ``autograde`` (docs/architecture.md).
"""

__version__ = "0.1.0"
