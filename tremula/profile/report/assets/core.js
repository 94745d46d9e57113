/* Tremula profile report: data decoding, formatting, DOM helpers, tabs and start-up.
   Hand-written; no library. Every view registers itself in R.views and is drawn the first
   time its tab is shown. */
"use strict";
const R = (window.tremulaReport = { views: [], errors: [], rendered: {} });

/* ---- formatting ---- */
R.int = (n) => (n == null || Number.isNaN(n) ? "–" : Math.round(n).toLocaleString("en-US"));
R.bytes = (n) => R.int(n) + " B";
R.kib = (n) => {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(Math.round(n))) + " " + units[i];
};
R.pct = (x, digits = 1) => (x == null || !isFinite(x) ? "–" : (100 * x).toFixed(digits) + "%");
R.time = (seconds) => {
  if (!isFinite(seconds)) return "–";
  if (seconds >= 1) return seconds.toFixed(3) + " s";
  if (seconds >= 1e-3) return (seconds * 1e3).toFixed(3) + " ms";
  return (seconds * 1e6).toFixed(2) + " µs";
};

/* ---- DOM ---- */
R.el = (tag, attrs, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value == null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "style") node.style.cssText = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child == null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
};
R.panel = (title, ...children) => R.el("section", { class: "panel" }, R.el("h2", { text: title }), ...children);
/* A two-column table of [label, value, id?] rows. */
R.kv = (rows) =>
  R.el("table", { class: "kv" },
    rows.filter(Boolean).map(([label, value, id]) =>
      R.el("tr", {}, R.el("td", { text: label }), R.el("td", { class: "num", id }, value))));
/* A table: columns [{title, num?, key?}], rows as arrays of cells (text or nodes). */
R.table = (columns, rows, attrs) =>
  R.el("table", attrs || {},
    R.el("thead", {}, R.el("tr", {}, columns.map((c) =>
      R.el("th", { class: c.num ? "num" : "", title: c.help }, c.title)))),
    R.el("tbody", {}, rows.map((cells) =>
      R.el("tr", {}, cells.map((cell, i) => R.el("td", { class: columns[i].num ? "num" : "" }, cell))))));
R.legend = (items) =>
  R.el("div", { class: "legend" }, items.map(([label, color]) => R.el("span", { style: `--c:${color}` }, label)));
R.note = (text) => R.el("p", { class: "muted" }, text);

/* ---- colours ---- */
R.palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
  "#ff9da7", "#9c755f", "#bab0ac", "#2f4b7c", "#a05195", "#d45087", "#f95d6a", "#665191",
  "#ffa600", "#003f5c", "#7a5195", "#ef5675", "#00876c", "#89c079", "#d43d51", "#488f31",
  "#de425b", "#5886a5"];
R.laneColors = { Compute: "#4e79a7", Exchange: "#f28e2b", Sync: "#bab0ac", StreamCopy: "#59a14f" };
/* A sequential scale from 0 (pale) to 1 (dark); above 1 is red (over the tile's memory). */
R.heat = (x) => {
  if (!(x > 0)) return "#eef1f5";
  if (x > 1) return "#d62728";
  const stops = [[239, 243, 250], [158, 202, 225], [66, 146, 198], [8, 48, 107]];
  const f = Math.min(x, 1) * (stops.length - 1);
  const i = Math.min(Math.floor(f), stops.length - 2);
  const t = f - i;
  const c = stops[i].map((v, k) => Math.round(v + t * (stops[i + 1][k] - v)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
};

/* ---- tooltip ---- */
R.tooltip = (() => {
  let tip = null;
  return {
    show(x, y, text) {
      if (!tip) { tip = R.el("div", { class: "tooltip" }); document.body.append(tip); }
      tip.textContent = text;
      tip.style.display = "block";
      tip.style.left = Math.min(x + 14, window.innerWidth - 300) + "px";
      tip.style.top = y + 14 + "px";
    },
    hide() { if (tip) tip.style.display = "none"; },
  };
})();

/* ---- errors: shown on the page, counted for tests ---- */
R.fail = (where, error) => {
  const text = `${where}: ${error && error.message ? error.message : error}`;
  R.errors.push(text);
  document.body.dataset.errors = String(R.errors.length);
  R.showWarnings([text], "Page error");
  console.error(text, error);
};
window.addEventListener("error", (ev) => R.fail("script", ev.error || ev.message));

R.showWarnings = (lines, title) => {
  if (!lines.length) return;
  const box = document.getElementById("warnings");
  box.hidden = false;
  box.append(R.el("h2", { text: title }), R.el("ul", {}, lines.map((line) => R.el("li", { text: line }))));
};

/* ---- data ---- */
R.decode = async () => {
  const node = document.getElementById("tremula-data");
  const text = node.textContent.trim();
  if (node.dataset.encoding === "json") return JSON.parse(text);
  if (typeof DecompressionStream === "undefined")
    throw new Error("this browser cannot decompress the report's data (no DecompressionStream); " +
      "open it in a current Chrome, Edge, Firefox or Safari");
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return JSON.parse(await new Response(stream).text());
};

/* ---- tabs ---- */
R.show = (id) => {
  for (const view of R.views) {
    const active = view.id === id;
    view.button.classList.toggle("active", active);
    view.section.classList.toggle("active", active);
    if (active && !R.rendered[id]) {
      R.rendered[id] = true;
      try { view.render(view.section, R.data); } catch (error) { R.fail(`${view.title} view`, error); }
    }
  }
  R.current = id;
  document.body.dataset.view = id;
};

R.start = async () => {
  const t0 = performance.now();
  try {
    R.data = await R.decode();
  } catch (error) {
    R.fail("loading the report data", error);
    document.body.dataset.ready = "error";
    return;
  }
  const data = R.data;
  document.getElementById("source").textContent =
    data.report.source + (data.compare ? `  vs  ${data.compare.source}` : "");
  const warnings = data.report.warnings.concat(data.compare ? data.compare.warnings.map((w) => "compare: " + w) : []);
  R.showWarnings(warnings, `Warnings (${warnings.length}): some views may be incomplete`);
  const nav = document.getElementById("tabs");
  const main = document.getElementById("views");
  for (const view of R.views) {
    view.section = R.el("div", { class: "view", id: "view-" + view.id });
    const available = view.available(data);
    view.button = R.el("button", { id: "tab-" + view.id, onclick: () => R.show(view.id), disabled: !available,
      title: available ? "" : "not in this report" }, view.title);
    nav.append(view.button);
    main.append(view.section);
  }
  R.show("summary");
  R.loadMs = performance.now() - t0;
  document.body.dataset.ready = "1";
};
document.addEventListener("DOMContentLoaded", R.start);
