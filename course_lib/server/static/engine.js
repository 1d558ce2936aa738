// The engine view of `course serve`: GET /engine/stream (server-sent events) drawn as it arrives.
//
// One server sends {"type": "hello", "frame", "history"} and then {"type": "step", "frame", "events",
// "skipped"} after engine steps (course_lib/server/engine_view.py describes a frame). A router sends
// {"type": "router"} first, its decisions ({"type": "route"}, {"type": "route-done"}), and each
// replica's messages wrapped as {"type": "replica", "replica": i, "message": ...}.
// Messages are only stored when they arrive; drawing happens once per animation frame.

import { el, errorMessage, readEvents, seconds } from "./sse.js";

const $ = (id) => document.getElementById(id);
const WINDOW_S = 60;
const MAX_LOG = 50;
const MAX_ROUTES = 50;
// Distinct colours for requests (a request keeps its colour across frames: it comes from its id).
// Consecutive ids get 12 different colours (id * 7 mod 12 runs through all of them).
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
  "#17becf", "#393b79", "#a55194", "#637939"];
const FREE = "#e6e9ed";
const CACHED_EDGE = "#7d5ba6";

let paused = false;
let clockOffset = 0;   // browser seconds minus server seconds, so the charts scroll on the server's clock
const panels = new Map();
const dirty = new Set();
let routerState = null;
let framesReceived = 0, framesSkipped = 0;

function colorOf(id) {
  let hash = 0;
  for (const ch of String(id)) hash = (hash * 31 + ch.charCodeAt(0)) >>> 0;
  const digits = /(\d+)$/.exec(String(id));
  return PALETTE[(digits ? Number(digits[1]) * 7 : hash) % PALETTE.length];
}

function serverNow() { return Date.now() / 1000 - clockOffset; }

function requestLabel(request) {
  return request.tag ? `${request.id} (${request.tag})` : request.id;
}

function scheduleDraw(panel) {
  dirty.add(panel);
  if (dirty.size === 1) requestAnimationFrame(drawDirty);
}

function drawDirty() {
  if (paused) return;
  const panelsToDraw = [...dirty];
  dirty.clear();   // before drawing: a panel that fails to draw must not stop the others for good
  for (const panel of panelsToDraw) panel.draw();
  $("frames-note").textContent = `${framesReceived} frames received` +
    (framesSkipped ? `, ${framesSkipped} skipped (the engine stepped faster than this page drew)` : "");
}

// ---- one engine ---------------------------------------------------------------------------------

class EnginePanel {
  constructor(index, title) {
    this.index = index;
    this.frame = null;
    this.finishes = [];       // {time, ttft, tpot, ...}
    this.samples = [];        // [time, waiting, running, kv used]
    this.preemptions = [];    // newest last
    this.max = { running: 0, waiting: 0, used: 0 };
    const id = (name) => `${name}-${index}`;
    this.root = el("section", { class: "panel", "aria-labelledby": id("title"), "data-replica": index },
      el("header", {}, el("h2", { id: id("title"), text: title }), el("span", { class: "sub", id: id("step") })),
      el("div", { class: "budget" },
        el("span", { class: "sub", id: id("budget-text") }),
        el("div", { class: "bar-track", id: id("budget-bar"), role: "img", "aria-label": "tokens scheduled this step" })),
      el("div", { class: "queues" },
        el("section", { "aria-labelledby": id("running-title") },
          el("h3", { id: id("running-title"), text: "Running" }),
          el("div", { class: "scroll", id: id("running") })),
        el("section", { "aria-labelledby": id("waiting-title") },
          el("h3", { id: id("waiting-title"), text: "Waiting" }),
          el("div", { class: "scroll", id: id("waiting") }))),
      el("section", { class: "pool", "aria-labelledby": id("pool-title") },
        el("h3", { id: id("pool-title"), text: "KV block pool" }),
        el("p", { class: "sub", id: id("pool-summary") }),
        el("canvas", { id: id("pool"), role: "img", height: 60 }),
        el("ul", { class: "legend" },
          el("li", {}, el("span", { class: "swatch free" }), "free"),
          el("li", {}, el("span", { class: "swatch cached" }), "free, still holds a cached prefix (reused until evicted)"),
          el("li", {}, el("span", { class: "swatch used" }), "in use: one colour per request (as in Running)"),
          el("li", {}, el("span", { class: "swatch cached-used" }), "in use and in the prefix cache"),
          el("li", {}, el("span", { class: "swatch shared" }), "shared by several requests (number: reference count)"))),
      el("p", { class: "counters", id: id("counters") }),
      el("div", { class: "charts" },
        el("figure", {}, el("canvas", { id: id("ttft"), role: "img" }), el("figcaption", { id: id("ttft-caption") })),
        el("figure", {}, el("canvas", { id: id("tpot"), role: "img" }), el("figcaption", { id: id("tpot-caption") })),
        el("figure", {}, el("canvas", { id: id("queue"), role: "img" }), el("figcaption", { id: id("queue-caption") }))),
      el("section", { "aria-labelledby": id("preempt-title") },
        el("h3", { id: id("preempt-title"), text: "Preemptions" }),
        el("ol", { class: "log", id: id("preemptions"), "aria-label": "Preemptions, newest first" })));
    this.part = (name) => this.root.querySelector(`#${id(name)}`);
    $("replicas").append(this.root);
  }

