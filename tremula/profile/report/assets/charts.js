/* Canvas charts: stacked bars over tiles, line charts over steps, the tile heat map, and a
   proportion bar. Each chart maps a click back to a tile or a step. */
"use strict";

R.canvas = (width, height) => {
  const ratio = window.devicePixelRatio || 1;
  const canvas = R.el("canvas", { width: Math.round(width * ratio), height: Math.round(height * ratio),
    style: `width:${width}px;height:${height}px` });
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  return { canvas, ctx, width, height };
};
R.chartWidth = (host) => Math.max(480, Math.min(1400, (host && host.clientWidth) || document.body.clientWidth - 80));
R.mouse = (canvas, event) => {
  const box = canvas.getBoundingClientRect();
  return [event.clientX - box.left, event.clientY - box.top];
};
const AXIS = 64; // left margin for the value axis

function axis(ctx, width, height, top, max, format) {
  ctx.fillStyle = "#5c6577";
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "right";
  for (const f of [0, 0.5, 1]) {
    const y = top + (1 - f) * height;
    ctx.fillText(format(max * f), AXIS - 6, y + 4);
    ctx.strokeStyle = "#eef0f3";
    ctx.beginPath(); ctx.moveTo(AXIS, y + 0.5); ctx.lineTo(width, y + 0.5); ctx.stroke();
  }
}

/* Stacked bars, one per tile. series: [{label, color, values}]; limit: a horizontal line. */
R.tileBars = ({ series, numTiles, limit, height = 260, onClick, describe }) => {
  const c = R.canvas(R.chartWidth(), height);
  const top = 8, bottom = 22, plotH = height - top - bottom;
  const plotW = c.width - AXIS - 8;
  const step = plotW / numTiles;
  let selected = -1;
  const chart = { canvas: c.canvas, series };
  chart.tileAt = (x) => Math.floor((x - AXIS) / step);
  chart.xOf = (tile) => AXIS + (tile + 0.5) * step;
  chart.draw = () => {
    const { ctx } = c;
    ctx.clearRect(0, 0, c.width, c.height);
    const totals = new Float64Array(numTiles);
    for (const s of chart.series) for (let t = 0; t < numTiles; t++) totals[t] += s.values[t] || 0;
    let max = 1;
    for (const v of totals) if (v > max) max = v;
    max *= 1.05; // the scale follows the data; the limit line shows when it is in range
    chart.limitShown = !!limit && limit <= max * 1.5;
    if (chart.limitShown) max = Math.max(max, limit * 1.02);
    axis(ctx, c.width, plotH, top, max, R.kib);
    const base = new Float64Array(numTiles);
    for (const s of chart.series) {
      ctx.fillStyle = s.color;
      for (let t = 0; t < numTiles; t++) {
        const v = s.values[t] || 0;
        if (!v) continue;
        const y0 = top + plotH * (1 - base[t] / max), h = (plotH * v) / max;
        ctx.fillRect(AXIS + t * step, y0 - h, Math.max(step, 0.6), h);
        base[t] += v;
      }
    }
    if (chart.limitShown) {
      const y = top + plotH * (1 - limit / max);
      ctx.strokeStyle = "#c62828"; ctx.setLineDash([4, 3]);
      ctx.beginPath(); ctx.moveTo(AXIS, y); ctx.lineTo(c.width, y); ctx.stroke(); ctx.setLineDash([]);
    }
    ctx.fillStyle = "#5c6577";
    for (const [t, align] of [[0, "left"], [Math.floor(numTiles / 2), "center"], [numTiles - 1, "right"]]) {
      ctx.textAlign = align;
      ctx.fillText("tile " + t, chart.xOf(t), height - 6);
    }
    if (selected >= 0) {
      ctx.strokeStyle = "#1d2330";
      ctx.beginPath(); ctx.moveTo(chart.xOf(selected), top); ctx.lineTo(chart.xOf(selected), top + plotH); ctx.stroke();
    }
  };
  chart.select = (tile) => { selected = tile; chart.draw(); };
  c.canvas.addEventListener("mousemove", (ev) => {
    const t = chart.tileAt(R.mouse(c.canvas, ev)[0]);
    if (t >= 0 && t < numTiles) R.tooltip.show(ev.clientX, ev.clientY, describe(t)); else R.tooltip.hide();
  });
  c.canvas.addEventListener("mouseleave", () => R.tooltip.hide());
  c.canvas.addEventListener("click", (ev) => {
    const t = chart.tileAt(R.mouse(c.canvas, ev)[0]);
    if (t >= 0 && t < numTiles) onClick(t);
  });
  chart.draw();
  return chart;
};

