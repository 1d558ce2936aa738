// The chat page of `course serve`: a conversation streamed over the server's own
// POST /v1/chat/completions, the sampling controls, and per answer what Lab 0.5 measures
// from the wire (TTFT, TPOT, tokens/s) with the prompt tokens the prefix cache held.

import { el, errorMessage, readEvents, seconds } from "./sse.js";

const $ = (id) => document.getElementById(id);
const messagesList = $("messages");
const messageBox = $("message");
const sendButton = $("send");
const stopButton = $("stop");
const alertBox = $("alert");
const settingsForm = $("settings");

const DEFAULTS = Object.fromEntries([...settingsForm.elements].filter((e) => e.name)
  .map((e) => [e.name, e.type === "checkbox" ? e.checked : e.value]));
const STATUS_EVERY_MS = 3000;

let history = [];          // {role, content} of the conversation so far
let modelName = null;
let inFlight = null;       // the AbortController of the answer being streamed
let retryTimer = null;

// ---- server facts and status --------------------------------------------------------------

function fact(list, name, value) {
  list.append(el("dt", { text: name }), el("dd", { text: value }));
}

function describeServer(info) {
  const engine = info.engine || {};
  const facts = $("server-facts");
  facts.replaceChildren();
  fact(facts, "Model", info.model);
  if (info.router) {
    fact(facts, "Replicas", `${info.router.replica_urls.length} engine processes behind a router`);
    fact(facts, "Routing", info.router.policy);
  }
  if (engine.num_blocks) {
    fact(facts, "KV pool", `${engine.num_blocks} blocks of ${engine.block_size} tokens ` +
      `(${(engine.num_blocks * engine.block_size).toLocaleString()} tokens)` + (info.router ? " per replica" : ""));
    fact(facts, "Batch", `up to ${engine.max_num_seqs} requests, ${engine.max_num_batched_tokens} tokens per step`);
    fact(facts, "Context", `${engine.max_model_len.toLocaleString()} tokens`);
    fact(facts, "Prefix caching", engine.prefix_caching ? "on" : "off");
    fact(facts, "Chunked prefill", engine.chunked_prefill ? "on" : "off");
    fact(facts, "Device", `${engine.device}${engine.dtype ? ", " + engine.dtype : ""}`);
    fact(facts, "Attention", engine.attention_backend);
  }
  const admission = info.admission || {};
  fact(facts, "Admission control", admission.enabled
    ? `on: at most ${admission.max_waiting} waiting, KV budget ${admission.kv_budget_blocks} blocks`
    : `off (429 only past ${info.max_pending} requests in flight)`);

  const modes = $("mode-facts");
  modes.replaceChildren();
  fact(modes, "Weights", info.quantization ? `${info.quantization} (weight-only quantized)` : "as read from the model file");
  fact(modes, "Speculative decoding", engine.speculative
    ? `${engine.speculative.method}, ${engine.speculative.num_draft_tokens} draft tokens per step` : "off");
}

async function loadServerInfo() {
  try {
    const response = await fetch("/server_info");
    if (!response.ok) throw new Error(await errorMessage(response));
    const info = await response.json();
    modelName = info.model;
    $("model-name").textContent = `· ${info.model}`;
    document.title = `Chat with ${info.model} · course serve`;
    describeServer(info);
  } catch (error) {
    $("status").textContent = `Could not read /server_info: ${error.message}`;
  }
}