  hello(message) {
    const history = message.history || {};
    this.finishes = (history.finishes || []).slice();
    this.preemptions = (history.preemptions || []).slice(-MAX_LOG);
    this.samples = (history.queue || []).slice();
    if (message.frame) clockOffset = Date.now() / 1000 - message.frame.time;
    this.takeFrame(message.frame);
    scheduleDraw(this);
  }

  step(message) {
    framesSkipped += message.skipped || 0;
    for (const event of message.events || []) {
      if (event.kind === "finish") this.finishes.push(event);
      else if (event.kind === "preempt") this.preemptions.push(event);
    }
    if (this.preemptions.length > MAX_LOG) this.preemptions.splice(0, this.preemptions.length - MAX_LOG);
    if (message.frame) {
      framesReceived += 1;
      this.takeFrame(message.frame);
    }
    scheduleDraw(this);
  }

  takeFrame(frame) {
    if (!frame) return;
    this.frame = frame;
    const pool = frame.pool;
    const used = pool ? pool.owner.filter((owner) => owner >= 0).length : 0;
    const running = frame.running ? frame.running.length : 0;
    const waiting = frame.num_waiting || 0;
    this.samples.push([frame.time, waiting, running, used]);
    this.max.running = Math.max(this.max.running, running);
    this.max.waiting = Math.max(this.max.waiting, waiting);
    this.max.used = Math.max(this.max.used, used);
    Object.assign(this.root.dataset, { step: frame.step, running, waiting, used, maxRunning: this.max.running,
      maxWaiting: this.max.waiting, maxUsed: this.max.used, preemptions: frame.totals.preemptions });
  }

  forgetOld() {
    const oldest = serverNow() - WINDOW_S;
    while (this.finishes.length && this.finishes[0].time < oldest) this.finishes.shift();
    while (this.samples.length && this.samples[0][0] < oldest) this.samples.shift();
  }

  draw() {
    this.forgetOld();
    const frame = this.frame;
    if (frame) {
      this.drawStep(frame);
      this.drawQueues(frame);
      this.drawPool(frame);
      this.drawCounters(frame);
    }
    this.drawPreemptions();
    this.drawCharts();
  }

  drawStep(frame) {
    const running = frame.running || [];
    this.part("step").textContent = `step ${frame.step.toLocaleString()}` +
      (frame.step_ms === null ? "" : ` · ${frame.step_ms.toFixed(1)} ms`) +
      ` · ${running.length} running · ${frame.num_waiting ?? "?"} waiting`;
    let decode = 0, prefill = 0;
    for (const request of running) {
      if (!request.chunk) continue;
      if (request.state === "decode") decode += request.chunk[1]; else prefill += request.chunk[1];
    }
    const budget = frame.budget || Math.max(frame.scheduled_tokens, 1);
    this.part("budget-text").textContent = `tokens this step: ${frame.scheduled_tokens} of a budget of ${budget}` +
      ` (${decode} decode, ${prefill} prefill)`;
    const bar = this.part("budget-bar");
    bar.setAttribute("aria-label", `${frame.scheduled_tokens} of ${budget} tokens scheduled this step`);
    bar.replaceChildren(
      el("span", { class: "fill-decode", style: `width:${(100 * decode) / budget}%` }),
      el("span", { class: "fill-prefill", style: `width:${(100 * prefill) / budget}%` }));
  }

