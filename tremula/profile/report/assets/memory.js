/* Memory view: per-tile bars by category or region (with or without gaps), the tile map,
   and a tile's breakdown on click. */
"use strict";

/* Variables on a tile, largest first: [{name, bytes, alwaysLive}] (needs the variable table). */
R.tileVariables = (vars, tile) => {
  const out = [];
  if (!vars || !vars.tileRuns) return out;
  vars.tileRuns.forEach((runs, v) => {
    for (let k = 0; k < runs.length; k += 3)
      if (tile >= runs[k] && tile < runs[k] + runs[k + 1]) out.push({ index: v, name: vars.names[v], bytes: runs[k + 2], alwaysLive: vars.alwaysLive[v] });
  });
  return out.sort((a, b) => b.bytes - a.bytes);
};
/* A variable's bytes on every tile, from its tile runs. */
R.variableTiles = (vars, v, numTiles) => {
  const out = new Float64Array(numTiles), runs = vars.tileRuns[v];
  for (let k = 0; k < runs.length; k += 3) out.fill(runs[k + 2], runs[k], runs[k] + runs[k + 1]);
  return out;
};
/* The Variables graph: one variable's bytes across the tiles (PopVision's). */
R.showVariable = (mem, v) => {
  const vars = mem.variables, values = R.variableTiles(vars, v, mem.numTiles);
  const live = vars.alwaysLive[v] ? "always live" : `live over program steps ${vars.liveFrom[v]} to ${vars.liveTo[v]}`;
  const chart = R.tileBars({ series: [{ label: vars.names[v], color: "#b07aa1", values }], numTiles: mem.numTiles, height: 180,
    onClick: () => {}, describe: (t) => `tile ${t}: ${R.bytes(values[t])} of ${vars.names[v]}` });
  chart.canvas.id = "variable-tiles";
  R.variablePanel.replaceChildren(R.el("h2", { text: `Variable ${vars.names[v]}` }),
    R.kv([["Bytes, all tiles", R.bytes(vars.bytes[v]), "variable-bytes"], ["Tiles", R.int(values.filter((b) => b > 0).length)], ["Liveness", live]]),
    chart.canvas);
  R.variablePanel.hidden = false;
};
R.sparseAt = (rows, tile) =>
  rows.map((row) => {
    const i = row.tiles.indexOf(tile);
    return i < 0 ? null : { name: row.name, bytes: row.bytes[i] };
  }).filter(Boolean).sort((a, b) => b.bytes - a.bytes);

R.tileBreakdown = (mem, tile) => {
  const cats = Object.entries(mem.categories).map(([c, v]) => [mem.categoryLabels[c], v[tile]]).filter(([, b]) => b > 0)
    .sort((a, b) => b[1] - a[1]);
  const types = R.sparseAt(mem.vertexTypes, tile), sets = R.sparseAt(mem.computeSets, tile);
  const vars = R.tileVariables(mem.variables, tile);
  const list = (rows, cols) => rows.length ? R.el("div", { class: "scroll" }, R.table(cols, rows)) : R.note("none");
  return R.el("div", { id: "tile-breakdown", "data-tile": tile, "data-bytes": mem.totalIncludingGaps[tile] },
    R.el("h2", { text: `Tile ${tile}` }),
    R.kv([
      ["Total, including gaps", R.bytes(mem.totalIncludingGaps[tile]), "tile-total-gaps"],
      ["Total, excluding gaps", R.bytes(mem.total[tile]), "tile-total"],
      ["Non-interleaved / interleaved / overflowed",
        ["nonInterleaved", "interleaved", "overflowed"].map((r) => R.int(mem.regions[r][tile])).join(" / ")],
      ["Always-live", R.bytes(mem.alwaysLive[tile])],
      ["Not-always-live (peak)", R.bytes(mem.notAlwaysLive[tile])],
      ["Free (including gaps)", R.bytes(mem.bytesPerTile - mem.totalIncludingGaps[tile])],
    ]),
    R.el("h3", { text: "By category" }), list(cats.map(([l, b]) => [l, R.bytes(b)]), [{ title: "Category" }, { title: "Bytes", num: true }]),
    R.el("h3", { text: "Vertex memory by type" }), list(types.map((r) => [R.el("span", { class: "mono" }, r.name), R.bytes(r.bytes)]),
      [{ title: "Vertex type" }, { title: "Bytes", num: true }]),
    R.el("h3", { text: "Compute sets with vertices here" }), list(sets.map((r) => [R.el("span", { class: "mono" }, r.name), R.bytes(r.bytes)]),
      [{ title: "Compute set" }, { title: "Vertex bytes", num: true }]),
    R.el("h3", { text: "Variables (click one to plot it across the tiles)" }),
    mem.variables ? list(vars.slice(0, 200).map((v) => [
      R.el("a", { class: "mono", href: "#", "data-variable": v.index, title: "plot across the tiles",
        onclick: (ev) => { ev.preventDefault(); R.showVariable(mem, v.index); } }, v.name),
      v.alwaysLive ? "always" : "not always", R.bytes(v.bytes)]),
      [{ title: "Variable" }, { title: "Live" }, { title: "Bytes", num: true }])
      : R.note("This profile has no variable table (it was not written by Tremula's engine)."));
};