async function refreshStatus() {
  try {
    const response = await fetch("/engine/state", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const state = await response.json();
    const engine = state.alive === false ? "engine stopped" : "engine running";
    $("status").textContent = `${engine} · ${state.num_running} running, ${state.num_waiting} waiting · ` +
      `KV ${state.kv_blocks_used}/${state.kv_blocks_total} blocks`;
  } catch (error) {
    $("status").textContent = "The server does not answer (is course serve still running?)";
  }
}

// ---- settings ------------------------------------------------------------------------------

/** The request's sampling fields, as the API names them; empty optional fields are left out. */
function samplingFields() {
  const value = (name) => settingsForm.elements[name].value.trim();
  const fields = {};
  for (const name of ["temperature", "top_p", "min_p"]) {
    if (value(name) !== "") fields[name] = Number(value(name));
  }
  for (const name of ["top_k", "max_tokens", "seed"]) {
    if (value(name) !== "") fields[name] = Number.isInteger(Number(value(name))) ? Number(value(name)) : value(name);
  }
  const stops = settingsForm.elements.stop.value.split("\n").filter((line) => line !== "");
  if (stops.length) fields.stop = stops;
  if (settingsForm.elements.ignore_eos.checked) fields.ignore_eos = true;
  return fields;
}

function restoreDefaults() {
  for (const [name, value] of Object.entries(DEFAULTS)) {
    const input = settingsForm.elements[name];
    if (input.type === "checkbox") input.checked = value; else input.value = value;
  }
}

// ---- the conversation ------------------------------------------------------------------------

function addMessage(role, text) {
  $("empty-hint").hidden = true;
  const item = el("li", { class: `message ${role}` },
    el("p", { class: "who", text: role === "user" ? "You" : (modelName || "Assistant") }),
    el("p", { class: "text", text }));
  messagesList.append(item);
  item.scrollIntoView({ block: "nearest" });
  return item;
}

function showAlert(kind, title, detail, extra) {
  alertBox.className = `alert ${kind}`;
  alertBox.replaceChildren(el("p", {}, el("strong", { text: title })), el("p", { class: "detail", text: detail }),
    ...(extra ? [extra] : []));
  alertBox.hidden = false;
}

function clearAlert() {
  clearInterval(retryTimer);
  retryTimer = null;
  alertBox.hidden = true;
  alertBox.replaceChildren();
}

function setBusy(busy) {
  sendButton.disabled = busy;
  stopButton.disabled = !busy;
  messagesList.setAttribute("aria-busy", busy ? "true" : "false");
}

/** A 429: say why, count down Retry-After, then offer to send the same message again. */
function showBusy(message, retryAfter, text) {
  let left = Math.max(1, Math.ceil(Number(retryAfter) || 1));
  const button = el("button", { type: "button", class: "secondary", disabled: true });
  const label = () => { button.textContent = left > 0 ? `Retry in ${left} s` : "Retry now"; };
  label();
  button.addEventListener("click", () => { clearAlert(); messageBox.value = text; send(); });
  showAlert("busy", "The server is busy (429 Too Many Requests).",
    `${message} It asks to retry after ${retryAfter || "?"} s.`, el("p", {}, button));
  retryTimer = setInterval(() => {
    left -= 1;
    label();
    if (left <= 0) { clearInterval(retryTimer); button.disabled = false; }
  }, 1000);
}

function statsLine(stats) {
  const parts = [
    ["ttft", `TTFT ${seconds(stats.ttft)}`, "time to first token: from sending to the first piece of text"],
    ["tpot", `TPOT ${seconds(stats.tpot)}`, "time per output token after the first: (last - first) / (tokens - 1)"],
    ["tokens-per-s", `${stats.tokensPerS === null ? "–" : stats.tokensPerS.toFixed(1)} tokens/s`,
      "output tokens divided by the time from sending to the last token"],
    ["output-tokens", `${stats.completionTokens ?? "?"} tokens`, "output tokens (usage.completion_tokens)"],
    ["prompt-tokens", `${stats.promptTokens ?? "?"} prompt tokens` +
      (stats.cachedTokens === null || stats.cachedTokens === undefined ? "" : `, ${stats.cachedTokens} from the prefix cache`),
    "usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens"],
    ["finish", `finish: ${stats.finishReason || "?"}`, "why the answer ended: stop (end of sequence or a stop string) or length"],
  ];
  if (stats.replica !== null) parts.push(["replica", `replica ${stats.replica}`, "the replica the router chose"]);
  const line = el("p", { class: "stats" });
  for (const [name, text, title] of parts) line.append(el("span", { "data-stat": name, title, text }));
  for (const [name, value] of Object.entries(stats)) {
    if (typeof value === "number") line.dataset[name] = String(value);
  }
  return line;
}

async function send() {
  const text = messageBox.value;
  if (!text.trim() || inFlight) return;
  clearAlert();
  const system = settingsForm.elements.system.value.trim();
  const userItem = addMessage("user", text);
  history.push({ role: "user", content: text });
  messageBox.value = "";
  const answer = addMessage("assistant", "");
  answer.classList.add("streaming");
  const answerText = answer.querySelector(".text");
  const controller = new AbortController();
  inFlight = controller;
  setBusy(true);

  const body = {
    messages: system ? [{ role: "system", content: system }, ...history] : history,
    stream: true, stream_options: { include_usage: true }, ...samplingFields(),
  };
  if (modelName) body.model = modelName;
  const sentAt = performance.now();
  let firstAt = null, lastAt = null, usage = null, finishReason = null, replica = null;
  const forget = () => {   // the exchange did not happen: take it out of the history and the page
    history.pop();
    userItem.remove();
    answer.remove();
    messageBox.value = text;
    if (!history.length && !messagesList.children.length) $("empty-hint").hidden = false;
  };
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!response.ok) {
      const message = await errorMessage(response);
      forget();
      if (response.status === 429) showBusy(message, response.headers.get("Retry-After"), text);
      else showAlert("error", `The server refused this request (${response.status} ${response.statusText || ""}).`.replace(" ).", ")."),
        message);
      return;
    }
    replica = response.headers.get("x-course-replica");
    for await (const data of readEvents(response)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message || "the stream reported an error");
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices || []) {
        const piece = choice.delta && choice.delta.content;
        if (piece) {
          lastAt = performance.now();
          if (firstAt === null) firstAt = lastAt;
          answerText.textContent += piece;
        }
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
    }
  } catch (error) {
    if (error.name === "AbortError") {
      finishReason = "stopped";
    } else {
      forget();
      showAlert("error", "The answer could not be read.", `${error.message}. Is the server still running?`);
      return;
    }
  } finally {
    inFlight = null;
    setBusy(false);
    answer.classList.remove("streaming");
  }
  history.push({ role: "assistant", content: answerText.textContent });
  const completionTokens = usage ? usage.completion_tokens : null;
  const elapsed = lastAt === null ? null : (lastAt - sentAt) / 1000;
  answer.append(statsLine({
    ttft: firstAt === null ? null : (firstAt - sentAt) / 1000,
    tpot: completionTokens > 1 && firstAt !== null ? (lastAt - firstAt) / 1000 / (completionTokens - 1) : null,
    tokensPerS: completionTokens && elapsed ? completionTokens / elapsed : null,
    completionTokens, promptTokens: usage ? usage.prompt_tokens : null,
    cachedTokens: usage && usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : null,
    finishReason, replica: replica === null ? null : Number(replica),
  }));
  answer.scrollIntoView({ block: "nearest" });
  messageBox.focus();
}

function newConversation() {
  if (inFlight) inFlight.abort();
  history = [];
  messagesList.replaceChildren();
  clearAlert();
  $("empty-hint").hidden = false;
  messageBox.focus();
}

// ---- wiring ------------------------------------------------------------------------------------

$("composer").addEventListener("submit", (event) => { event.preventDefault(); send(); });
messageBox.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); send(); }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && inFlight) inFlight.abort();
});
stopButton.addEventListener("click", () => inFlight && inFlight.abort());
$("new-conversation").addEventListener("click", newConversation);
$("defaults").addEventListener("click", restoreDefaults);
settingsForm.addEventListener("submit", (event) => event.preventDefault());

loadServerInfo();
refreshStatus();
setInterval(refreshStatus, STATUS_EVERY_MS);
messageBox.focus();