  drawQueues(frame) {
    const maxSeqs = frame.max_num_seqs ? ` (at most ${frame.max_num_seqs})` : "";
    this.part("running-title").textContent = frame.running === null ? "Running"
      : `Running: ${frame.running.length}${maxSeqs}`;
    this.part("waiting-title").textContent = frame.waiting === null ? "Waiting" : `Waiting: ${frame.num_waiting}`;
    this.part("running").replaceChildren(frame.running === null
      ? el("p", { class: "none", text: "This scheduler does not expose its running list." })
      : frame.running.length ? this.runningTable(frame.running)
        : el("p", { class: "none", text: "No request is running." }));
    this.part("waiting").replaceChildren(frame.waiting === null
      ? el("p", { class: "none", text: "This scheduler does not expose its waiting list." })
      : frame.waiting.length ? this.waitingTable(frame.waiting, frame.num_waiting)
        : el("p", { class: "none", text: "Nobody is waiting." }));
  }

  runningTable(requests) {
    const rows = requests.map((request) => {
      const total = request.prompt + (request.max_tokens || request.output);
      const promptDone = Math.min(request.computed, request.prompt);
      const width = (n) => `width:${(100 * Math.max(n, 0)) / total}%`;
      const progress = el("div", { class: "progress", role: "img",
        "aria-label": `prompt ${promptDone} of ${request.prompt} computed (${request.cached} from the prefix cache); ` +
          `output ${request.output} of ${request.max_tokens}` },
      el("span", { class: "p-cached", style: width(Math.min(request.cached, request.prompt)) }),
      el("span", { class: "p-prompt", style: width(promptDone - Math.min(request.cached, request.prompt)) }),
      el("span", { style: `${width(request.prompt - promptDone)};background:#f3d9bd` }),
      el("span", { class: "p-output", style: width(request.output) }));
      let ran = "–";
      if (request.chunk) {
        const [start, count, drafts] = request.chunk;
        ran = request.state === "decode"
          ? (drafts ? `decode 1 + ${drafts} drafts` : "decode 1")
          : `${request.state} ${count} [${start}, ${start + count})`;
      }
      return el("tr", {},
        el("td", { class: "mono" }, el("span", { class: "swatch", style: `background:${colorOf(request.id)}` }), requestLabel(request)),
        el("td", {}, el("span", { class: `state ${request.state}`, text: request.state })),
        el("td", {}, progress, el("span", { class: "sub", text: `${request.output}/${request.max_tokens} out` })),
        el("td", { class: "mono", text: ran }),
        el("td", { class: "num", text: request.cached }),
        el("td", { class: "num", text: request.blocks ?? "?" }));
    });
    return el("table", {},
      el("caption", { class: "visually-hidden", text: "Running requests and what each ran this step" }),
      el("thead", {}, el("tr", {}, ...["Request", "State", "Progress", "This step"].map((t) => el("th", { scope: "col", text: t })),
        el("th", { scope: "col", class: "num", text: "Cache hits",
          title: "tokens found in the prefix cache, over all of the request's admissions (a preempted request " +
            "looks again when it comes back, and often finds the blocks it computed itself)" }),
        el("th", { scope: "col", class: "num", text: "Blocks" }))),
      el("tbody", {}, rows));
  }

