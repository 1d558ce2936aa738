// The marking page of `course mark`: every answer to one written question, the rubric beside it.
// Everything a student or a TA wrote is put on the page with textContent, never as HTML.
"use strict";

const state = {
  token: "", grader: "", lab: null, question: null, answers: [], current: -1,
  form: null,          // {criteria: {id: points}, adjustment, comment, baseVersion, dirty}
  held: null,          // the answer key whose claim this page holds
  readOnly: false,     // the current answer is claimed by someone else
  renewTimer: null,
};

const $ = (id) => document.getElementById(id);

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

// The course's Markdown (prompts, model answers, notes) as plain paragraphs: lines of a paragraph are
// joined, while lists and tables keep their lines. Still text only: nothing here becomes HTML.
function prose(box, text) {
  box.replaceChildren();
  for (const block of String(text || "").split(/\n\s*\n/)) {
    const lines = block.split("\n");
    const structured = lines.some((line) => /^\s*([-*] |\||\d+\. )/.test(line));
    box.append(el("p", structured ? block : lines.map((line) => line.trim()).join(" "), structured ? "keep-lines" : ""));
  }
}

function fmt(points) {
  return Number.isInteger(points) ? String(points) : String(Math.round(points * 100) / 100);
}

// ------------------------------------------------------------------------------------ the API

async function api(method, path, body) {
  const options = {method, headers: {"X-Marking-Token": state.token}};
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, options);
  } catch (error) {
    return {ok: false, status: 0, data: {error: "the server does not answer: is `course mark` still running?"}};
  }
  let data = {};
  try { data = await response.json(); } catch (error) { data = {error: `unexpected answer (${response.status})`}; }
  return {ok: response.ok, status: response.status, data};
}

function say(message, kind) {
  const status = $("status");
  status.textContent = message || "";
  status.className = kind || "";
}

function fatal(message) {
  const box = $("fatal");
  box.textContent = message;
  box.hidden = false;
  $("workspace").hidden = true;
}

// ------------------------------------------------------------------------------------ start