/* Lines over an index (program steps). series: [{label, color, values}]; marks: indices. */
R.lineChart = ({ series, height = 260, onClick, describe, format = R.kib }) => {
  const c = R.canvas(R.chartWidth(), height);
  const top = 8, bottom = 22, plotH = height - top - bottom, plotW = c.width - AXIS - 8;
  const n = Math.max(1, ...series.map((s) => s.values.length));
  const chart = { canvas: c.canvas, marks: [] };
  chart.xOf = (i) => AXIS + (n > 1 ? (i / (n - 1)) * plotW : plotW / 2);
  chart.indexAt = (x) => Math.max(0, Math.min(n - 1, Math.round(((x - AXIS) / plotW) * (n - 1))));
  chart.draw = () => {
    const { ctx } = c;
    ctx.clearRect(0, 0, c.width, c.height);
    let max = 1;
    for (const s of series) for (const v of s.values) if (v > max) max = v;
    axis(ctx, c.width, plotH, top, max, format);
    for (const s of series) {
      ctx.strokeStyle = s.color; ctx.lineWidth = 1.5; ctx.beginPath();
      s.values.forEach((v, i) => {
        const x = chart.xOf(i), y = top + plotH * (1 - v / max);
        if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      });
      ctx.stroke();
    }
    ctx.lineWidth = 1;
    ctx.fillStyle = "#5c6577";
    for (const [i, align] of [[0, "left"], [Math.floor((n - 1) / 2), "center"], [n - 1, "right"]]) {
      ctx.textAlign = align;
      ctx.fillText("step " + i, chart.xOf(i), height - 6);
    }
    chart.marks.forEach((i, k) => {
      ctx.strokeStyle = k ? "#d62728" : "#1d2330";
      ctx.beginPath(); ctx.moveTo(chart.xOf(i), top); ctx.lineTo(chart.xOf(i), top + plotH); ctx.stroke();
    });
  };
  chart.mark = (indices) => { chart.marks = indices; chart.draw(); };
  c.canvas.addEventListener("mousemove", (ev) =>
    R.tooltip.show(ev.clientX, ev.clientY, describe(chart.indexAt(R.mouse(c.canvas, ev)[0]))));
  c.canvas.addEventListener("mouseleave", () => R.tooltip.hide());
  c.canvas.addEventListener("click", (ev) => onClick(chart.indexAt(R.mouse(c.canvas, ev)[0]), ev));
  chart.draw();
  return chart;
};

/* The tile map: each IPU as two halves of columns of up to 16 tiles, IPUs side by side. */
R.tileLayout = (tilesPerIPU, numIPUs, cell) => {
  const half = Math.ceil(tilesPerIPU / 2);
  const rows = Math.min(16, half), cols = Math.ceil(half / rows), gap = 1;
  const ipuW = (cols + 1) * cell; // a column of space between IPUs
  return {
    top: 14, // room for the IPU labels
    width: numIPUs * ipuW, height: (2 * rows + gap) * cell + 16,
    /* The top-left corner of a tile's cell. */
    cell: (tile) => {
      const ipu = Math.floor(tile / tilesPerIPU), t = tile % tilesPerIPU;
      const h = t < half ? 0 : 1, i = t - h * half;
      return [ipu * ipuW + Math.floor(i / rows) * cell, 14 + (h * (rows + gap) + (i % rows)) * cell];
    },
  };
};
R.heatMap = ({ values, capacity, limit = Infinity, tilesPerIPU, numTiles, onClick, describe }) => {
  const numIPUs = Math.max(1, Math.round(numTiles / tilesPerIPU));
  const cell = tilesPerIPU > 256 ? 9 : 18;
  const layout = R.tileLayout(tilesPerIPU, numIPUs, cell);
  const c = R.canvas(layout.width, layout.height);
  const map = { canvas: c.canvas, selected: -1, capacity };
  const lookup = new Map();
  map.center = (tile) => { const [x, y] = layout.cell(tile); return [x + cell / 2, y + cell / 2]; };
  map.draw = () => {
    const { ctx } = c;
    ctx.clearRect(0, 0, c.width, c.height);
    ctx.fillStyle = "#5c6577"; ctx.font = "11px system-ui, sans-serif";
    for (let ipu = 0; ipu < numIPUs; ipu++) ctx.fillText("IPU " + ipu, layout.cell(ipu * tilesPerIPU)[0], 10);
    for (let t = 0; t < numTiles; t++) {
      const [x, y] = layout.cell(t);
      lookup.set(Math.round(x / cell) + "," + Math.round((y - layout.top) / cell), t);
      ctx.fillStyle = values[t] > limit ? R.heat(2) : R.heat(Math.min(1, values[t] / map.capacity));
      ctx.fillRect(x, y, cell - 1, cell - 1);
    }
    if (map.selected >= 0) {
      const [x, y] = layout.cell(map.selected);
      ctx.strokeStyle = "#f28e2b"; ctx.lineWidth = 2; ctx.strokeRect(x - 1, y - 1, cell + 1, cell + 1); ctx.lineWidth = 1;
    }
  };
  map.tileAt = (x, y) => lookup.get(Math.floor(x / cell) + "," + Math.floor((y - layout.top) / cell));
  map.select = (tile) => { map.selected = tile; map.draw(); };
  c.canvas.addEventListener("mousemove", (ev) => {
    const t = map.tileAt(...R.mouse(c.canvas, ev));
    if (t != null) R.tooltip.show(ev.clientX, ev.clientY, describe(t)); else R.tooltip.hide();
  });
  c.canvas.addEventListener("mouseleave", () => R.tooltip.hide());
  c.canvas.addEventListener("click", (ev) => {
    const t = map.tileAt(...R.mouse(c.canvas, ev));
    if (t != null) onClick(t);
  });
  map.draw();
  return map;
};

/* A horizontal bar split into parts [{label, value, color}] of a whole. */
R.proportions = (parts, whole) =>
  R.el("div", {},
    R.el("div", { class: "bar" }, parts.filter((p) => p.value > 0).map((p) =>
      R.el("div", { style: `width:${(100 * p.value) / whole}%;background:${p.color}`,
        title: `${p.label}: ${R.pct(p.value / whole)}` }))),
    R.legend(parts.map((p) => [`${p.label} ${R.pct(whole ? p.value / whole : 0)}`, p.color])));