  waitingTable(requests, total) {
    const rows = requests.map((request) => el("tr", {},
      el("td", { class: "mono", text: requestLabel(request) }),
      el("td", {}, el("span", { class: `state ${request.state}`, text: request.state })),
      el("td", { class: "num", text: request.prompt }),
      el("td", { class: "num", text: request.output }),
      el("td", { class: "num", text: request.preemptions })));
    if (total > requests.length) {
      rows.push(el("tr", {}, el("td", { colspan: 5, class: "sub", text: `… and ${total - requests.length} more` })));
    }
    return el("table", {},
      el("caption", { class: "visually-hidden", text: "Waiting requests, next to run first" }),
      el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Request" }), el("th", { scope: "col", text: "State" }),
        el("th", { scope: "col", class: "num", text: "Prompt" }),
        el("th", { scope: "col", class: "num", title: "tokens generated before a preemption", text: "Output" }),
        el("th", { scope: "col", class: "num", text: "Preempted" }))),
      el("tbody", {}, rows));
  }

  drawPool(frame) {
    const pool = frame.pool;
    const canvas = this.part("pool");
    const width = Math.max(canvas.clientWidth, 200);
    const n = pool.num_blocks;
    // Big cells for a small pool, down to 4 pixels so that thousands of blocks fit in about 280 pixels.
    const cell = Math.max(4, Math.min(28, Math.floor(Math.sqrt((width * 280) / n))));
    const columns = Math.max(1, Math.floor(width / cell));
    const rows = Math.ceil(n / columns);
    const ratio = window.devicePixelRatio || 1;
    canvas.style.height = `${rows * cell}px`;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(rows * cell * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, rows * cell);
    const running = frame.running || [];
    const cached = new Set(pool.cached || []);
    const shared = new Map(pool.shared);
    const gap = cell >= 8 ? 1 : 0;
    let used = 0, cachedFree = 0, cachedUsed = 0;
    ctx.font = `${Math.max(cell - 7, 6)}px system-ui, sans-serif`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let block = 0; block < n; block += 1) {
      const x = (block % columns) * cell, y = Math.floor(block / columns) * cell;
      const size = cell - gap;
      const owner = pool.owner[block];
      if (owner >= 0) {
        used += 1;
        ctx.fillStyle = colorOf(running[owner] ? running[owner].id : owner);
        ctx.fillRect(x, y, size, size);
        if (cached.has(block)) {
          cachedUsed += 1;
          ctx.fillStyle = "#fff";
          ctx.fillRect(x + 1, y + 1, Math.max(2, size / 4), Math.max(2, size / 4));
        }
        if (shared.has(block)) {
          ctx.strokeStyle = "#111";
          ctx.lineWidth = 2;
          ctx.strokeRect(x + 1, y + 1, size - 2, size - 2);
          if (cell >= 12) {
            ctx.fillStyle = "#111";
            ctx.fillRect(x + size / 2 - cell / 4, y + size / 2 - cell / 4, cell / 2, cell / 2);
            ctx.fillStyle = "#fff";
            ctx.fillText(String(shared.get(block)), x + size / 2, y + size / 2 + 1);
          }
        }
      } else {
        ctx.fillStyle = FREE;
        ctx.fillRect(x, y, size, size);
        if (cached.has(block)) {
          cachedFree += 1;
          ctx.strokeStyle = CACHED_EDGE;
          ctx.lineWidth = Math.max(1, Math.min(2, cell / 6));
          ctx.strokeRect(x + 1, y + 1, size - 2, size - 2);
        }
      }
    }
    const holders = new Set(pool.owner.filter((owner) => owner >= 0)).size;
    const summary = `${n} blocks of ${pool.block_size} tokens: ${used} in use by ${holders} ` +
      `request${holders === 1 ? "" : "s"}, ${shared.size} shared, ` +
      (pool.cached === null ? "prefix cache not shown by this allocator, "
        : `${cachedUsed + cachedFree} in the prefix cache (${cachedFree} of them free), `) + `${pool.free} free.`;
    this.part("pool-summary").textContent = summary;
    canvas.setAttribute("aria-label", `KV block pool: ${summary}`);
  }

  drawCounters(frame) {
    const t = frame.totals;
    const items = [["preemptions", t.preemptions], ["prompt tokens from the prefix cache", t.prefix_cached_tokens],
      ["tokens generated", t.generated_tokens], ["tokens run", t.batched_tokens]];
    if (t.drafted_tokens) {
      items.push(["draft tokens accepted", `${t.accepted_tokens}/${t.drafted_tokens} ` +
        `(${((100 * t.accepted_tokens) / t.drafted_tokens).toFixed(0)}%)`]);
    }
    this.part("counters").replaceChildren(...items.map(([name, value]) =>
      el("span", {}, el("b", { text: typeof value === "number" ? value.toLocaleString() : value }), ` ${name}`)));
  }

  drawPreemptions() {
    const list = this.part("preemptions");
    if (!this.preemptions.length) {
      list.replaceChildren(el("li", { class: "sub", text: "None yet. They happen when a decode needs a block and the pool is full: the newest running request gives its blocks back and waits to be recomputed." }));
      return;
    }
    list.replaceChildren(...this.preemptions.slice().reverse().map((event) => el("li", {},
      `${new Date(event.time * 1000).toLocaleTimeString()} · step ${event.step}: `,
      el("span", { class: "swatch", style: `background:${colorOf(event.id)}` }),
      el("span", { class: "mono", text: requestLabel(event) }),
      ` preempted; its ${event.tokens} tokens will be recomputed`)));
  }

  drawCharts() {
    const now = serverNow();
    const ttft = this.finishes.filter((f) => f.ttft !== null).map((f) => [f.time, f.ttft]);
    const tpot = this.finishes.filter((f) => f.tpot !== null).map((f) => [f.time, f.tpot * 1000]);
    const waiting = this.samples.map((s) => [s[0], s[1]]);
    const running = this.samples.map((s) => [s[0], s[2]]);
    chart(this.part("ttft"), now, [{ points: ttft, color: PALETTE[0], dots: true }], "s");
    chart(this.part("tpot"), now, [{ points: tpot, color: PALETTE[1], dots: true }], "ms");
    chart(this.part("queue"), now, [{ points: running, color: PALETTE[0] }, { points: waiting, color: PALETTE[3] }], "");
    this.part("ttft-caption").textContent = `TTFT per finished request, last minute: ${describe(ttft.map((p) => p[1]), seconds)}`;
    this.part("tpot-caption").textContent = `TPOT per finished request, last minute: ${describe(tpot.map((p) => p[1] / 1000), seconds)}`;
    const last = this.samples.length ? this.samples[this.samples.length - 1] : null;
    this.part("queue-caption").textContent = "Requests running (blue) and waiting (red), last minute" +
      (last ? `: now ${last[2]} running, ${last[1]} waiting` : "");
    this.part("ttft").setAttribute("aria-label", this.part("ttft-caption").textContent);
    this.part("tpot").setAttribute("aria-label", this.part("tpot-caption").textContent);
    this.part("queue").setAttribute("aria-label", this.part("queue-caption").textContent);
  }
}

