// Server-sent events read with fetch (not EventSource), so a page sees HTTP errors and their bodies.
// Shared by the chat page (chat.js) and the engine view (engine.js).

/** Yield the data of each event in ``response``'s body, as text ("[DONE]" stays a string). */
export async function* readEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
      if (data) yield data;
    }
  }
}

/** The server's explanation of a failed response: OpenAI's {"error": {"message"}}, or its text. */
export async function errorMessage(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body && body.error && body.error.message) return body.error.message;
    if (body && body.detail) return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  } catch (_) { /* not JSON: the text itself */ }
  return text.trim() || response.statusText || "no explanation given";
}

/** Format seconds for people: 0.042 -> "42 ms", 1.5 -> "1.50 s". */
export function seconds(value) {
  if (value === null || value === undefined || !isFinite(value)) return "–";
  return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(2)} s`;
}

/** document.createElement with attributes and children (strings become text, never HTML). */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name === "style") node.style.cssText = value;   // CSSOM: allowed by the pages' CSP, a style attribute is not
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
