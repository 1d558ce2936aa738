"""Figures for the book and the labs: each function computes a small model or simulation and draws it.

Every function here returns a ``matplotlib.figure.Figure`` and needs neither the model nor a GPU:
the numbers come from closed-form formulas (bytes per token, FLOPs per byte) or from tiny
simulations with a fixed seed, so a figure renders in well under two seconds and looks the same
every time. Figures are built on ``Figure`` objects rather than ``pyplot`` so that no global state
leaks between them; in a notebook the returned figure displays itself.

The functions are grouped by topic, in the order of the book's chapters:

- overview: ``request_kv_footprint``
- tokenization: ``bpe_merge_trace``, ``vocabulary_tradeoffs``
- memory: ``training_vs_inference_memory``
- KV cache: ``kv_cache_size_vs_context``, ``recompute_vs_cache_work``
- paging: ``block_table_diagram``, ``contiguous_vs_paged_memory``, ``block_size_tradeoff``
- prefill and decode: ``roofline``, ``decode_step_time``
- attention kernels: ``attention_score_memory``, ``online_softmax_trace``, ``paged_decode_reads``
- GPU kernels: ``gpu_memory_hierarchy``, ``occupancy_waves``, ``coalescing_efficiency``
- batching: ``batching_timeline``
- chunked prefill: ``chunked_prefill_timeline``
- prefix caching: ``prefix_sharing_diagram``, ``prefix_cache_memory``
- metrics: ``request_timeline``, ``latency_percentiles``
- sampling: ``sampling_filters``
- speculative decoding: ``speculative_decoding_gain``
- quantization: ``quantization_tradeoffs``
- serving: ``disaggregation_latency``, ``routing_prefix_hit_rate``

Units follow one convention: memory in binary units (KiB, MiB, GiB = 2**10, 2**20, 2**30 bytes)
unless a label says GB (10**9 bytes, the unit that parameter counts times bytes give naturally).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import ConnectionPatch, Rectangle

KIB = 2**10
MIB = 2**20
GIB = 2**30
GB = 10**9

# Okabe-Ito colours: distinguishable with the common forms of colour blindness.
BLUE = "#0072B2"
ORANGE = "#E69F00"
GREEN = "#009E73"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"
SKY = "#56B4E9"
YELLOW = "#F0E442"
GREY = "#999999"
LIGHT_GREY = "#DDDDDD"
PALETTE = (BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY, YELLOW, GREY)


def _new_figure(nrows: int = 1, ncols: int = 1, *, width: float = 7.5, height: float = 3.4):
    """A constrained-layout figure and its axes (a single Axes, or an array when nrows*ncols > 1)."""
    fig = Figure(figsize=(width, height), layout="constrained", dpi=100)
    axes = fig.subplots(nrows, ncols, squeeze=True)
    for ax in np.atleast_1d(axes).ravel():
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, axes


def _check_positive(name: str, value, *, allow_zero: bool = False) -> None:
    low_ok = value >= 0 if allow_zero else value > 0
    if not low_ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value!r}")


def _check_int_at_least(name: str, value, minimum: int) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


# ---------------------------------------------------------------------------------------------
# Overview: one request through the engine
# ---------------------------------------------------------------------------------------------


def request_kv_footprint(prompt_tokens: int = 50, output_tokens: int = 100, block_size: int = 16) -> Figure:
    """One request's KV cache, step by step: tokens stored and blocks held, from prefill to finish.

    Step 1 is the prefill (every prompt token enters the cache at once and the first output token is
    sampled); each later step is one decode that stores the previous output token. A new block is
    taken whenever the tokens stored cross a multiple of ``block_size``; all blocks are freed at
    the end.
    """
    _check_int_at_least("prompt_tokens", prompt_tokens, 1)
    _check_int_at_least("output_tokens", output_tokens, 1)
    _check_int_at_least("block_size", block_size, 1)
    # After step s the cache holds the prompt plus the s - 1 output tokens fed back so far.
    steps = np.arange(0, output_tokens + 2)
    stored = np.where(steps == 0, 0, prompt_tokens + np.maximum(steps - 1, 0))
    stored[-1] = 0  # finished: the request's blocks go back to the free list
    blocks = np.ceil(stored / block_size).astype(int)
    fig, ax = _new_figure(width=7.5, height=3.4)
    ax.step(steps, blocks * block_size, where="post", color=ORANGE, label=f"slots in blocks held (blocks of {block_size})")
    ax.step(steps, stored, where="post", color=BLUE, label="tokens in the KV cache")
    ax.annotate(f"prefill: {prompt_tokens} tokens, {math.ceil(prompt_tokens / block_size)} blocks", (1, prompt_tokens),
                xytext=(8, prompt_tokens * 0.35), fontsize=8, arrowprops={"arrowstyle": "->"})
    ax.annotate("finished: blocks freed", (output_tokens + 1, 0), xytext=(output_tokens * 0.55, prompt_tokens * 0.35),
                fontsize=8, arrowprops={"arrowstyle": "->"})
    ax.set_xlabel("engine step (1 = prefill, then one decode step per output token)")
    ax.set_ylabel("KV-cache slots (tokens)")
    ax.set_title(f"One request: {prompt_tokens}-token prompt, {output_tokens} output tokens")
    ax.legend(fontsize=8, loc="upper left")
    return fig


# ---------------------------------------------------------------------------------------------
# Tokenization
# ---------------------------------------------------------------------------------------------


def _toy_bpe_trace(text: str, num_merges: int) -> list[tuple[tuple[int, int] | None, list[int]]]:
    """Byte-level BPE on one string, recording the sequence after each merge.

    Returns ``[(pair, ids), ...]``: first ``(None, byte ids)``, then one entry per merge with the
    merged pair and the ids after replacing it. The most frequent adjacent pair wins; ties go to
    the smallest pair, comparing (left, right) as tuples (Lab 0.1's rule). New ids are 256, 257, ...
    """
    # The course's own BPE (Lab 0.1's references), never a copy of it: in a student kit with Lab 0.1
    # locked these raise, and the book, which draws this figure, is built from the instructor's edition.
    from course_lib.tokenizer import best_pair, get_pair_counts, merge_pair

    ids = list(text.encode("utf-8"))
    trace: list[tuple[tuple[int, int] | None, list[int]]] = [(None, ids)]
    for new_id in range(256, 256 + num_merges):
        counts = get_pair_counts(ids)
        if not counts or max(counts.values()) < 2:
            break
        best = best_pair(counts)
        ids = merge_pair(ids, best, new_id)
        trace.append((best, ids))
    return trace


def bpe_merge_trace(text: str = "aaabdaaabac", num_merges: int = 3) -> Figure:
    """Draw the token sequence of ``text`` after each byte-level BPE merge, one row per merge.

    Each box is one token, labelled with the characters it stands for and its id; the row title
    names the pair that was merged and the id it received.
    """
    if not isinstance(text, str) or len(text) < 2:
        raise ValueError("text must be a string of at least 2 characters")
    _check_int_at_least("num_merges", num_merges, 1)
    trace = _toy_bpe_trace(text, num_merges)
    spelled: dict[int, bytes] = {byte: bytes([byte]) for byte in range(256)}
    fig, ax = _new_figure(width=7.5, height=0.75 * len(trace) + 1.2)
    ax.grid(False)
    for row, (pair, ids) in enumerate(trace):
        if pair is not None:
            spelled[256 + row - 1] = spelled[pair[0]] + spelled[pair[1]]
        y = -row
        x = 0.0
        for token_id in ids:
            width = len(spelled[token_id])
            colour = LIGHT_GREY if token_id < 256 else PALETTE[(token_id - 256) % len(PALETTE)]
            ax.add_patch(Rectangle((x, y - 0.35), width - 0.08, 0.7, facecolor=colour, edgecolor="black", lw=0.6))
            label = spelled[token_id].decode("utf-8", errors="replace")
            ax.text(x + (width - 0.08) / 2, y + 0.06, label, ha="center", va="center", fontsize=10, family="monospace")
            ax.text(x + (width - 0.08) / 2, y - 0.2, str(token_id), ha="center", va="center", fontsize=7)
            x += width
        if pair is None:
            note = f"bytes: {len(ids)} tokens"
        else:
            left = spelled[pair[0]].decode("utf-8", errors="replace")
            right = spelled[pair[1]].decode("utf-8", errors="replace")
            note = f"merge {row}: ({pair[0]}, {pair[1]}) '{left}'+'{right}' -> {255 + row}: {len(ids)} tokens"
        ax.text(len(text) + 0.4, y, note, va="center", fontsize=9)
    ax.set_xlim(-0.2, len(text) + 12)
    ax.set_xticks(range(0, len(text) + 1))
    ax.set_ylim(-len(trace) + 0.4, 0.6)
    ax.set_yticks([-row for row in range(len(trace))], [f"after {row}" for row in range(len(trace))])
    ax.set_xlabel("position in the text (characters covered by each token)")
    ax.set_ylabel("merges applied")
    ax.set_title(f'Byte-level BPE on "{text}"')
    return fig


def vocabulary_tradeoffs(
    d_model: int = 4096,
    bytes_per_element: int = 2,
    kv_budget_tokens: int = 3200,
    request_lengths: Sequence[int] = (100, 180),
) -> Figure:
    """Two costs of tokenization: embedding-table size against vocabulary size, and requests per batch.

    Left: ``vocab * d_model * bytes_per_element`` in MiB for a range of vocabularies (a second line
    shows SmolLM2's d_model of 576). Right: how many requests fit in a KV budget of
    ``kv_budget_tokens`` tokens when each request costs a given number of tokens (the same text
    costs more tokens in a language the tokenizer covers poorly).
    """
    _check_int_at_least("d_model", d_model, 1)
    _check_int_at_least("bytes_per_element", bytes_per_element, 1)
    _check_int_at_least("kv_budget_tokens", kv_budget_tokens, 1)
    if any(length <= 0 or length > kv_budget_tokens for length in request_lengths):
        raise ValueError(f"request_lengths must lie in 1..{kv_budget_tokens}, got {list(request_lengths)}")
    fig, (left, right) = _new_figure(1, 2, width=9.0, height=3.4)

    vocab = np.linspace(1_000, 260_000, 200)
    for dim, colour in ((d_model, BLUE), (576, ORANGE)):
        left.plot(vocab / 1000, vocab * dim * bytes_per_element / MIB, color=colour, label=f"d_model = {dim}")
    marked = 50_000 * d_model * bytes_per_element / MIB
    left.plot([50], [marked], "o", color=VERMILLION)
    left.annotate(f"50,000 x {d_model:,} x {bytes_per_element} B\n= {marked:,.0f} MiB", (50, marked),
                  xytext=(80, marked * 0.35), arrowprops={"arrowstyle": "->"}, fontsize=8)
    left.set_xlabel("vocabulary size (thousands of tokens)")
    left.set_ylabel("embedding table (MiB)")
    left.set_title("Bigger vocabulary, bigger table")
    left.legend(fontsize=8)

    tokens_per_request = np.arange(20, 401)
    right.plot(tokens_per_request, kv_budget_tokens // tokens_per_request, color=BLUE, drawstyle="steps-post")
    for length in request_lengths:
        fits = kv_budget_tokens // length
        right.plot([length], [fits], "o", color=VERMILLION)
        right.annotate(f"{length} tokens: {fits} requests", (length, fits), xytext=(length + 25, fits + 12),
                       arrowprops={"arrowstyle": "->"}, fontsize=8)
    right.set_xlabel("tokens per request")
    right.set_ylabel("requests in the batch")
    right.set_title(f"Same memory ({kv_budget_tokens:,} tokens of KV cache)")
    return fig


# ---------------------------------------------------------------------------------------------
# Memory of training versus inference
# ---------------------------------------------------------------------------------------------


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_element: int) -> int:
    """KV-cache bytes for one token: 2 (K and V) * layers * kv_heads * head_dim * bytes per element."""
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                        ("bytes_per_element", bytes_per_element)):
        _check_int_at_least(name, value, 1)
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_element


def training_vs_inference_memory(num_params: float = 13e9, kv_cache_tokens: int = 8 * 2048) -> Figure:
    """Stacked bars: what training keeps per weight against what inference keeps, for one model size.

    Training (mixed precision with Adam, ``course_lib.memory.TRAINING_PRECISIONS["fp16"]``): fp16
    weights and gradients (2 B each), an fp32 master copy of the weights and Adam's two fp32 moments
    (4 B each), 16 B per parameter; activations come on top and depend on batch and sequence length. Inference:
    weights at fp16 or int4 plus a KV cache of ``kv_cache_tokens`` tokens with Llama-2-13B's shape
    (40 layers, 40 KV heads, head_dim 128, fp16).
    """
    _check_positive("num_params", num_params)
    _check_int_at_least("kv_cache_tokens", kv_cache_tokens, 0)
    kv_gb = kv_cache_tokens * 2 * 40 * 40 * 128 * 2 / GB   # K and V x layers x KV heads x head_dim x fp16 bytes
    bars = {
        "training\n(fp16 + Adam)": [("weights (fp16)", 2), ("gradients (fp16)", 2), ("master weights (fp32)", 4),
                                    ("Adam 1st moment (fp32)", 4), ("Adam 2nd moment (fp32)", 4)],
        "inference\nfp16": [("weights (fp16)", 2)],
        "inference\nint4": [("weights (int4)", 0.5)],
    }
    colours = {"weights (fp16)": BLUE, "weights (int4)": SKY, "gradients (fp16)": ORANGE, "master weights (fp32)": GREY,
               "Adam 1st moment (fp32)": VERMILLION, "Adam 2nd moment (fp32)": PURPLE, "KV cache": GREEN}
    fig, ax = _new_figure(width=7.5, height=3.8)
    seen: set[str] = set()
    for x, (name, parts) in enumerate(bars.items()):
        bottom = 0.0
        if name.startswith("inference"):
            parts = parts + [("KV cache", None)]
        for part, bytes_per_param in parts:
            size = kv_gb if bytes_per_param is None else num_params * bytes_per_param / GB
            ax.bar(x, size, bottom=bottom, color=colours[part], edgecolor="white",
                   label=None if part in seen else part)
            seen.add(part)
            if size > 4:
                ax.text(x, bottom + size / 2, f"{size:.1f}", ha="center", va="center", fontsize=8, color="white")
            bottom += size
        total = f"{bottom:.0f} GB + activations" if name.startswith("training") else f"{bottom:.0f} GB"
        ax.text(x, bottom + 2, total, ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(bars)), list(bars))
    ax.set_ylabel("memory (GB)")
    ax.set_xlabel("what the GPU must hold")
    ax.set_title(f"A {num_params / 1e9:.0f}B-parameter model (KV cache: {kv_cache_tokens:,} tokens)")
    ax.legend(fontsize=8, loc="upper right")
    return fig


# ---------------------------------------------------------------------------------------------
# The KV cache
# ---------------------------------------------------------------------------------------------


def kv_cache_size_vs_context(
    num_layers: int = 32,
    num_kv_heads: int = 8,
    head_dim: int = 128,
    bytes_per_element: int = 2,
    batch_sizes: Sequence[int] = (1, 8, 64),
    max_tokens: int = 8192,
) -> Figure:
    """KV-cache size (GiB, log scale) against tokens per sequence for a few batch sizes.

    Defaults are Llama-3-8B's shape in fp16: 128 KiB per token, so one 2,048-token sequence holds
    0.25 GiB and a batch of 64 of them 16 GiB.
    """
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                        ("bytes_per_element", bytes_per_element)):
        _check_int_at_least(name, value, 1)
    # Written out (kv_bytes_per_token is a Lab 0.1 answer, a stub in the kit until the lab unlocks).
    per_token = 2 * num_layers * num_kv_heads * head_dim * bytes_per_element
    _check_int_at_least("max_tokens", max_tokens, 16)
    fig, ax = _new_figure(width=7.5, height=3.6)
    tokens = np.linspace(16, max_tokens, 300)
    for colour, batch in zip(PALETTE, batch_sizes):
        _check_int_at_least("batch size", batch, 1)
        ax.plot(tokens, batch * tokens * per_token / GIB, color=colour, label=f"batch {batch}")
        at_2048 = batch * 2048 * per_token / GIB
        if 2048 <= max_tokens:
            ax.plot([2048], [at_2048], "o", color=colour)
            ax.annotate(f"{at_2048:g} GiB", (2048, at_2048), xytext=(6, -12), textcoords="offset points", fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per sequence (prompt + generated)")
    ax.set_ylabel("KV cache (GiB, log scale)")
    ax.set_title(f"{per_token // KIB} KiB per token = 2 x {num_layers} layers x {num_kv_heads} KV heads"
                 f" x {head_dim} x {bytes_per_element} B")
    ax.legend(fontsize=8)
    return fig


def recompute_vs_cache_work(num_tokens: int = 100) -> Figure:
    """Token positions pushed through the model to generate ``num_tokens`` tokens, with and without a cache.

    Without a cache, step t recomputes all t positions: the total is T(T+1)/2. With a cache each
    step processes only the new token: the total is T.
    """
    _check_int_at_least("num_tokens", num_tokens, 2)
    steps = np.arange(1, num_tokens + 1)
    without = np.cumsum(steps)
    with_cache = steps
    fig, ax = _new_figure(width=7.5, height=3.4)
    ax.plot(steps, without, color=VERMILLION, label="no cache: step t recomputes t positions")
    ax.plot(steps, with_cache, color=BLUE, label="KV cache: one new position per step")
    ratio = without[-1] / with_cache[-1]
    ax.annotate(f"{without[-1]:,} vs {with_cache[-1]:,}: {ratio:.1f}x", (num_tokens, without[-1]),
                xytext=(-150, -10), textcoords="offset points", fontsize=9, arrowprops={"arrowstyle": "->"})
    ax.set_xlabel("tokens generated so far (T)")
    ax.set_ylabel("positions computed in total")
    ax.set_title("Quadratic without a cache, linear with one")
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# Paging the KV cache
# ---------------------------------------------------------------------------------------------


def block_table_diagram(
    num_tokens: int = 50,
    block_size: int = 16,
    physical_blocks: Sequence[int] = (7, 2, 9, 4),
    num_physical_blocks: int = 12,
) -> Figure:
    """One request's logical blocks (top) mapped through its block table to physical blocks (bottom).

    Filled slots hold a token's K and V; the last block's empty slots are the only waste. Physical
    blocks that belong to other requests are drawn grey.
    """
    _check_int_at_least("num_tokens", num_tokens, 1)
    _check_int_at_least("block_size", block_size, 1)
    needed = math.ceil(num_tokens / block_size)
    if len(physical_blocks) != needed:
        raise ValueError(f"physical_blocks must list {needed} blocks for {num_tokens} tokens, got {len(physical_blocks)}")
    if len(set(physical_blocks)) != needed or not all(0 <= b < num_physical_blocks for b in physical_blocks):
        raise ValueError(f"physical_blocks must be distinct ids in 0..{num_physical_blocks - 1}")
    fig, (top, bottom) = _new_figure(2, 1, width=8.0, height=4.4)
    for ax in (top, bottom):
        ax.grid(False)

    for block in range(needed):
        for offset in range(block_size):
            position = block * block_size + offset
            filled = position < num_tokens
            top.add_patch(Rectangle((position, 0), 1, 1, facecolor=PALETTE[block] if filled else "white",
                                    edgecolor="black", lw=0.3))
        top.text(block * block_size + block_size / 2, 1.25, f"logical block {block}", ha="center", fontsize=8)
    idle = needed * block_size - num_tokens
    top.set_xlim(0, needed * block_size)
    top.set_ylim(0, 1.7)
    top.set_yticks([])
    top.set_xlabel("token position in the request (each cell is one KV slot)")
    top.set_ylabel("request")
    top.set_title(f"{num_tokens} tokens in blocks of {block_size}: {needed} blocks, {idle} slots idle")

    owner = {physical: logical for logical, physical in enumerate(physical_blocks)}
    for physical in range(num_physical_blocks):
        logical = owner.get(physical)
        colour = PALETTE[logical] if logical is not None else LIGHT_GREY
        bottom.add_patch(Rectangle((physical + 0.05, 0), 0.9, 1, facecolor=colour, edgecolor="black", lw=0.5))
        label = f"L{logical}" if logical is not None else "other"
        bottom.text(physical + 0.5, 0.5, label, ha="center", va="center", fontsize=7)
    bottom.set_xlim(0, num_physical_blocks)
    bottom.set_ylim(0, 1.7)
    bottom.set_yticks([])
    bottom.set_xticks(np.arange(num_physical_blocks) + 0.5, [str(b) for b in range(num_physical_blocks)])
    bottom.set_xlabel("physical block id in the GPU's KV pool")
    bottom.set_ylabel("pool")
    table = ", ".join(str(b) for b in physical_blocks)
    bottom.set_title(f"block table = [{table}]", fontsize=10)
    for logical, physical in enumerate(physical_blocks):
        arrow = ConnectionPatch(xyA=(logical * block_size + block_size / 2, 0), coordsA=top.transData,
                                xyB=(physical + 0.5, 1), coordsB=bottom.transData, arrowstyle="->", color=GREY)
        fig.add_artist(arrow)
    return fig


def contiguous_vs_paged_memory(
    num_requests: int = 40,
    max_tokens: int = 1024,
    block_size: int = 16,
    seed: int = 0,
) -> Figure:
    """Simulated share of reserved KV memory that really holds tokens: contiguous slabs vs paging.

    Each request has a prompt of 20-400 tokens and an output whose length is drawn from a geometric
    distribution (mean 150, capped at ``max_tokens``). A contiguous allocator must reserve prompt +
    ``max_tokens`` slots up front; a paged one holds ceil(tokens / block_size) blocks.
    """
    _check_int_at_least("num_requests", num_requests, 1)
    _check_int_at_least("max_tokens", max_tokens, 1)
    _check_int_at_least("block_size", block_size, 1)
    rng = np.random.default_rng(seed)
    prompt = rng.integers(20, 401, size=num_requests)
    output = np.minimum(rng.geometric(1 / 150, size=num_requests), max_tokens)
    used = int((prompt + output).sum())
    reserved_contiguous = int((prompt + max_tokens).sum())
    reserved_paged = int((np.ceil((prompt + output) / block_size) * block_size).sum())

    fig, ax = _new_figure(width=7.5, height=3.4)
    names = ["contiguous\n(reserve prompt + max_tokens)", f"paged\n(blocks of {block_size})"]
    for x, reserved in enumerate((reserved_contiguous, reserved_paged)):
        ax.barh(x, used / reserved * 100, color=GREEN, label="holds a token" if x == 0 else None)
        ax.barh(x, 100 - used / reserved * 100, left=used / reserved * 100, color=LIGHT_GREY,
                label="reserved, never written" if x == 0 else None)
        ax.text(1.5, x, f"{used / reserved:.0%} in use", va="center", fontsize=9, color="white")
    ax.set_yticks([0, 1], names)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of reserved KV memory (%)")
    ax.set_ylabel("allocator")
    ax.set_title(f"{num_requests} requests, mean output 150 tokens, max_tokens {max_tokens:,}", fontsize=10)
    ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, 0.62))
    return fig


def block_size_tradeoff(max_seq_len: int = 2048, block_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256)) -> Figure:
    """Smaller blocks waste fewer slots but need longer block tables.

    Left: idle slots per sequence, averaged over lengths 1..``max_seq_len`` (about block_size / 2).
    Right: block-table entries for one ``max_seq_len``-token sequence.
    """
    _check_int_at_least("max_seq_len", max_seq_len, 1)
    sizes = np.array(block_sizes)
    if (sizes < 1).any():
        raise ValueError("block_sizes must be >= 1")
    lengths = np.arange(1, max_seq_len + 1)
    idle = [float(np.mean(np.ceil(lengths / size) * size - lengths)) for size in sizes]
    entries = np.ceil(max_seq_len / sizes)
    fig, (left, right) = _new_figure(1, 2, width=9.0, height=3.3)
    left.plot(sizes, idle, "o-", color=VERMILLION)
    right.plot(sizes, entries, "o-", color=BLUE)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_xlabel("block size (tokens per block)")
        ax.axvline(16, color=GREY, linestyle="--", linewidth=0.8)
    left.set_ylabel("idle KV slots per sequence (tokens)")
    left.set_title("Waste: half a block on average")
    right.set_yscale("log")
    right.set_ylabel(f"table entries for {max_seq_len:,} tokens")
    right.set_title("Bookkeeping: one entry per block")
    return fig


# ---------------------------------------------------------------------------------------------
# Prefill versus decode
# ---------------------------------------------------------------------------------------------


def linear_layer_intensity(num_tokens, d_in: int = 4096, d_out: int = 4096, bytes_per_element: int = 2):
    """FLOPs per byte of one linear layer over ``num_tokens`` tokens (scalar or array).

    FLOPs = 2 * tokens * d_in * d_out; bytes = (weights + inputs + outputs) * bytes_per_element.
    """
    tokens = np.asarray(num_tokens, dtype=float)
    if (tokens < 1).any():
        raise ValueError("num_tokens must be >= 1")
    flops = 2 * tokens * d_in * d_out
    moved = (d_in * d_out + tokens * d_in + tokens * d_out) * bytes_per_element
    return flops / moved


def roofline(peak_tflops: float = 312.0, bandwidth_tb_s: float = 2.0) -> Figure:
    """The roofline of one accelerator (A100 by default) with decode and prefill placed on it.

    Attainable FLOP/s = min(peak, intensity * bandwidth). The points are one 4096 x 4096 fp16
    linear layer run over 1 token (decode, batch 1), 32 and 256 tokens (decode batches) and a
    1,024-token prompt (prefill).
    """
    _check_positive("peak_tflops", peak_tflops)
    _check_positive("bandwidth_tb_s", bandwidth_tb_s)
    ridge = peak_tflops / bandwidth_tb_s  # TFLOP/s over TB/s = FLOP per byte
    intensity = np.logspace(-1, 4, 300)
    attainable = np.minimum(peak_tflops, intensity * bandwidth_tb_s)
    fig, ax = _new_figure(width=7.5, height=3.8)
    ax.loglog(intensity, attainable, color="black")
    ax.axvline(ridge, color=GREY, linestyle="--", linewidth=0.8)
    ax.text(ridge * 0.9, peak_tflops * 1.3, f"ridge {ridge:.0f} FLOP/B", fontsize=8, color=GREY, ha="right")
    ax.fill_between(intensity, 0.05, attainable, where=intensity < ridge, color=SKY, alpha=0.15)
    ax.text(0.15, peak_tflops * 0.5, "memory-bound", fontsize=9, color=BLUE)
    ax.text(ridge * 2, peak_tflops * 1.3, "compute-bound", fontsize=9, color=VERMILLION)
    points = [("decode, batch 1", 1, BLUE), ("decode, batch 32", 32, GREEN), ("decode, batch 256", 256, ORANGE),
              ("prefill, 1,024 tokens", 1024, VERMILLION)]
    for label, tokens, colour in points:
        x = float(linear_layer_intensity(tokens))
        y = min(peak_tflops, x * bandwidth_tb_s)
        ax.plot([x], [y], "o", color=colour, label=f"{label}: {x:.0f} FLOP/B")
    ax.set_ylim(0.1, peak_tflops * 3)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("attainable throughput (TFLOP/s)")
    ax.set_title(f"Roofline: {peak_tflops:g} TFLOP/s peak, {bandwidth_tb_s:g} TB/s memory")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def decode_step_time(
    num_params: float = 8e9,
    kv_bytes_token: int = 128 * KIB,
    peak_tflops: float = 312.0,
    bandwidth_tb_s: float = 2.0,
    context_tokens: int = 1024,
) -> Figure:
    """A roofline model of one decode step: time = max(FLOPs / peak, bytes / bandwidth).

    Each step reads every fp16 weight once and every sequence's KV cache; it does 2 FLOPs per weight
    per sequence. Left: step time and tokens/s against batch size at ``context_tokens`` tokens of
    context. Right: step time of batch 1 as the context grows.
    """
    _check_positive("num_params", num_params)
    _check_int_at_least("context_tokens", context_tokens, 1)
    weight_bytes = 2 * num_params

    bandwidth = bandwidth_tb_s * 1e12

    def step_seconds(batch, context):
        weights = np.broadcast_to(weight_bytes / bandwidth, np.shape(batch))
        caches = batch * context * kv_bytes_token / bandwidth
        compute = 2 * num_params * batch / (peak_tflops * 1e12)
        return np.maximum(weights + caches, compute), weights, caches, compute

    fig, (left, right) = _new_figure(1, 2, width=9.5, height=3.5)
    batch = np.arange(1, 513)
    total, weights, caches, compute = step_seconds(batch, context_tokens)
    left.plot(batch, total * 1e3, color="black", label="step time")
    left.plot(batch, weights * 1e3, color=BLUE, linestyle="--", label="read weights (shared)")
    left.plot(batch, caches * 1e3, color=PURPLE, linestyle="-.", label="read KV caches (per sequence)")
    left.plot(batch, compute * 1e3, color=VERMILLION, linestyle=":", label="compute")
    left.set_xlabel("batch size (sequences decoding together)")
    left.set_ylabel("time per decode step (ms)")
    left.set_title(f"Context {context_tokens:,} tokens")
    twin = left.twinx()
    twin.plot(batch, batch / total, color=GREEN, label="tokens/s")
    twin.set_ylabel("output tokens/s", color=GREEN)
    twin.spines[["top"]].set_visible(False)
    left.legend(fontsize=7, loc="upper left")

    context = np.arange(1, 32_769)
    total_context = step_seconds(1, context)[0]
    right.plot(context / 1024, total_context * 1e3, color=BLUE)
    right.set_ylim(0, total_context.max() * 1e3 * 1.1)
    right.set_xlabel("context length (thousands of tokens)")
    right.set_ylabel("time per decode step (ms)")
    right.set_title("Batch 1: the cache adds a little per token")
    return fig


# ---------------------------------------------------------------------------------------------
# Attention kernels
# ---------------------------------------------------------------------------------------------


def attention_score_memory(num_heads: int = 32, bytes_per_score: int = 4, block_q: int = 64, block_k: int = 64) -> Figure:
    """Memory for attention's intermediates in one layer: the naive S x S score matrix vs a tiled kernel.

    Naive attention writes scores and probabilities for every (query, key) pair of every head.
    A tiled kernel keeps one block_q x block_k tile on chip and writes only two numbers per query
    row (the running max and sum) to memory.
    """
    _check_int_at_least("num_heads", num_heads, 1)
    seq = np.logspace(np.log10(128), np.log10(131072), 100)
    naive = num_heads * seq**2 * bytes_per_score / MIB
    tiled = num_heads * seq * 2 * bytes_per_score / MIB
    tile = block_q * block_k * bytes_per_score / KIB
    fig, ax = _new_figure(width=7.5, height=3.6)
    ax.loglog(seq, naive, color=VERMILLION, label="naive: S x S scores in GPU memory")
    ax.loglog(seq, tiled, color=BLUE, label="tiled (FlashAttention): max and sum per row")
    at = 8192
    ax.plot([at], [num_heads * at**2 * bytes_per_score / MIB], "o", color=VERMILLION)
    ax.annotate(f"S = {at:,}: {num_heads * at**2 * bytes_per_score / GIB:.0f} GiB", (at, num_heads * at**2 * bytes_per_score / MIB),
                xytext=(-130, 5), textcoords="offset points", fontsize=8)
    ax.set_xlabel("sequence length S (tokens)")
    ax.set_ylabel("intermediate memory per layer (MiB)")
    ax.set_title(f"{num_heads} heads, fp32 scores; one {block_q}x{block_k} tile is {tile:.0f} KiB on chip")
    ax.legend(fontsize=8)
    return fig


def online_softmax_trace(scores: Sequence[float] | None = None, block_size: int = 4) -> Figure:
    """The online softmax over key blocks: running max m and running sum l after each block.

    After block j: m_j = max(m_{j-1}, max of block), l_j = l_{j-1} * exp(m_{j-1} - m_j) + sum(exp(block - m_j)).
    The dashed lines are the exact max and sum of exp(scores - max) computed in one pass over all
    scores; the last block lands on them.
    """
    if scores is None:
        scores = [0.3, 1.1, -0.4, 0.8, 2.4, 0.1, 1.9, -1.0, 0.5, 3.1, 0.2, 1.4]
    values = np.asarray(scores, dtype=float)
    if values.ndim != 1 or values.size < 2:
        raise ValueError("scores must be a 1-D sequence of at least 2 numbers")
    _check_int_at_least("block_size", block_size, 1)
    blocks = [values[i:i + block_size] for i in range(0, values.size, block_size)]
    running_max, running_sum = -np.inf, 0.0
    maxima, sums = [], []
    for block in blocks:
        new_max = max(running_max, float(block.max()))
        running_sum = running_sum * math.exp(running_max - new_max) + float(np.exp(block - new_max).sum())
        running_max = new_max
        maxima.append(running_max)
        sums.append(running_sum)
    exact_max = float(values.max())
    exact_sum = float(np.exp(values - exact_max).sum())

    fig, (left, right) = _new_figure(1, 2, width=9.5, height=3.4)
    colours = [PALETTE[i // block_size % len(PALETTE)] for i in range(values.size)]
    left.bar(np.arange(values.size), values, color=colours)
    left.set_xlabel("key index (colour = key block)")
    left.set_ylabel("score q . k / sqrt(d)")
    left.set_title(f"One query's scores, blocks of {block_size}")

    steps = np.arange(1, len(blocks) + 1)
    right.plot(steps, maxima, "o-", color=VERMILLION, label="running max m")
    right.plot(steps, sums, "s-", color=BLUE, label="running sum l")
    right.axhline(exact_max, color=VERMILLION, linestyle="--", linewidth=0.8)
    right.axhline(exact_sum, color=BLUE, linestyle="--", linewidth=0.8)
    right.set_xticks(steps)
    right.set_xlabel("key blocks processed")
    right.set_ylabel("value (dimensionless)")
    right.set_title("Rescale the sum whenever the max grows")
    right.legend(fontsize=8)
    return fig


def paged_decode_reads(seq_lens: Sequence[int] = (50, 700, 130, 2000, 16, 410), block_size: int = 16) -> Figure:
    """KV slots one decode step reads per sequence: a padded batch vs a paged kernel.

    A padded batch pads every sequence to the longest one; a paged decode kernel walks each
    sequence's block table and reads only its own blocks (the last one partly filled).
    """
    lens = np.asarray(seq_lens)
    if lens.ndim != 1 or lens.size == 0 or (lens < 1).any():
        raise ValueError("seq_lens must be a non-empty sequence of lengths >= 1")
    _check_int_at_least("block_size", block_size, 1)
    padded = np.full_like(lens, lens.max())
    paged = np.ceil(lens / block_size).astype(int) * block_size
    x = np.arange(lens.size)
    fig, ax = _new_figure(width=7.5, height=3.4)
    ax.bar(x - 0.2, padded, width=0.4, color=LIGHT_GREY, edgecolor=GREY, label=f"padded to {lens.max():,}: {padded.sum():,} slots")
    ax.bar(x + 0.2, paged, width=0.4, color=BLUE, label=f"paged, blocks of {block_size}: {paged.sum():,} slots")
    ax.set_xticks(x, [f"seq {i}\n{n:,} tok" for i, n in enumerate(lens)])
    ax.set_xlabel("sequence in the decode batch (its length)")
    ax.set_ylabel("KV slots read per layer (tokens)")
    ax.set_title("One decode step: what each sequence reads")
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# Batching and scheduling
# ---------------------------------------------------------------------------------------------


def _static_schedule(output_lens: Sequence[int], num_slots: int) -> list[tuple[int, int, int, int]]:
    """(request, slot, start step, end step) when batches of ``num_slots`` run until their longest ends."""
    spans, start = [], 0
    for first in range(0, len(output_lens), num_slots):
        batch = list(range(first, min(first + num_slots, len(output_lens))))
        for slot, request in enumerate(batch):
            spans.append((request, slot, start, start + output_lens[request]))
        start += max(output_lens[r] for r in batch)
    return spans


def _continuous_schedule(output_lens: Sequence[int], num_slots: int) -> list[tuple[int, int, int, int]]:
    """(request, slot, start step, end step) when a finished request's slot is refilled at the next step."""
    free_at = [0] * num_slots
    spans = []
    for request, length in enumerate(output_lens):
        slot = min(range(num_slots), key=lambda s: free_at[s])
        start = free_at[slot]
        spans.append((request, slot, start, start + length))
        free_at[slot] = start + length
    return spans


def batching_timeline(output_lens: Sequence[int] = (3, 9, 4, 2, 7, 5, 3, 6, 8, 2, 4, 3), num_slots: int = 4) -> Figure:
    """Gantt charts of the same requests under static and continuous batching.

    Each request needs ``output_lens[i]`` decode steps (prefill folded into its first step). Static
    batching takes ``num_slots`` requests and holds the batch until the longest ends; continuous
    batching gives a freed slot to the next waiting request at the next step.
    """
    _check_int_at_least("num_slots", num_slots, 1)
    if len(output_lens) == 0 or any(length < 1 for length in output_lens):
        raise ValueError("output_lens must be a non-empty sequence of lengths >= 1")
    schedules = {"static batching": _static_schedule(output_lens, num_slots),
                 "continuous batching": _continuous_schedule(output_lens, num_slots)}
    horizon = max(end for spans in schedules.values() for *_, end in spans)
    fig, axes = _new_figure(2, 1, width=8.5, height=4.6)
    busy = sum(output_lens)
    for ax, (name, spans) in zip(axes, schedules.items()):
        ax.grid(False)
        finish = max(end for *_, end in spans)
        ax.add_patch(Rectangle((0, -0.5), finish, num_slots, facecolor="white", hatch="///", edgecolor=LIGHT_GREY))
        for request, slot, start, end in spans:
            ax.add_patch(Rectangle((start, slot - 0.4), end - start, 0.8, facecolor=PALETTE[request % len(PALETTE)],
                                   edgecolor="black", lw=0.5))
            ax.text((start + end) / 2, slot, f"R{request}", ha="center", va="center", fontsize=7)
        ax.set_xlim(0, horizon + 0.5)
        ax.set_ylim(-0.6, num_slots - 0.4)
        ax.set_yticks(range(num_slots), [f"slot {s}" for s in range(num_slots)])
        ax.set_ylabel("batch slot")
        ax.set_xlabel("engine step (one token per running request)")
        ax.set_title(f"{name}: done after {finish} steps, slots busy {busy / (finish * num_slots):.0%}"
                     " (hatched = idle)", fontsize=10)
    return fig


# ---------------------------------------------------------------------------------------------
# Chunked prefill
# ---------------------------------------------------------------------------------------------


def _step_time_ms(num_tokens: int, fixed_ms: float, per_token_ms: float) -> float:
    return fixed_ms + per_token_ms * num_tokens


def chunked_prefill_timeline(
    prompt_tokens: int = 2000,
    num_decoding: int = 8,
    token_budget: int = 512,
    fixed_ms: float = 6.0,
    per_token_ms: float = 0.04,
    num_steps: int = 14,
) -> Figure:
    """Inter-token gaps of the running decodes when a long prompt arrives, with and without chunking.

    Step time = ``fixed_ms`` + ``per_token_ms`` * tokens in the step (a simple linear model). At step 3
    a ``prompt_tokens`` prompt arrives. Without chunking it is prefilled in one step; with chunking
    each step holds the ``num_decoding`` decode tokens first and fills the rest of ``token_budget``
    with prompt tokens (decode-maximal batching).
    """
    _check_int_at_least("prompt_tokens", prompt_tokens, 1)
    _check_int_at_least("num_decoding", num_decoding, 0)
    if token_budget <= num_decoding:
        raise ValueError(f"token_budget must exceed num_decoding ({num_decoding}), got {token_budget}")
    arrival_step = 3
    fig, (left, right) = _new_figure(1, 2, width=9.5, height=3.6)
    for policy, colour in (("one-shot prefill", VERMILLION), ("chunked prefill", BLUE)):
        remaining, clock, times, gaps, first_token_ms = prompt_tokens, 0.0, [], [], None
        prefill_in_step = []
        for step in range(num_steps):
            if step < arrival_step or remaining == 0:
                chunk = 0
            elif policy == "one-shot prefill":
                chunk = remaining
            else:
                chunk = min(remaining, token_budget - num_decoding)
            remaining -= chunk
            duration = _step_time_ms(num_decoding + chunk, fixed_ms, per_token_ms)
            clock += duration
            times.append(clock)
            gaps.append(duration)
            prefill_in_step.append(chunk)
            if chunk and remaining == 0:
                first_token_ms = clock - sum(gaps[:arrival_step])
        left.step(np.arange(num_steps), gaps, where="mid", color=colour, label=f"{policy}")
        offset = -0.2 if policy == "one-shot prefill" else 0.2
        right.bar(np.arange(num_steps) + offset, prefill_in_step, width=0.4, color=colour,
                  label=f"{policy}: first token after {first_token_ms:.0f} ms")
    right.axhline(token_budget - num_decoding, color=GREY, linestyle="--", linewidth=0.8)
    left.set_xlabel("engine step")
    left.set_ylabel("gap between a decode's tokens (ms)")
    left.set_title(f"{num_decoding} decoding; {prompt_tokens:,}-token prompt at step {arrival_step}", fontsize=10)
    left.legend(fontsize=8)
    right.set_xlabel("engine step")
    right.set_ylabel("prompt tokens prefilled in the step")
    right.set_title(f"Token budget {token_budget} per step", fontsize=10)
    right.legend(fontsize=7)
    return fig


# ---------------------------------------------------------------------------------------------
# Prefix caching
# ---------------------------------------------------------------------------------------------


def prefix_sharing_diagram(shared_blocks: int = 2, own_blocks: Sequence[int] = (2, 1, 3)) -> Figure:
    """Block tables of requests that start with the same system prompt.

    The first ``shared_blocks`` entries of every table point at the same physical blocks, whose
    reference count equals the number of requests; each request's own blocks follow.
    """
    _check_int_at_least("shared_blocks", shared_blocks, 1)
    if len(own_blocks) == 0 or any(n < 0 for n in own_blocks):
        raise ValueError("own_blocks must be a non-empty sequence of counts >= 0")
    own_colours = (ORANGE, VERMILLION, PURPLE, SKY, BLUE)
    fig, ax = _new_figure(width=8.0, height=1.0 + 0.7 * len(own_blocks))
    ax.grid(False)
    next_physical = shared_blocks
    for row, own in enumerate(own_blocks):
        y = len(own_blocks) - 1 - row
        for entry in range(shared_blocks + own):
            shared = entry < shared_blocks
            physical = entry if shared else next_physical
            if not shared:
                next_physical += 1
            colour = GREEN if shared else own_colours[row % len(own_colours)]
            ax.add_patch(Rectangle((entry, y - 0.35), 0.92, 0.7, facecolor=colour, edgecolor="black", lw=0.5))
            ax.text(entry + 0.46, y, str(physical), ha="center", va="center", fontsize=9)
    ax.text(shared_blocks / 2, len(own_blocks) - 0.35, f"system prompt: ref count {len(own_blocks)}",
            ha="center", va="bottom", fontsize=8)
    width = shared_blocks + max(own_blocks)
    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(-0.6, len(own_blocks) - 0.1)
    ax.set_xticks(np.arange(width) + 0.46, [str(i) for i in range(width)])
    ax.set_yticks(range(len(own_blocks)), [f"request {len(own_blocks) - 1 - y}" for y in range(len(own_blocks))])
    ax.set_xlabel("block-table entry (logical block); box = physical block id")
    ax.set_ylabel("request")
    ax.set_title("Shared prefix blocks (green) are stored once")
    return fig


def prefix_cache_memory(
    shared_tokens: int = 200,
    own_tokens: int = 500,
    mib_per_token: float = 0.5,
    max_users: int = 400,
    marked_users: int = 300,
) -> Figure:
    """KV memory against the number of users, with and without sharing a common prefix.

    Without sharing every user stores shared + own tokens; with prefix caching the shared tokens
    are stored once.
    """
    _check_int_at_least("shared_tokens", shared_tokens, 0)
    _check_int_at_least("own_tokens", own_tokens, 0)
    _check_positive("mib_per_token", mib_per_token)
    _check_int_at_least("max_users", max_users, 1)
    users = np.arange(1, max_users + 1)
    without = users * (shared_tokens + own_tokens) * mib_per_token * MIB / GIB
    with_sharing = (shared_tokens + users * own_tokens) * mib_per_token * MIB / GIB
    fig, ax = _new_figure(width=7.5, height=3.5)
    ax.plot(users, without, color=VERMILLION, label="every request stores the prefix")
    ax.plot(users, with_sharing, color=GREEN, label="prefix stored once (prefix caching)")
    for series in (without, with_sharing):
        value = series[marked_users - 1]
        ax.plot([marked_users], [value], "o", color="black")
        ax.annotate(f"{value:.1f} GiB", (marked_users, value), xytext=(8, -4), textcoords="offset points", fontsize=8)
    ax.set_xlabel("concurrent users")
    ax.set_ylabel("KV cache (GiB)")
    ax.set_title(f"{shared_tokens} shared + {own_tokens} own tokens each, {mib_per_token} MiB per token")
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# Metrics and SLOs
# ---------------------------------------------------------------------------------------------


def request_timeline(
    queue_ms: float = 40.0,
    prefill_ms: float = 80.0,
    token_gaps_ms: Sequence[float] = (25, 24, 27, 25, 60, 25, 24, 26, 25),
) -> Figure:
    """One request's life on a time axis: queueing, prefill, then one tick per output token.

    TTFT = queue + prefill; TPOT = mean gap between output tokens after the first; end-to-end =
    TTFT + the sum of the gaps.
    """
    _check_positive("queue_ms", queue_ms, allow_zero=True)
    _check_positive("prefill_ms", prefill_ms)
    if len(token_gaps_ms) == 0 or any(g <= 0 for g in token_gaps_ms):
        raise ValueError("token_gaps_ms must be a non-empty sequence of positive gaps")
    ttft = queue_ms + prefill_ms
    token_times = ttft + np.concatenate([[0.0], np.cumsum(token_gaps_ms)])
    e2e = float(token_times[-1])
    tpot = float(np.mean(token_gaps_ms))
    fig, ax = _new_figure(width=8.5, height=3.0)
    ax.grid(False)
    ax.barh(2, queue_ms, left=0, color=LIGHT_GREY, edgecolor="black")
    ax.barh(2, prefill_ms, left=queue_ms, color=ORANGE, edgecolor="black")
    ax.text(queue_ms / 2, 2, "queued", ha="center", va="center", fontsize=8)
    ax.text(queue_ms + prefill_ms / 2, 2, "prefill", ha="center", va="center", fontsize=8)
    ax.vlines(token_times, 0.6, 1.4, color=BLUE)
    ax.plot(token_times, np.ones_like(token_times), "o", color=BLUE, markersize=4)
    for y, (start, end, label) in ((0.2, (0, ttft, f"TTFT {ttft:.0f} ms")),
                                   (-0.4, (0, e2e, f"end-to-end {e2e:.0f} ms"))):
        ax.annotate("", (start, y), (end, y), arrowprops={"arrowstyle": "<->"})
        ax.text((start + end) / 2, y + 0.1, label, ha="center", fontsize=8)
    ax.annotate(f"TPOT = mean gap = {tpot:.1f} ms\n(one slow step: {max(token_gaps_ms):.0f} ms)",
                (token_times[5], 1.45), xytext=(token_times[5] - 20, 2.1), fontsize=8, arrowprops={"arrowstyle": "->"})
    ax.set_yticks([2, 1], ["queue / prefill", "output tokens"])
    ax.set_ylim(-0.8, 2.8)
    ax.set_xlabel("time since the request arrived (ms)")
    ax.set_ylabel("phase")
    ax.set_title(f"One request, {len(token_times)} output tokens")
    return fig


def latency_percentiles(num_requests: int = 2000, median_ms: float = 120.0, sigma: float = 0.6, seed: int = 0) -> Figure:
    """Histogram of simulated TTFTs (log-normal, a long right tail) with the mean, median and p99 marked."""
    _check_int_at_least("num_requests", num_requests, 10)
    _check_positive("median_ms", median_ms)
    _check_positive("sigma", sigma)
    rng = np.random.default_rng(seed)
    samples = rng.lognormal(mean=math.log(median_ms), sigma=sigma, size=num_requests)
    stats = {"median": np.median(samples), "mean": samples.mean(), "p99": np.percentile(samples, 99)}
    fig, ax = _new_figure(width=7.5, height=3.4)
    ax.hist(samples, bins=80, color=SKY, edgecolor="white")
    for (name, value), colour in zip(stats.items(), (GREEN, ORANGE, VERMILLION)):
        ax.axvline(value, color=colour, linewidth=1.5, label=f"{name} = {value:.0f} ms")
    ax.set_xlabel("time to first token (ms)")
    ax.set_ylabel("requests")
    ax.set_title(f"{num_requests:,} simulated requests: the tail pulls the mean up")
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# Sampling controls
# ---------------------------------------------------------------------------------------------

_EXAMPLE_NEXT_TOKENS = ("Paris", "the", "a", "located", "France's", "known", "one", "home", "not", "Lyon")
_EXAMPLE_LOGITS = (6.0, 3.9, 3.5, 3.0, 2.4, 2.2, 1.8, 1.2, 0.8, 0.3)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def sampling_filters(
    temperatures: Sequence[float] = (0.5, 1.0, 1.5),
    top_k: int = 4,
    top_p: float = 0.8,
    min_p: float = 0.02,
) -> Figure:
    """Next-token probabilities for "The capital of France is" under temperature, top-k, top-p and min-p.

    Top: softmax(logits / T) for each temperature. Bottom: at T = 1, which tokens each filter keeps
    (coloured) and removes (grey); the kept probabilities are renormalised before sampling.
    """
    if any(t <= 0 for t in temperatures):
        raise ValueError("temperatures must be > 0 (temperature 0 means greedy and has no distribution)")
    _check_int_at_least("top_k", top_k, 1)
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if not 0 <= min_p < 1:
        raise ValueError(f"min_p must be in [0, 1), got {min_p}")
    logits = np.array(_EXAMPLE_LOGITS)
    x = np.arange(len(logits))
    fig = Figure(figsize=(9.5, 5.6), layout="constrained", dpi=100)
    grid = fig.add_gridspec(2, 3)
    top = fig.add_subplot(grid[0, :])
    width = 0.8 / len(temperatures)
    for i, (temperature, colour) in enumerate(zip(temperatures, (BLUE, GREEN, VERMILLION, PURPLE))):
        top.bar(x + (i - (len(temperatures) - 1) / 2) * width, _softmax(logits / temperature), width=width,
                color=colour, label=f"T = {temperature:g}")
    top.set_xticks(x, _EXAMPLE_NEXT_TOKENS, fontsize=8)
    top.set_xlabel('candidate next token after "The capital of France is"')
    top.set_ylabel("probability")
    top.set_title("Temperature divides the logits: low T sharpens, high T flattens")
    top.legend(fontsize=8)

    probs = _softmax(logits)
    order = np.argsort(-probs)
    keep_top_k = np.zeros_like(probs, dtype=bool)
    keep_top_k[order[:top_k]] = True
    cumulative = np.cumsum(probs[order])
    # Keep the smallest prefix whose mass reaches top_p (the token that crosses it stays in).
    cutoff = int(np.searchsorted(cumulative, top_p) + 1)
    keep_top_p = np.zeros_like(probs, dtype=bool)
    keep_top_p[order[:cutoff]] = True
    keep_min_p = probs >= min_p * probs.max()
    for column, (name, keep) in enumerate((
        (f"top-k, k = {top_k}", keep_top_k),
        (f"top-p, p = {top_p:g}", keep_top_p),
        (f"min-p, {min_p:g} x max", keep_min_p),
    )):
        ax = fig.add_subplot(grid[1, column])
        ax.bar(x, probs, color=[BLUE if kept else LIGHT_GREY for kept in keep])
        ax.set_yscale("log")
        ax.set_xticks(x, _EXAMPLE_NEXT_TOKENS, rotation=90, fontsize=7)
        ax.set_title(f"{name}: keeps {int(keep.sum())}", fontsize=9)
        ax.set_xlabel("candidate token")
        ax.set_ylabel("probability (log)")
        ax.spines[["top", "right"]].set_visible(False)
    return fig


# ---------------------------------------------------------------------------------------------
# Speculative decoding
# ---------------------------------------------------------------------------------------------


def expected_tokens_per_verification(acceptance_rate, draft_len: int):
    """Expected tokens produced by one target pass when k drafted tokens are each accepted with rate a.

    (1 - a**(k + 1)) / (1 - a): the accepted prefix of the draft plus the one token the target
    always contributes (a correction or a bonus token). Works on scalars and arrays of rates.
    """
    rate = np.asarray(acceptance_rate, dtype=float)
    if ((rate < 0) | (rate >= 1)).any():
        raise ValueError("acceptance_rate must be in [0, 1)")
    _check_int_at_least("draft_len", draft_len, 0)
    return (1 - rate ** (draft_len + 1)) / (1 - rate)


def speculative_decoding_gain(acceptance_rates: Sequence[float] = (0.6, 0.8, 0.9), draft_cost: float = 0.05,
                              max_draft_len: int = 10) -> Figure:
    """Expected tokens per target pass and the resulting speed-up against the draft length k.

    Speed-up = expected tokens / (1 + k * draft_cost), where ``draft_cost`` is one drafter step's
    time as a fraction of one target step.
    """
    _check_positive("draft_cost", draft_cost, allow_zero=True)
    _check_int_at_least("max_draft_len", max_draft_len, 1)
    draft_len = np.arange(0, max_draft_len + 1)
    fig, (left, right) = _new_figure(1, 2, width=9.5, height=3.5)
    for rate, colour in zip(acceptance_rates, PALETTE):
        tokens = np.array([expected_tokens_per_verification(rate, int(k)) for k in draft_len])
        speedup = tokens / (1 + draft_len * draft_cost)
        left.plot(draft_len, tokens, "o-", color=colour, markersize=3, label=f"acceptance {rate:g}")
        right.plot(draft_len, speedup, "o-", color=colour, markersize=3, label=f"acceptance {rate:g}")
        best = int(np.argmax(speedup))
        right.plot([draft_len[best]], [speedup[best]], "*", color=colour, markersize=10)
    left.set_xlabel("draft length k (tokens proposed per round)")
    left.set_ylabel("tokens per target pass")
    left.set_title("More drafted tokens, diminishing returns")
    left.legend(fontsize=8)
    right.axhline(1, color=GREY, linestyle="--", linewidth=0.8)
    right.set_xlabel("draft length k (tokens proposed per round)")
    right.set_ylabel("speed-up over plain decoding (x)")
    right.set_title(f"Drafter step = {draft_cost:g} of a target step (star = best k)", fontsize=10)
    return fig


# ---------------------------------------------------------------------------------------------
# Quantization
# ---------------------------------------------------------------------------------------------


def _groupwise_absmax_error(weights: np.ndarray, bits: int, group_size: int) -> float:
    """Relative RMS error of symmetric round-to-nearest quantization with one scale per group."""
    groups = weights.reshape(-1, group_size)
    levels = 2 ** (bits - 1) - 1
    scale = np.abs(groups).max(axis=1, keepdims=True) / levels
    restored = np.round(groups / scale) * scale
    return float(np.sqrt(np.mean((restored - groups) ** 2)) / np.sqrt(np.mean(groups**2)))


def quantization_tradeoffs(num_params: float = 13e9, bandwidth_tb_s: float = 2.0, group_size: int = 64,
                           seed: int = 0) -> Figure:
    """What fewer bits buy and what they cost.

    Left: weight memory of a ``num_params`` model and the time to read it once at ``bandwidth_tb_s``
    (a lower bound on a decode step) for fp16, int8 and int4. Right: relative RMS error of
    group-wise round-to-nearest quantization of Gaussian weights, by bit width. The error is only a
    proxy: what matters is perplexity or task accuracy, which must be measured.
    """
    _check_positive("num_params", num_params)
    _check_positive("bandwidth_tb_s", bandwidth_tb_s)
    _check_int_at_least("group_size", group_size, 2)
    formats = {"fp16": 2.0, "int8": 1.0, "int4": 0.5}
    fig, (left, right) = _new_figure(1, 2, width=9.5, height=3.5)
    sizes = [num_params * b / GB for b in formats.values()]
    bars = left.bar(list(formats), sizes, color=[BLUE, GREEN, ORANGE])
    for bar, size in zip(bars, sizes):
        read_ms = size * GB / (bandwidth_tb_s * 1e12) * 1e3
        left.text(bar.get_x() + bar.get_width() / 2, size, f"{size:.1f} GB\n{read_ms:.2f} ms/read",
                  ha="center", va="bottom", fontsize=8)
    left.set_ylim(0, max(sizes) * 1.3)
    left.set_xlabel("weight format")
    left.set_ylabel("weight memory (GB)")
    left.set_title(f"{num_params / 1e9:.0f}B weights, read at {bandwidth_tb_s:g} TB/s", fontsize=10)

    rng = np.random.default_rng(seed)
    weights = rng.standard_normal(group_size * 2048)
    bit_widths = [8, 6, 5, 4, 3, 2]
    errors = [_groupwise_absmax_error(weights, bits, group_size) * 100 for bits in bit_widths]
    right.plot(bit_widths, errors, "o-", color=VERMILLION)
    right.set_yscale("log")
    right.invert_xaxis()
    right.set_xlabel("bits per weight")
    right.set_ylabel("relative RMS weight error (%)")
    right.set_title(f"Round-to-nearest, one scale per {group_size} weights", fontsize=10)
    return fig


# ---------------------------------------------------------------------------------------------
# Serving, disaggregation and routing
# ---------------------------------------------------------------------------------------------


def disaggregation_latency(
    decode_step_ms: float = 12.0,
    prefill_ms: float = 90.0,
    prefill_every_ms: float = 250.0,
    kv_transfer_ms: float = 15.0,
    duration_ms: float = 1000.0,
) -> Figure:
    """Gaps between one request's output tokens on a colocated server vs a disaggregated pair.

    Colocated: a prefill of ``prefill_ms`` arriving every ``prefill_every_ms`` runs in the same
    step as the decodes and stretches that step. Disaggregated: prefills run on their own pool; the
    decode pool's steps stay flat, and each new request pays ``kv_transfer_ms`` to move its cache.
    """
    for name, value in (("decode_step_ms", decode_step_ms), ("prefill_ms", prefill_ms),
                        ("prefill_every_ms", prefill_every_ms), ("duration_ms", duration_ms)):
        _check_positive(name, value)
    _check_positive("kv_transfer_ms", kv_transfer_ms, allow_zero=True)
    fig, ax = _new_figure(width=8.0, height=3.4)
    for policy, colour in (("colocated", VERMILLION), ("disaggregated", BLUE)):
        clock, next_prefill, times, gaps = 0.0, prefill_every_ms, [], []
        while clock < duration_ms:
            step = decode_step_ms
            if policy == "colocated" and clock >= next_prefill:
                step += prefill_ms
                next_prefill += prefill_every_ms
            clock += step
            times.append(clock)
            gaps.append(step)
        ax.plot(times, gaps, drawstyle="steps-pre", color=colour,
                label=f"{policy}: worst gap {max(gaps):.0f} ms")
    ax.set_xlabel("wall-clock time (ms)")
    ax.set_ylabel("gap between output tokens (ms)")
    ax.set_title(f"A prefill every {prefill_every_ms:.0f} ms (new requests also pay {kv_transfer_ms:.0f} ms"
                 " KV transfer when disaggregated)", fontsize=9)
    ax.set_ylim(0, (decode_step_ms + prefill_ms) * 1.2)
    ax.legend(fontsize=8)
    return fig


def _simulate_routing(policy: str, num_replicas: int, num_conversations: int, cache_slots: int,
                      num_requests: int, rng: np.random.Generator) -> float:
    """Prefix-cache hit rate when requests from Zipf-popular conversations are routed to replicas."""
    weights = 1.0 / np.arange(1, num_conversations + 1) ** 1.1
    conversations = rng.choice(num_conversations, size=num_requests, p=weights / weights.sum())
    caches = [OrderedDict() for _ in range(num_replicas)]
    hits = 0
    for index, conversation in enumerate(conversations):
        if policy == "round robin":
            replica = index % num_replicas
        else:  # prefix-aware: the same conversation always lands where its prefix is cached
            replica = int(conversation) % num_replicas
        cache = caches[replica]
        if conversation in cache:
            hits += 1
            cache.move_to_end(conversation)
        else:
            cache[conversation] = True
            if len(cache) > cache_slots:
                cache.popitem(last=False)  # evict the least recently used prefix
    return hits / num_requests


def routing_prefix_hit_rate(num_conversations: int = 60, cache_slots: int = 8, num_requests: int = 3000,
                            max_replicas: int = 8, seed: int = 0) -> Figure:
    """Simulated prefix-cache hit rate against the number of replicas, round-robin vs prefix-aware routing.

    Requests come from ``num_conversations`` conversations (Zipf popularity); each replica keeps
    the prefixes of ``cache_slots`` conversations (least recently used evicted).
    """
    _check_int_at_least("num_conversations", num_conversations, 1)
    _check_int_at_least("cache_slots", cache_slots, 1)
    _check_int_at_least("num_requests", num_requests, 1)
    _check_int_at_least("max_replicas", max_replicas, 1)
    replicas = np.arange(1, max_replicas + 1)
    fig, ax = _new_figure(width=7.5, height=3.4)
    for policy, colour in (("round robin", VERMILLION), ("prefix-aware", GREEN)):
        rates = [_simulate_routing(policy, int(n), num_conversations, cache_slots, num_requests,
                                   np.random.default_rng(seed)) * 100 for n in replicas]
        ax.plot(replicas, rates, "o-", color=colour, label=policy)
    ax.set_ylim(0, 100)
    ax.set_xlabel("replicas behind the router")
    ax.set_ylabel("prefix-cache hit rate (%)")
    ax.set_title(f"{num_conversations} conversations, {cache_slots} cached prefixes per replica")
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# GPU kernels
# ---------------------------------------------------------------------------------------------

H100_SMS = 132
"""Streaming multiprocessors of an NVIDIA H100 SXM."""

H100_MEMORY_LEVELS = (
    # (level, capacity in bytes for the whole GPU, note)
    ("registers", 132 * 256 * KIB, "256 KB per SM"),
    ("shared memory / L1", 132 * 256 * KIB, "256 KB per SM (up to 228 KB shared)"),
    ("L2 cache", 50 * 10**6, "50 MB, all SMs"),
    ("HBM3", 80 * 10**9, "80 GB at 3.35 TB/s"),
)
"""An H100 SXM's memory hierarchy from the NVIDIA H100 datasheet and Hopper tuning guide."""


def gpu_memory_hierarchy() -> Figure:
    """An H100's memory levels by capacity (log scale): the faster the memory, the less of it.

    Every kernel in Lab 0.3 streams its data from HBM (the only level big enough for weights and a
    KV cache) through the small on-chip levels; what it can keep on chip (a tile, a running sum)
    never crosses the 3.35 TB/s bus again.
    """
    fig, ax = _new_figure(width=7.5, height=3.2)
    names = [name for name, _, _ in H100_MEMORY_LEVELS]
    sizes = [size for _, size, _ in H100_MEMORY_LEVELS]
    colours = [GREEN, SKY, ORANGE, BLUE]
    bars = ax.barh(names, sizes, color=colours)
    ax.set_xscale("log")
    for bar, (_, size, note) in zip(bars, H100_MEMORY_LEVELS):
        ax.text(size * 1.3, bar.get_y() + bar.get_height() / 2, note, va="center", fontsize=8)
    ax.set_xlim(1e6, 1e13)
    ax.invert_yaxis()
    ax.set_xlabel("capacity, whole GPU (bytes, log scale)")
    ax.set_ylabel("memory level (fastest at the top)")
    ax.set_title("NVIDIA H100 SXM: 132 SMs share one L2 and one HBM")
    return fig


def sm_utilization(num_programs: int) -> float:
    """Share of an H100's SMs busy on average when ``num_programs`` equal programs run, one per SM at a time.

    The programs run in ``ceil(num_programs / 132)`` waves; the last wave may be partly empty.
    """
    _check_int_at_least("num_programs", num_programs, 1)
    waves = math.ceil(num_programs / H100_SMS)
    return num_programs / (waves * H100_SMS)


def occupancy_waves(max_programs: int = 600) -> Figure:
    """How busy an H100's SMs are as the grid grows: waves of 132 programs, and the partial last wave.

    A decode-attention grid has one program per (sequence, KV head): 8 programs at batch 1 with 8 KV
    heads leave 124 SMs idle, 140 programs need two waves of which the second runs 8. (Real SMs
    run several programs at once; the shape of the curve stays the same.)
    """
    _check_int_at_least("max_programs", max_programs, H100_SMS)
    programs = np.arange(1, max_programs + 1)
    utilization = np.array([sm_utilization(int(n)) for n in programs]) * 100
    fig, ax = _new_figure(width=7.5, height=3.2)
    ax.plot(programs, utilization, color=BLUE, linewidth=1.2)
    for batch in (1, 16, 64):
        n = batch * 8
        if n <= max_programs:
            ax.plot([n], [sm_utilization(n) * 100], "o", color=VERMILLION)
            ax.annotate(f"batch {batch} x 8 KV heads: {n} programs", (n, sm_utilization(n) * 100),
                        xytext=(8, 8) if batch == 1 else (-8, -16), ha="left" if batch == 1 else "right",
                        textcoords="offset points", fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_xlabel("programs in the grid")
    ax.set_ylabel("SMs busy, averaged over the waves (%)")
    ax.set_title("One program per SM at a time, 132 SMs")
    return fig


def coalescing_efficiency(max_stride: int = 16, element_bytes: int = 4) -> Figure:
    """Bytes a warp of 32 lanes moves to get 32 useful elements, as the lanes' stride grows.

    Memory moves in 32-byte sectors. 32 lanes reading consecutive fp32 elements touch 4 sectors
    (128 bytes, all used); at a stride of 2 elements they touch 8 sectors and use half; from a
    stride of 8 on, every lane gets a sector of its own and only 4 of its 32 bytes are used.
    """
    _check_int_at_least("max_stride", max_stride, 1)
    _check_int_at_least("element_bytes", element_bytes, 1)
    strides = np.arange(1, max_stride + 1)
    sector = 32
    moved = []
    for stride in strides:
        addresses = np.arange(32) * int(stride) * element_bytes
        moved.append(len(set(addresses // sector)) * sector)
    useful = 32 * element_bytes
    efficiency = useful / np.array(moved) * 100
    fig, ax = _new_figure(width=7.5, height=3.2)
    ax.plot(strides, efficiency, "o-", color=BLUE)
    ax.set_ylim(0, 105)
    ax.set_xticks(strides)
    ax.set_xlabel(f"stride between the lanes' elements ({element_bytes}-byte elements)")
    ax.set_ylabel("useful share of the bytes moved (%)")
    ax.set_title("A warp's load: consecutive addresses use every byte of each 32-byte sector")
    return fig


def figure_names() -> list[str]:
    """The names of this module's figure functions (public, annotated to return a ``Figure``), sorted."""
    import inspect

    module = globals()
    return sorted(name for name, value in module.items()
                  if inspect.isfunction(value) and value.__module__ == __name__ and not name.startswith("_")
                  and inspect.signature(value).return_annotation == "Figure")