function describe(values, format) {
  if (!values.length) return "no request finished";
  const sorted = values.slice().sort((a, b) => a - b);
  const median = sorted[Math.floor((sorted.length - 1) / 2)];
  return `${values.length} requests, median ${format(median)}, max ${format(sorted[sorted.length - 1])}`;
}

/** A small time-series chart of the last minute: series of [server time, value]. */
function chart(canvas, now, series, unit) {
  const width = Math.max(canvas.clientWidth, 120), height = Math.max(canvas.clientHeight, 60);
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const left = 44, bottom = height - 14, top = 6, right = width - 4;
  let max = 0;
  for (const s of series) for (const [, v] of s.points) max = Math.max(max, v);
  max = max > 0 ? niceCeiling(max) : 1;
  ctx.strokeStyle = "#c9d1da";
  ctx.lineWidth = 1;
  ctx.beginPath();
  ctx.moveTo(left, top); ctx.lineTo(left, bottom); ctx.lineTo(right, bottom);
  ctx.stroke();
  ctx.fillStyle = "#4f5863";
  ctx.font = "10px system-ui, sans-serif";
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  ctx.fillText(`${formatTick(max)}${unit}`, left - 3, top + 4);
  ctx.fillText("0", left - 3, bottom);
  ctx.textBaseline = "alphabetic";
  ctx.fillText("now", right, height - 2);
  ctx.textAlign = "left";
  ctx.fillText(`${WINDOW_S} s ago`, left, height - 2);
  const x = (t) => left + ((t - (now - WINDOW_S)) / WINDOW_S) * (right - left);
  const y = (v) => bottom - (v / max) * (bottom - top);
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.fillStyle = s.color;
    if (s.dots) {
      for (const [t, v] of s.points) {
        ctx.beginPath();
        ctx.arc(x(t), y(v), 2.5, 0, 2 * Math.PI);
        ctx.fill();
      }
    } else if (s.points.length) {
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      s.points.forEach(([t, v], i) => {   // steps: a queue length holds until the next sample
        if (i === 0) ctx.moveTo(x(t), y(v)); else { ctx.lineTo(x(t), y(s.points[i - 1][1])); ctx.lineTo(x(t), y(v)); }
      });
      ctx.lineTo(x(now), y(s.points[s.points.length - 1][1]));
      ctx.stroke();
    }
  }
}

