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

// "1 version", "2 versions"
export function plural(n, word) {
  return `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

// `value` with its objects' keys in `template`'s order (keys `template` lacks after them, as they
// come): what the editor wrote keeps its shape after the database hands it back.
export function orderLike(value, template) {
  if (Array.isArray(value)) return value.map((v, i) => orderLike(v, Array.isArray(template) ? template[i] : undefined));
  if (!isObject(value)) return value;
  const known = isObject(template) ? Object.keys(template).filter((k) => Object.hasOwn(value, k)) : [];
  const keys = [...known, ...Object.keys(value).filter((k) => !known.includes(k))];
  return Object.fromEntries(keys.map((k) => [k, orderLike(value[k], isObject(template) ? template[k] : undefined)]));
}

// -- a memory document as a person reads it: sections as headings, collections as cards titled by
// their name, lists as lists, fields as label and value; every text a text node.

const TITLES = ["name", "title", "goal", "text", "summary", "topic", "trigger", "label", "description"];

export function words(key) {
  const text = String(key).replaceAll("_", " ");
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function titleOf(value) {
  if (!isObject(value)) return null;
  const field = TITLES.find((k) => typeof value[k] === "string" && value[k].trim());
  return field ? [field, value[field]] : null;
}

function isEmpty(value) {
  return value === null || value === undefined || value === "" || (Array.isArray(value) && !value.length) || (isObject(value) && !Object.keys(value).length);
}

const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/;

function scalar(value) {
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "number") return value.toLocaleString("en");
  if (typeof value === "string" && TIMESTAMP.test(value)) return when(value);
  return String(value);
}

function readable(value, level) {
  if (isEmpty(value)) return h("span", { class: "empty" }, "none");
  if (Array.isArray(value)) {
    return h("ul", { class: "items" }, value.map((v) => h("li", {}, isObject(v) ? entry(v, level) : readable(v, level + 1))));
  }
  if (!isObject(value)) return h("span", { class: "text" }, scalar(value));
  const members = Object.entries(value);
  // A collection keyed by id (parts, goals, to-dos): one card each, titled by its name.
  if (members.every(([, v]) => isObject(v))) {
    return h("div", { class: "cards" }, members.map(([id, v]) => card(id, v, level)));
  }
  return fields(value, level);
}

// Only the fields that hold something: a person reads what is known, not the schema's blanks.
function fields(value, level, skip = null, id = null) {
  const rows = Object.entries(value).filter(([k, v]) => k !== skip && !isEmpty(v) && !(k === "id" && v === id));
  if (!rows.length) return skip === null ? h("span", { class: "empty" }, "none") : "";
  return h("dl", { class: "fields" }, rows.map(([k, v]) => [h("dt", {}, words(k)), h("dd", {}, readable(v, level + 1))]));
}

function entry(value, level) {
  const title = titleOf(value);
  if (!title) return fields(value, level);
  return [h("strong", {}, title[1]), fields(value, level, title[0])];
}

function card(id, value, level) {
  const title = titleOf(value);
  const heading = h(level < 2 ? "h5" : "h6", {}, title ? title[1] : words(id));
  // The id the collection is keyed by is the card's address, not something a person reads.
  return h("article", { class: "card", "aria-label": title ? title[1] : words(id) }, heading, fields(value, level, title && title[0], id));
}

export function readableDocument(document) {
  const sections = Object.entries(document || {});
  if (!sections.length) return h("p", { class: "empty" }, "Nothing remembered yet.");
  return h("div", { class: "readable" }, sections.map(([key, value]) => {
    const id = `section-${key.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    return h("section", { class: "section", "aria-labelledby": id }, h("h4", { id }, words(key)), readable(value, 0));
  }));
}