async function start() {
  const match = /(?:^#|&)token=([^&]+)/.exec(window.location.hash);
  if (match) {
    sessionStorage.setItem("course-mark-token", decodeURIComponent(match[1]));
    history.replaceState(null, "", window.location.pathname);   // the token leaves the address bar
  }
  state.token = sessionStorage.getItem("course-mark-token") || "";
  if (!state.token) return fatal("Open the address that `course mark` printed: it carries the key to this page.");
  const lab = await api("GET", "/api/lab");
  if (!lab.ok) return fatal(lab.data.error || "the lab could not be loaded");
  state.lab = lab.data;
  $("lab").textContent = `${state.lab.lab}: written questions${state.lab.anonymous ? " (anonymous)" : ""}`;
  const select = $("question");
  select.replaceChildren();
  state.lab.questions.forEach((question, index) => {
    select.append(new Option(`${question.key} (${fmt(question.points)} points)`, String(index)));
  });
  if (!state.lab.questions.length) return fatal(`${state.lab.lab} has no written questions.`);
  state.grader = localStorage.getItem("course-mark-grader") || state.lab.default_grader || "";
  if (!state.grader) {
    $("signin").hidden = false;
    $("grader-name").focus();
    return;
  }
  await begin();
}

async function begin() {
  $("signin").hidden = true;
  $("workspace").hidden = false;
  $("who").textContent = `grading as ${state.grader}`;
  const saved = Number(localStorage.getItem(`course-mark-question:${state.lab.lab}`) || 0);
  await openQuestion(Math.min(Math.max(saved, 0), state.lab.questions.length - 1));
}

// ------------------------------------------------------------------------------------ one question

async function openQuestion(index) {
  if (!leaveAllowed()) return;
  await releaseHeld();
  state.question = state.lab.questions[index];
  $("question").value = String(index);
  localStorage.setItem(`course-mark-question:${state.lab.lab}`, String(index));
  renderRubric();
  await reloadAnswers();
  const first = nextAwaiting(-1);
  await select(first >= 0 ? first : 0);
}

async function reloadAnswers() {
  const result = await api("GET", `/api/answers?question=${encodeURIComponent(state.question.key)}`);
  if (!result.ok) return say(result.data.error, "error");
  const keep = state.current >= 0 && state.answers[state.current] ? state.answers[state.current].key : null;
  state.answers = result.data.answers;
  if (keep) state.current = state.answers.findIndex((answer) => answer.key === keep);
  renderAnswers();
  refreshProgress();
}

function refreshProgress() {
  const counts = {answered: 0, graded: 0, awaiting: 0, blank: 0, missing: 0};
  for (const answer of state.answers) {
    if (answer.status in counts) counts[answer.status] += 1;
    if (answer.mark) counts.graded += 1;
    if (answer.status === "answered" && !answer.mark) counts.awaiting += 1;
  }
  $("progress").textContent = `${counts.graded} of ${state.answers.length} marked · ${counts.awaiting} awaiting` +
    ` · ${counts.blank} blank · ${counts.missing} missing`;
}

function renderRubric() {
  const question = state.question;
  $("question-title").textContent = `${question.key} · ${fmt(question.points)} points`;
  prose($("prompt"), question.prompt);
  prose($("model-text"), question.model_answer || "(no model answer in the question file)");
  prose($("notes-text"), question.notes || "(none)");
  const list = $("criteria");
  list.replaceChildren();
  question.criteria.forEach((criterion, index) => {
    const item = el("li", null, "criterion");
    item.dataset.criterion = criterion.id;
    const head = el("div", null, "criterion-head");
    head.append(el("kbd", String(index + 1)), el("span", criterion.text, "criterion-text"));
    const levels = el("div", null, "levels");
    levels.setAttribute("role", "group");
    levels.setAttribute("aria-label", `points for criterion ${index + 1}`);
    for (const level of criterion.levels) {
      const button = el("button", fmt(level), "level");
      button.type = "button";
      button.dataset.points = String(level);
      button.setAttribute("aria-pressed", "false");
      button.addEventListener("click", () => setCriterion(criterion.id, level));
      levels.append(button);
    }
    item.append(head, levels);
    if (criterion.partial.length) {
      const partial = el("ul", null, "partial");
      for (const credit of criterion.partial) partial.append(el("li", `${fmt(credit.points)}: ${credit.when}`));
      item.append(partial);
    }
    list.append(item);
  });
}

function renderAnswers() {
  const box = $("answers");
  box.replaceChildren();
  state.answers.forEach((answer, index) => box.append(answerCard(answer, index)));
  markCurrent();
}

function answerCard(answer, index) {
  const card = el("article", null, "answer");
  card.id = `answer-${answer.key}`;
  card.dataset.key = answer.key;
  card.dataset.status = answer.status;
  card.tabIndex = -1;
  const head = el("header", null, "answer-head");
  head.append(el("span", answer.label, "label"), el("span", statusLine(answer), "badge"));
  card.append(head);
  let body;
  if (answer.status === "answered") {
    body = el("div", answer.text, "text");
    if (answer.truncated_chars) card.append(el("p", `(${answer.truncated_chars} more characters not shown)`, "note"));
  } else if (answer.status === "blank") {
    body = el("div", "(blank: the cell is as released; it scores 0 without a TA)", "text empty");
  } else if (answer.status === "missing") {
    body = el("div", "(no answer: the notebook was not handed in, or the cell is missing)", "text empty");
  } else {
    body = el("div", `(could not be read: ${answer.problem})`, "text empty");
  }
  card.append(body);
  if (answer.attachments) card.append(el("p", `(${answer.attachments} pasted image(s) not shown)`, "note"));
  card.addEventListener("click", () => select(index));
  return card;
}

function statusLine(answer) {
  const parts = [];
  if (answer.mark) {
    parts.push(`${fmt(answer.mark.points)} / ${fmt(state.question.points)} by ${answer.mark.grader}`);
    if (answer.rubric_changed) parts.push("rubric changed since: review");
  } else if (answer.status === "answered") {
    parts.push("awaiting a mark");
  } else {
    parts.push(answer.status);
  }
  if (answer.claim && answer.claim.grader !== state.grader) parts.push(`${answer.claim.grader} is grading it`);
  return parts.join(" · ");
}

function markCurrent() {
  document.querySelectorAll(".answer").forEach((card, index) => {
    card.classList.toggle("current", index === state.current);
    card.setAttribute("aria-current", index === state.current ? "true" : "false");
  });
}

function updateCard(index) {
  const old = $("answers").children[index];
  if (old) old.replaceWith(answerCard(state.answers[index], index));
  markCurrent();
}

// ------------------------------------------------------------------------------------ one answer

function leaveAllowed() {
  if (state.form && state.form.dirty) {
    say("Unsaved changes: save them (Enter) or discard them (x) first.", "error");
    return false;
  }
  return true;
}

async function select(index) {
  if (index < 0 || index >= state.answers.length) return;
  if (index !== state.current && !leaveAllowed()) return;
  if (state.held && state.held !== state.answers[index].key) await releaseHeld();
  state.current = index;
  const answer = state.answers[index];
  loadForm(answer.mark);
  markCurrent();
  const card = $(`answer-${answer.key}`);
  if (card) { card.scrollIntoView({block: "nearest"}); }
  $("history").open = false;
  await claimCurrent();
}

async function claimCurrent() {
  const answer = state.answers[state.current];
  const result = await api("POST", "/api/claim", {question: state.question.key, answer: answer.key, grader: state.grader});
  clearInterval(state.renewTimer);
  if (result.ok) {
    state.held = answer.key;
    state.readOnly = false;
    answer.claim = {grader: state.grader, expires_in: result.data.claim.expires_in};
    say(answer.mark ? `Marked ${fmt(answer.mark.points)} by ${answer.mark.grader}: change it and save, or move on.` : "");
    const renewEvery = Math.max(5, Math.min(60, state.lab.lease_s / 3)) * 1000;
    state.renewTimer = setInterval(() => renewClaim(answer.key), renewEvery);
  } else {
    state.readOnly = result.status === 409;
    if (result.data.claim) answer.claim = result.data.claim;
    say(result.data.error, "error");
  }
  setReadOnly(state.readOnly);
  updateCard(state.current);
}

async function renewClaim(key) {
  if (state.held !== key) return;
  const result = await api("POST", "/api/claim", {question: state.question.key, answer: key, grader: state.grader});
  if (!result.ok) say(result.data.error, "error");
}

async function releaseHeld() {
  clearInterval(state.renewTimer);
  if (!state.held) return;
  const key = state.held;
  state.held = null;
  await api("POST", "/api/release", {question: state.question.key, answer: key, grader: state.grader});
  const index = state.answers.findIndex((answer) => answer.key === key);
  if (index >= 0) { state.answers[index].claim = null; updateCard(index); }
}

function setReadOnly(readOnly) {
  for (const id of ["adjustment", "comment", "save", "discard"]) $(id).disabled = readOnly;
  document.querySelectorAll(".level").forEach((button) => { button.disabled = readOnly; });
}

function loadForm(mark) {
  const criteria = {};
  for (const criterion of state.question.criteria) {
    criteria[criterion.id] = mark && criterion.id in mark.criteria ? mark.criteria[criterion.id] : 0;
  }
  state.form = {
    criteria, adjustment: mark ? mark.adjustment : 0, comment: mark ? mark.comment : "",
    baseVersion: mark ? mark.version : 0, dirty: false,
  };
  $("adjustment").value = String(state.form.adjustment);
  $("comment").value = state.form.comment;
  renderForm();
}

function renderForm() {
  for (const item of document.querySelectorAll(".criterion")) {
    const given = state.form.criteria[item.dataset.criterion];
    for (const button of item.querySelectorAll(".level")) {
      button.setAttribute("aria-pressed", Number(button.dataset.points) === given ? "true" : "false");
    }
  }
  const total = Object.values(state.form.criteria).reduce((sum, value) => sum + value, 0) + state.form.adjustment;
  $("total").textContent = `Total: ${fmt(total)} / ${fmt(state.question.points)}` + (state.form.dirty ? " (not saved)" : "");
}

function setCriterion(id, points) {
  if (state.readOnly) return;
  state.form.criteria[id] = points;
  state.form.dirty = true;
  renderForm();
}

function cycleCriterion(number) {
  const criterion = state.question.criteria[number - 1];
  if (!criterion || state.readOnly) return;
  const levels = criterion.levels;                       // highest first, 0 last
  const at = levels.indexOf(state.form.criteria[criterion.id]);
  setCriterion(criterion.id, levels[(at + 1) % levels.length]);
}

function clearCriteria() {
  if (state.readOnly) return;
  for (const id of Object.keys(state.form.criteria)) state.form.criteria[id] = 0;
  state.form.dirty = true;
  renderForm();
}

function discard() {
  if (state.current < 0) return;
  loadForm(state.answers[state.current].mark);
  say("Changes discarded.");
}

async function save() {
  if (state.readOnly || state.current < 0) return;
  const answer = state.answers[state.current];
  const body = {
    question: state.question.key, answer: answer.key, grader: state.grader,
    criteria: state.form.criteria, adjustment: state.form.adjustment, comment: state.form.comment,
    expected_version: state.form.baseVersion,
  };
  const result = await api("POST", "/api/marks", body);
  if (!result.ok) {
    if (result.status === 409 && "current" in result.data) {
      answer.mark = result.data.current;     // someone else's newer mark: show it, keep nothing stale
      loadForm(answer.mark);
      updateCard(state.current);
      refreshProgress();
    }
    say(result.data.error, "error");
    return;
  }
  answer.mark = result.data.mark;
  answer.rubric_changed = false;
  state.form.dirty = false;
  updateCard(state.current);
  refreshProgress();
  const saved = `Saved ${fmt(answer.mark.points)} / ${fmt(state.question.points)} for ${answer.label}.`;
  const next = nextAwaiting(state.current);
  if (next < 0) return say(`${saved} Every answer to ${state.question.key} has a mark.`, "ok");
  await select(next);
  if (!state.readOnly) say(saved, "ok");
}

function nextAwaiting(from) {
  const count = state.answers.length;
  for (let step = 1; step <= count; step += 1) {
    const index = (from + step + count) % count;
    const answer = state.answers[index];
    const heldByOther = answer.claim && answer.claim.grader !== state.grader;
    if (answer.status === "answered" && !answer.mark && !heldByOther) return index;
  }
  return -1;
}

async function showHistory() {
  const details = $("history");
  details.open = !details.open;
  if (!details.open || state.current < 0) return;
  const answer = state.answers[state.current];
  const result = await api("GET", `/api/history?question=${encodeURIComponent(state.question.key)}&answer=${answer.key}`);
  const list = $("history-list");
  list.replaceChildren();
  if (!result.ok) { list.append(el("li", result.data.error)); return; }
  if (!result.data.history.length) list.append(el("li", "no mark yet"));
  for (const [index, mark] of result.data.history.entries()) {
    const when = new Date(mark.saved_at * 1000).toLocaleString();
    list.append(el("li", `${index + 1}: ${fmt(mark.points)} points by ${mark.grader}, ${when}` +
      (mark.comment ? ` — “${mark.comment}”` : "")));
  }
}

// ------------------------------------------------------------------------------------ keys

function inField(target) {
  return target && (target.tagName === "TEXTAREA" || target.tagName === "INPUT" || target.tagName === "SELECT");
}

async function onKey(event) {
  if (!$("help").hidden) {
    if (event.key === "Escape" || event.key === "?") { event.preventDefault(); toggleHelp(false); }
    return;
  }
  if ($("workspace").hidden) return;
  if (inField(event.target)) {
    if (event.key === "Escape") { event.target.blur(); event.preventDefault(); }
    else if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); event.target.blur(); await save(); }
    else if (event.key === "Enter" && event.target.id === "adjustment") { event.preventDefault(); event.target.blur(); await save(); }
    return;
  }
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const key = event.key;
  const actions = {
    j: () => select(state.current + 1), ArrowDown: () => select(state.current + 1),
    k: () => select(state.current - 1), ArrowUp: () => select(state.current - 1),
    n: () => { const next = nextAwaiting(state.current); return next >= 0 ? select(next) : say("No answer awaits a mark."); },
    Enter: () => save(), x: () => discard(), 0: () => clearCriteria(),
    c: () => $("comment").focus(), a: () => $("adjustment").focus(),
    p: () => { $("prompt-box").open = !$("prompt-box").open; },
    m: () => { $("model").open = !$("model").open; }, h: () => showHistory(),
    "[": () => switchQuestion(-1), "]": () => switchQuestion(1), r: () => reloadAnswers(), "?": () => toggleHelp(true),
  };
  if (/^[1-9]$/.test(key)) { event.preventDefault(); cycleCriterion(Number(key)); return; }
  if (key in actions) { event.preventDefault(); await actions[key](); }
}