function niceCeiling(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

function formatTick(value) {
  return value >= 100 ? value.toFixed(0) : value >= 1 ? String(Number(value.toFixed(1))) : String(Number(value.toPrecision(2)));
}

// ---- the router -------------------------------------------------------------------------------

function panelFor(index, title) {
  if (!panels.has(index)) panels.set(index, new EnginePanel(index, title));
  return panels.get(index);
}

function drawRoutes() {
  if (!routerState || paused) return;
  const { routes, policy, urls } = routerState;
  // A policy that balances by KV-cache use (kv-aware) also says what each replica last reported.
  const byKv = routes.some((route) => Array.isArray(route.kv_free));
  $("router-summary").textContent = `${urls.length} replicas, routing policy ${policy}. Each request gets a router id ` +
    "(route-N) that its replica's panel shows beside the engine's own id." +
    (byKv ? " The policy routes by the free KV blocks each replica reports on /metrics." : "");
  $("kv-free-heading").hidden = !byKv;
  $("routes").replaceChildren(...routes.slice(-MAX_ROUTES).reverse().map((route) => el("tr", {},
    el("td", { class: "mono", text: route.id }),
    el("td", {}, el("span", { class: "swatch", style: `background:${PALETTE[route.replica % PALETTE.length]}` }),
      `replica ${route.replica}`),
    el("td", { class: "mono", text: `[${route.outstanding.join(", ")}]` }),
    ...(byKv ? [el("td", { class: "mono", text: Array.isArray(route.kv_free)
      ? `[${route.kv_free.map((free) => (free === null ? "?" : free)).join(", ")}]` : "" })] : []),
    el("td", { class: "num", text: route.prompt_tokens }),
    el("td", { text: route.status === null ? "streaming…" : `${route.status} after ${seconds(route.seconds)}` }))));
}

function handleRouterMessage(message) {
  if (message.type === "router") {
    routerState = { policy: message.policy, urls: message.replica_urls, routes: message.routes.slice() };
    $("router").hidden = false;
    message.replica_urls.forEach((url, index) => panelFor(index, `Replica ${index} · ${new URL(url).host}`));
    drawRoutes();
  } else if (message.type === "route") {
    routerState.routes.push(message);
    if (routerState.routes.length > 4 * MAX_ROUTES) routerState.routes.splice(0, routerState.routes.length - MAX_ROUTES);
    requestAnimationFrame(drawRoutes);
  } else if (message.type === "route-done") {
    const route = routerState.routes.find((r) => r.id === message.id);
    if (route) Object.assign(route, { status: message.status, seconds: message.seconds });
    requestAnimationFrame(drawRoutes);
  } else if (message.type === "replica") {
    handleEngineMessage(panelFor(message.replica, `Replica ${message.replica}`), message.message);
  } else if (message.type === "replica-down") {
    panelFor(message.replica, `Replica ${message.replica}`).part("step").textContent = `not answering: ${message.error}`;
  }
}

function handleEngineMessage(panel, message) {
  if (message.type === "hello") panel.hello(message); else if (message.type === "step") panel.step(message);
}

// ---- the connection -----------------------------------------------------------------------------

async function connect() {
  for (;;) {
    try {
      const response = await fetch("/engine/stream", { cache: "no-store" });
      if (!response.ok) {
        const reason = await errorMessage(response);
        $("status").textContent = `No engine view (${response.status}): ${reason}`;
        if (response.status === 404) return;
      } else {
        $("status").textContent = "Connected: live";
        for await (const data of readEvents(response)) {
          const message = JSON.parse(data);
          if (message.type === "hello" || message.type === "step") {
            handleEngineMessage(panelFor(0, "Engine"), message);
          } else {
            handleRouterMessage(message);
          }
        }
        $("status").textContent = "The stream ended; reconnecting…";
      }
    } catch (error) {
      $("status").textContent = "Lost the connection to the server; reconnecting…";
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

async function loadModelName() {
  try {
    const response = await fetch("/server_info");
    if (!response.ok) return;
    const info = await response.json();
    $("model-name").textContent = `· ${info.model}`;
    document.title = `Engine view of ${info.model} · course serve`;
  } catch (_) { /* the status line already says the server is unreachable */ }
}

$("pause").addEventListener("click", () => {
  paused = !paused;
  $("pause").setAttribute("aria-pressed", String(paused));
  $("pause").textContent = paused ? "Resume updates" : "Pause updates";
  if (!paused) {
    for (const panel of panels.values()) dirty.add(panel);
    requestAnimationFrame(drawDirty);
    drawRoutes();
  }
});
// The charts scroll with time even while the engine is idle.
setInterval(() => { for (const panel of panels.values()) scheduleDraw(panel); }, 1000);

loadModelName();
connect();