R.views.push({
  id: "memory",
  title: "Memory",
  available: (data) => !!data.report.memory,
  render(host, data) {
    const mem = data.report.memory;
    const mode = R.el("select", { id: "memory-mode" }, R.el("option", { value: "category" }, "by category"), R.el("option", { value: "region" }, "by region"));
    const gaps = R.el("input", { type: "checkbox", id: "memory-gaps", checked: true });
    const tileInput = R.el("input", { type: "number", id: "tile-input", min: 0, max: mem.numTiles - 1, value: 0, style: "width:90px" });
    const detail = R.el("section", { class: "panel", id: "tile-panel" }, R.note("Click a tile in the chart or the map, or enter its number."));
    const series = () => {
      const withGaps = gaps.checked;
      if (mode.value === "region") {
        const src = withGaps ? mem.regionsIncludingGaps : mem.regions;
        return [["nonInterleaved", "Non-interleaved", "#4e79a7"], ["interleaved", "Interleaved", "#f28e2b"], ["overflowed", "Overflowed", "#e15759"]]
          .map(([k, label, color]) => ({ label, color, values: src[k] }));
      }
      const out = Object.keys(mem.categories).map((c, i) => ({ label: mem.categoryLabels[c], color: R.palette[i % R.palette.length], values: mem.categories[c] }));
      if (withGaps) out.push({ label: "Gaps", color: "#c9ced8", values: mem.totalIncludingGaps.map((v, t) => v - mem.total[t]) });
      return out;
    };
    const describe = (t) => `tile ${t}: ${R.bytes(mem.totalIncludingGaps[t])} with gaps, ${R.bytes(mem.total[t])} without`;
    let bars, map;
    const select = (tile) => {
      if (!(tile >= 0 && tile < mem.numTiles)) return;
      tileInput.value = tile;
      bars.select(tile); map.select(tile);
      detail.replaceChildren(R.tileBreakdown(mem, tile));
    };
    bars = R.tileBars({ series: series(), numTiles: mem.numTiles, limit: mem.bytesPerTile, onClick: select, describe });
    const legendHost = R.el("div", {}, R.legend(bars.series.map((s) => [s.label, s.color])));
    const redraw = () => {
      bars.series = series(); bars.draw();
      legendHost.replaceChildren(R.legend(bars.series.map((s) => [s.label, s.color])));
    };
    mode.addEventListener("change", redraw);
    gaps.addEventListener("change", redraw);
    const fullest = Math.max(1, ...mem.totalIncludingGaps);
    map = R.heatMap({ values: mem.totalIncludingGaps, capacity: fullest, limit: mem.bytesPerTile, tilesPerIPU: mem.tilesPerIPU,
      numTiles: mem.numTiles, onClick: select, describe });
    const scale = R.el("select", { id: "heat-scale" }, R.el("option", { value: "fullest" }, "the fullest tile"),
      R.el("option", { value: "tile" }, "the tile's memory"));
    const scaleNote = R.el("span", { class: "muted" });
    const rescale = () => {
      map.capacity = scale.value === "tile" ? mem.bytesPerTile : fullest;
      scaleNote.textContent = `dark = ${R.bytes(map.capacity)}, red = over ${R.bytes(mem.bytesPerTile)}`;
      map.draw();
    };
    scale.addEventListener("change", rescale);
    rescale();
    bars.canvas.id = "memory-bars"; map.canvas.id = "tile-map";
    R.memoryMap = map; R.memoryBars = bars; // for tests and the console
    R.variablePanel = R.el("section", { class: "panel", id: "variable-panel", hidden: true });
    host.append(
      R.panel("Memory per tile",
        R.el("div", { class: "controls" }, R.el("label", {}, "Show ", mode), R.el("label", {}, gaps, " include gaps"),
          R.el("span", { class: "muted" }, bars.limitShown ? `dashed line: the tile's ${R.bytes(mem.bytesPerTile)}`
            : `the tile's ${R.bytes(mem.bytesPerTile)} is far above the fullest tile: off the scale`)),
        bars.canvas, legendHost),
      R.el("div", { class: "row" },
        R.panel("Tile map (memory including gaps)",
          R.el("div", { class: "controls" }, R.el("label", {}, "Tile ", tileInput),
            R.el("button", { class: "small", id: "tile-show", onclick: () => select(Number(tileInput.value)) }, "Show"),
            R.el("label", {}, "relative to ", scale), scaleNote),
          map.canvas, R.legend([["empty", R.heat(0)], ["25%", R.heat(0.25)], ["50%", R.heat(0.5)], ["100%", R.heat(1)], ["over", R.heat(2)]])),
        detail),
      R.variablePanel);
    tileInput.addEventListener("change", () => select(Number(tileInput.value)));
  },
});