function switchQuestion(delta) {
  const index = state.lab.questions.indexOf(state.question) + delta;
  if (index >= 0 && index < state.lab.questions.length) return openQuestion(index);
}

function toggleHelp(show) {
  $("help").hidden = !show;
  if (show) $("help-close").focus();
}

// ------------------------------------------------------------------------------------ wiring

document.addEventListener("DOMContentLoaded", () => {
  document.addEventListener("keydown", (event) => { onKey(event); });
  $("question").addEventListener("change", (event) => {
    const index = Number(event.target.value);
    if (!leaveAllowed()) { event.target.value = String(state.lab.questions.indexOf(state.question)); return; }
    openQuestion(index);
  });
  $("adjustment").addEventListener("input", (event) => {
    const value = Number(event.target.value);
    state.form.adjustment = Number.isFinite(value) ? value : 0;
    state.form.dirty = true;
    renderForm();
  });
  $("comment").addEventListener("input", (event) => {
    state.form.comment = event.target.value;
    state.form.dirty = true;
    renderForm();
  });
  $("save").addEventListener("click", () => save());
  $("discard").addEventListener("click", () => discard());
  $("help-button").addEventListener("click", () => toggleHelp(true));
  $("help-close").addEventListener("click", () => toggleHelp(false));
  $("signin").addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = $("grader-name").value.trim();
    if (!name) return;
    state.grader = name;
    localStorage.setItem("course-mark-grader", name);
    await begin();
  });
  window.addEventListener("pagehide", () => {
    if (!state.held) return;
    // Best effort: give the claim back when the tab closes (it also expires by itself).
    fetch("/api/release", {method: "POST", keepalive: true,
      headers: {"X-Marking-Token": state.token, "Content-Type": "application/json"},
      body: JSON.stringify({question: state.question.key, answer: state.held, grader: state.grader})});
  });
  start();
});
