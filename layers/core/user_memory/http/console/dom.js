// Building the page: every text goes in as a text node, never as markup (memory content is data).

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, ...children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

// Times as UTC text, the same on every machine.
export function when(value) {
  if (!value) return "";
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return String(value);
  return d.toISOString().slice(0, 16).replace("T", " ") + " UTC";
}

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

// A JSON Pointer as words: /parts/p1/goals/0 -> parts › p1 › goals › 0
export function pointerWords(pointer) {
  if (!pointer) return "(whole document)";
  return pointer
    .split("/")
    .slice(1)
    .map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"))
    .join(" › ");
}

export function short(value, max = 160) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  if (text === undefined) return "(nothing)";
  return text.length > max ? text.slice(0, max) + "…" : text;
}
