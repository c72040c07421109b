// Small SVG plots (no library): a line of points and grouped bars, each with its numbers in a
// table beside it for whoever would rather read them.

import { h } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const W = 640;
const H = 200;
const PAD = { left: 56, right: 12, top: 12, bottom: 28 };

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function frame(id, title, max, format, firstLabel, lastLabel) {
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": `${id}-title`, class: "plot" });
  svg.append(s("title", { id: `${id}-title` }, title));
  const bottom = H - PAD.bottom;
  svg.append(s("line", { x1: PAD.left, y1: bottom, x2: W - PAD.right, y2: bottom, class: "axis" }));
  svg.append(s("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: bottom, class: "axis" }));
  svg.append(s("text", { x: PAD.left - 6, y: PAD.top + 10, "text-anchor": "end", class: "tick" }, format(max)));
  svg.append(s("text", { x: PAD.left - 6, y: bottom, "text-anchor": "end", class: "tick" }, format(0)));
  svg.append(s("text", { x: PAD.left, y: H - 8, class: "tick" }, firstLabel));
  svg.append(s("text", { x: W - PAD.right, y: H - 8, "text-anchor": "end", class: "tick" }, lastLabel));
  return svg;
}

function table(caption, columns, rows) {
  return h(
    "details",
    { class: "numbers" },
    h("summary", {}, `${caption}: the numbers`),
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.map((r) => h("tr", {}, r.map((v) => h("td", {}, v))))),
    ),
  );
}

export function lineChart({ id, title, labels, values, format = String }) {
  const max = Math.max(1, ...values);
  const svg = frame(id, title, max, format, labels[0] ?? "", labels[labels.length - 1] ?? "");
  const x = (i) => PAD.left + ((W - PAD.left - PAD.right) * (values.length === 1 ? 0.5 : i / (values.length - 1)));
  const y = (v) => H - PAD.bottom - ((H - PAD.top - PAD.bottom) * v) / max;
  if (values.length) {
    svg.append(s("polyline", { points: values.map((v, i) => `${x(i)},${y(v)}`).join(" "), class: "line" }));
  }
  return h(
    "figure",
    { class: "chart" },
    h("figcaption", {}, title),
    svg,
    table(title, ["", "value"], labels.map((l, i) => [l, format(values[i])])),
  );
}

export function barChart({ id, title, labels, series, format = String }) {
  const max = Math.max(1, ...series.flatMap((one) => one.values));
  const svg = frame(id, title, max, format, labels[0] ?? "", labels[labels.length - 1] ?? "");
  const slot = (W - PAD.left - PAD.right) / Math.max(1, labels.length);
  const bar = Math.max(1, (slot * 0.8) / series.length);
  series.forEach((one, n) => {
    one.values.forEach((v, i) => {
      const height = ((H - PAD.top - PAD.bottom) * v) / max;
      svg.append(
        s("rect", { x: PAD.left + i * slot + n * bar + slot * 0.1, y: H - PAD.bottom - height, width: bar, height, class: one.class }),
      );
    });
  });
  const legend = h("ul", { class: "legend" }, series.map((one) => h("li", { class: one.class }, one.name)));
  const rows = labels.map((l, i) => [l, ...series.map((one) => format(one.values[i]))]);
  return h("figure", { class: "chart" }, h("figcaption", {}, title), svg, legend, table(title, ["day", ...series.map((x) => x.name)], rows));
}
