/* Summary view: target, graph, memory totals, liveness, cycles and insights. */
"use strict";

R.cycleParts = (shares, labels) =>
  [["compute", R.laneColors.Compute], ["doExchange", R.laneColors.Exchange],
   ["globalExchange", "#e15759"], ["streamCopy", R.laneColors.StreamCopy],
   ["copySharedStructure", "#76b7b2"], ["sync", R.laneColors.Sync], ["idle", "#e9edf3"]]
    .map(([key, color]) => ({ label: labels[key], value: shares[key] || 0, color }));

R.views.push({
  id: "summary",
  title: "Summary",
  available: () => true,
  render(host, data) {
    const rep = data.report, s = rep.summary || {}, t = rep.target, g = rep.graph;
    const panels = [];
    if (t) panels.push(R.panel("Target", R.kv([
      ["Type", `${t.type} (${t.ipuVersion})`],
      ["IPUs", R.int(t.numIPUs)],
      ["Tiles per IPU", R.int(t.tilesPerIPU)],
      ["Tiles", R.int(t.numTiles), "summary-tiles"],
      ["Memory per tile", `${R.bytes(t.bytesPerTile)} (${R.kib(t.bytesPerTile)})`],
      ["Memory in all", `${R.bytes(t.totalMemory)} (${R.kib(t.totalMemory)})`],
      ["Clock", `${(t.clockFrequency / 1e6).toFixed(1)} MHz`],
      t.replicationFactor > 1 && ["Replicas", R.int(t.replicationFactor)],
    ])));
    if (g) panels.push(R.panel("Graph", R.kv([
      ["Vertices", R.int(g.numVertices)], ["Edges", R.int(g.numEdges)],
      ["Variables", R.int(g.numVars)], ["Compute sets", R.int(g.numComputeSets)],
    ])));
    if (s.memoryIncludingGaps != null) panels.push(R.panel("Memory", R.kv([
      ["Total, including gaps", R.bytes(s.memoryIncludingGaps), "summary-memory"],
      ["Total, excluding gaps", R.bytes(s.memoryExcludingGaps)],
      ["Non-interleaved", R.bytes(s.memoryByRegion.nonInterleaved)],
      ["Interleaved", R.bytes(s.memoryByRegion.interleaved)],
      ["Overflowed", R.bytes(s.memoryByRegion.overflowed)],
      ["Always-live", R.bytes(s.alwaysLiveBytes), "summary-always-live"],
      ["Peak not-always-live", R.bytes(s.peakNotAlwaysLiveBytes), "summary-peak-nal"],
      ["Fullest tile", `${R.bytes(s.maxTileBytes)} on tile ${s.maxTile}`, "summary-max-tile"],
      ["Tiles out of memory", R.int(s.tilesOutOfMemory), "summary-oom"],
    ])));
    if (s.cycles != null) {
      const parts = R.cycleParts(s.cycleShares, s.cycleShareLabels);
      panels.push(R.panel("Execution", R.kv([
        ["Total cycles", R.int(s.cycles), "summary-cycles"],
        ["Time", R.time(s.seconds), "summary-time"],
        ["Steps", R.int(s.numSteps)],
        ["Profiler mode", rep.execution.profilerMode],
        ["Compute, threads busy", R.pct(s.cycleShares.activeCompute)],
      ]), R.el("h3", { text: "Tile cycles by activity (share of cycles × tiles)" }), R.proportions(parts, 1)));
    }
    host.append(R.el("div", { class: "grid" }, panels));
    const insights = s.insights || [];
    host.append(R.panel("Insights", insights.length
      ? insights.map((i) => R.el("div", { class: "insight " + i.kind }, i.text))
      : R.note("Nothing to point out.")));
  },
});
