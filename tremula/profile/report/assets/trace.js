/* Execution trace view: program steps on a zoomable timeline, one group of lanes per IPU
   (compute, exchange, sync, stream copy); a step's details and cycles by tile on click. */
"use strict";

R.LANES = ["Compute", "Exchange", "Sync", "StreamCopy"];
R.REF_KEYS = { OnTileExecute: "computeSet", DoExchange: "exchange", GlobalExchange: "externalExchange", StreamCopy: "hostExchange" };

/* Cycles per lane inside [a, b) (steps clipped to the window). */
R.laneCycles = (ex, a, b) => {
  const out = Object.fromEntries(R.LANES.map((l) => [l, 0]));
  const s = ex.steps;
  for (let i = 0; i < s.from.length; i++) {
    const lo = Math.max(a, s.from[i]), hi = Math.min(b, s.from[i] + s.cycles[i]);
    if (hi > lo) out[ex.lanes[ex.types[s.type[i]]]] += hi - lo;
  }
  return out;
};

R.views.push({
  id: "trace",
  title: "Execution trace",
  available: (data) => !!data.report.execution,
  render(host, data) {
    const ex = data.report.execution, s = ex.steps, n = s.from.length;
    const end = Math.max(ex.cycles, ...s.from.map((f, i) => f + s.cycles[i]), 1);
    const laneH = 18, top = 20, ipus = ex.numIPUs;
    const c = R.canvas(R.chartWidth(), top + ipus * (R.LANES.length * laneH + 10) + 8);
    c.canvas.id = "trace-canvas";
    const W = c.width - 110;
    const view = { a: 0, b: end };
    let selected = -1;
    const range = R.el("span", { id: "trace-range", class: "mono" });
    const props = R.el("div", { id: "trace-proportions" });
    const detail = R.el("section", { class: "panel", id: "step-detail" }, R.note("Click a step for its details and its cycles by tile."));
    const xOf = (cycle) => 110 + ((cycle - view.a) / (view.b - view.a)) * W;
    const rowOf = (ipu, lane) => top + ipu * (R.LANES.length * laneH + 10) + R.LANES.indexOf(lane) * laneH;
    const draw = () => {
      const { ctx } = c;
      ctx.clearRect(0, 0, c.width, c.height);
      ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "left";
      for (let ipu = 0; ipu < ipus; ipu++)
        R.LANES.forEach((lane) => {
          ctx.fillStyle = "#5c6577";
          ctx.fillText(`IPU ${ipu} ${lane}`, 4, rowOf(ipu, lane) + 13);
          ctx.fillStyle = "#f3f5f8"; ctx.fillRect(110, rowOf(ipu, lane) + 1, W, laneH - 2);
        });
      for (let i = 0; i < n; i++) {
        const f = s.from[i], t = f + s.cycles[i];
        if (t < view.a || f > view.b) continue;
        const lane = ex.lanes[ex.types[s.type[i]]];
        const x0 = Math.max(110, xOf(f)), x1 = Math.min(110 + W, xOf(t));
        ctx.fillStyle = i === selected ? "#1d2330" : R.laneColors[lane];
        for (let ipu = 0; ipu < ipus; ipu++)
          if (s.ipus[i] & (1 << ipu) || ipu >= 31) ctx.fillRect(x0, rowOf(ipu, lane) + 2, Math.max(1, x1 - x0), laneH - 4);
      }
      ctx.fillStyle = "#5c6577";
      ctx.textAlign = "left"; ctx.fillText(R.int(view.a), 110, 12);
      ctx.textAlign = "right"; ctx.fillText(R.int(view.b) + " cycles", c.width - 2, 12);
      range.textContent = `cycles ${R.int(view.a)} – ${R.int(view.b)} (${R.time((view.b - view.a) / ex.clockFrequency)})`;
      range.dataset.start = view.a; range.dataset.end = view.b;
      const lanes = R.laneCycles(ex, view.a, view.b);
      const whole = Object.values(lanes).reduce((x, y) => x + y, 0) || 1;
      props.replaceChildren(R.proportions(R.LANES.map((l) => ({ label: l, value: lanes[l], color: R.laneColors[l] })), whole));
    };
    const zoom = (factor, at) => {
      const centre = at == null ? (view.a + view.b) / 2 : at;
      const span = Math.max(4, Math.min(end, (view.b - view.a) * factor));
      let a = centre - ((centre - view.a) / (view.b - view.a)) * span;
      a = Math.max(0, Math.min(end - span, a));
      view.a = a; view.b = a + span;
      draw();
    };
    const cycleAt = (x) => view.a + ((x - 110) / W) * (view.b - view.a);
    const stepAt = (x, y) => {
      const cycle = cycleAt(x);
      for (let ipu = 0; ipu < ipus; ipu++)
        for (const lane of R.LANES) {
          const row = rowOf(ipu, lane);
          if (y < row || y >= row + laneH) continue;
          const tol = (2 * (view.b - view.a)) / W;
          for (let i = 0; i < n; i++)
            if (ex.lanes[ex.types[s.type[i]]] === lane && (s.ipus[i] & (1 << ipu) || ipu >= 31) &&
                s.from[i] - tol <= cycle && cycle <= s.from[i] + s.cycles[i] + tol) return i;
        }
      return -1;
    };
    const showStep = (i) => {
      selected = i; draw();
      const type = ex.types[s.type[i]], key = R.REF_KEYS[type];
      const row = key && ex.tileRows[key] ? ex.tileRows[key][String(s.ref[i])] : null;
      const parts = [R.el("h2", { text: `Step ${i}: ${ex.names[s.name[i]]}` }), R.kv([
        ["Type", type], ["Program", R.programLabel(data.report.programs, s.program[i])],
        ["Cycles", R.int(s.cycles[i]), "step-cycles"],
        ["From – to", `${R.int(s.from[i])} – ${R.int(s.from[i] + s.cycles[i])}`],
        ["Tile balance", R.pct(s.tileBalance[i])], ["Active tiles", R.int(s.activeTiles[i])],
        s.totalData[i] ? ["Data", R.bytes(s.totalData[i])] : null,
        key ? [key, R.int(s.ref[i])] : null,
      ])];
      if (row) {
        const chart = R.tileBars({ series: [{ label: "cycles", color: R.laneColors[ex.lanes[type]], values: row }],
          numTiles: row.length, height: 180, onClick: () => {}, describe: (t) => `tile ${t}: ${R.int(row[t])} cycles` });
        chart.canvas.id = "step-tile-cycles";
        const busy = row.reduce((a, b) => a + b, 0), whole = s.cycles[i] * row.length || 1;
        parts.push(R.el("h3", { text: "Tile time in this step" }),
          R.proportions([{ label: ex.lanes[type], value: Math.min(busy, whole), color: R.laneColors[ex.lanes[type]] },
            { label: "idle or waiting", value: Math.max(0, whole - busy), color: "#e9edf3" }], whole),
          R.el("h3", { text: "Cycles by tile" }), chart.canvas);
      }
      detail.replaceChildren(...parts);
    };
    let drag = null;
    c.canvas.addEventListener("wheel", (ev) => { ev.preventDefault(); zoom(ev.deltaY < 0 ? 0.8 : 1.25, cycleAt(R.mouse(c.canvas, ev)[0])); }, { passive: false });
    c.canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, a: view.a, b: view.b, moved: false }; });
    window.addEventListener("mouseup", () => { setTimeout(() => { drag = null; }, 0); });
    c.canvas.addEventListener("mousemove", (ev) => {
      const [x, y] = R.mouse(c.canvas, ev);
      if (drag && ev.buttons) {
        const shift = ((drag.x - ev.clientX) / W) * (drag.b - drag.a);
        if (Math.abs(drag.x - ev.clientX) > 3) drag.moved = true;
        const a = Math.max(0, Math.min(end - (drag.b - drag.a), drag.a + shift));
        view.b = a + (drag.b - drag.a); view.a = a; draw();
        return;
      }
      const i = stepAt(x, y);
      if (i >= 0) R.tooltip.show(ev.clientX, ev.clientY, `${ex.names[s.name[i]]}: ${R.int(s.cycles[i])} cycles`); else R.tooltip.hide();
    });
    c.canvas.addEventListener("mouseleave", () => R.tooltip.hide());
    c.canvas.addEventListener("click", (ev) => {
      if (drag && drag.moved) return;
      const i = stepAt(...R.mouse(c.canvas, ev));
      if (i >= 0) showStep(i);
    });
    R.trace = { zoom, view, showStep, xOf, rowOf, canvas: c.canvas }; // for tests and the console
    const capped = ex.numSteps > n ? R.note(`Showing the first ${R.int(n)} of ${R.int(ex.numSteps)} steps.`) : null;
    host.append(R.panel("Execution trace",
      R.el("div", { class: "controls" },
        R.el("button", { class: "small", id: "trace-zoom-in", onclick: () => zoom(0.5) }, "Zoom in"),
        R.el("button", { class: "small", id: "trace-zoom-out", onclick: () => zoom(2) }, "Zoom out"),
        R.el("button", { class: "small", id: "trace-reset", onclick: () => { view.a = 0; view.b = end; draw(); } }, "Reset"),
        range, R.el("span", { class: "muted" }, "wheel: zoom, drag: pan, click: step")),
      c.canvas, R.legend(R.LANES.map((l) => [l, R.laneColors[l]])), capped,
      R.el("h3", { text: "Cycle proportions of the visible steps" }), props), detail);
    draw();
  },
});
