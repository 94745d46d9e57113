/* Compare view (--compare): two reports side by side and as differences: the summary,
   memory per tile, liveness per step and cycles per operation. */
"use strict";

R.delta = (a, b, format) => {
  const d = b - a;
  return R.el("span", { class: d > 0 ? "delta-pos" : d < 0 ? "delta-neg" : "" },
    (d > 0 ? "+" : "") + format(d) + (a ? ` (${d > 0 ? "+" : ""}${R.pct(d / a)})` : ""));
};

R.views.push({
  id: "compare",
  title: "Compare",
  available: (data) => !!data.compare,
  render(host, data) {
    const A = data.report, B = data.compare;
    const sa = A.summary || {}, sb = B.summary || {};
    const rows = [
      ["Memory, including gaps", "memoryIncludingGaps", R.bytes], ["Always-live", "alwaysLiveBytes", R.bytes],
      ["Peak not-always-live", "peakNotAlwaysLiveBytes", R.bytes], ["Fullest tile", "maxTileBytes", R.bytes],
      ["Tiles out of memory", "tilesOutOfMemory", R.int], ["Total cycles", "cycles", R.int], ["Steps", "numSteps", R.int],
    ].filter(([, k]) => sa[k] != null || sb[k] != null);
    host.append(R.panel("Summary",
      R.table([{ title: "" }, { title: "A: " + A.source, num: true }, { title: "B: " + B.source, num: true }, { title: "B − A", num: true }],
        rows.map(([label, k, f]) => [label, f(sa[k]), f(sb[k]), sa[k] != null && sb[k] != null ? R.delta(sa[k], sb[k], f) : "–"]),
        { id: "compare-summary" })));
    if (A.memory && B.memory && A.memory.numTiles === B.memory.numTiles) {
      const diff = B.memory.totalIncludingGaps.map((v, t) => v - A.memory.totalIncludingGaps[t]);
      const grow = diff.map((d) => Math.max(0, d)), shrink = diff.map((d) => Math.max(0, -d));
      const describe = (t) => `tile ${t}: A ${R.bytes(A.memory.totalIncludingGaps[t])}, B ${R.bytes(B.memory.totalIncludingGaps[t])}, B − A ${R.bytes(diff[t])}`;
      const side = (m, label) => R.tileBars({ series: [{ label, color: "#4e79a7", values: m.totalIncludingGaps }],
        numTiles: m.numTiles, limit: m.bytesPerTile, height: 160, onClick: () => {}, describe });
      host.append(R.panel("Memory per tile (including gaps)",
        R.el("h3", { text: "A" }), side(A.memory, "A").canvas, R.el("h3", { text: "B" }), side(B.memory, "B").canvas,
        R.el("h3", { text: "Difference B − A" }),
        R.tileBars({ series: [{ label: "B larger", color: "#e15759", values: grow }, { label: "B smaller", color: "#59a14f", values: shrink }],
          numTiles: A.memory.numTiles, height: 160, onClick: () => {}, describe }).canvas,
        R.legend([["B larger", "#e15759"], ["B smaller", "#59a14f"]])));
    } else if (A.memory && B.memory) {
      host.append(R.panel("Memory per tile", R.note(`The reports have different tile counts (${A.memory.numTiles} and ${B.memory.numTiles}).`)));
    }
    if (A.liveness && B.liveness) {
      host.append(R.panel("Not-always-live memory per program step",
        R.lineChart({ series: [{ label: "A", color: "#4e79a7", values: A.liveness.bytes }, { label: "B", color: "#e15759", values: B.liveness.bytes }],
          onClick: () => {}, describe: (i) => `step ${i}: A ${R.bytes(A.liveness.bytes[i])}, B ${R.bytes(B.liveness.bytes[i])}` }).canvas,
        R.legend([["A", "#4e79a7"], ["B", "#e15759"]])));
    }
    if (A.operations && B.operations) {
      const map = new Map();
      for (const r of A.operations.rows) map.set(r.name, { name: r.name, a: r.cycles, b: 0 });
      for (const r of B.operations.rows) (map.get(r.name) || map.set(r.name, { name: r.name, a: 0, b: 0 }).get(r.name)).b = r.cycles;
      const ops = [...map.values()].sort((x, y) => Math.abs(y.b - y.a) - Math.abs(x.b - x.a) || x.name.localeCompare(y.name));
      host.append(R.panel("Cycles per operation (largest differences first)",
        R.el("div", { class: "scroll" }, R.table([{ title: "Operation" }, { title: "A", num: true }, { title: "B", num: true }, { title: "B − A", num: true }],
          ops.slice(0, 500).map((o) => [R.el("span", { class: "mono" }, o.name), R.int(o.a), R.int(o.b), R.delta(o.a, o.b, R.int)]), { id: "compare-ops" }))));
    }
  },
});
