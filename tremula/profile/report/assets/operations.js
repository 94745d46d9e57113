/* Operations view: steps grouped by operation (debug name), at a chosen depth of the name's
   path, with cycles, share, cycles per lane, tile balance, vertex memory and FLOPs where
   known (null where not); sortable. */
"use strict";

/* Rows grouped by the first `depth` components of their names (0: whole names). */
R.groupOperations = (rows, depth, lanes) => {
  if (!depth) return rows.map((r) => ({ ...r }));
  const groups = new Map();
  for (const r of rows) {
    const key = r.name.split("/").slice(0, depth).join("/");
    let g = groups.get(key);
    if (!g) {
      g = { name: key, cycles: 0, steps: 0, memory: 0, balanced: 0, flops: null, ...Object.fromEntries(lanes.map((l) => [l, 0])) };
      groups.set(key, g);
    }
    for (const k of ["cycles", "steps", "memory", ...lanes]) g[k] += r[k];
    if (r.flops !== null && r.flops !== undefined) g.flops = (g.flops || 0) + r.flops;
    g.balanced += r.tileBalance * r.cycles;
  }
  return [...groups.values()].map((g) => ({ ...g, tileBalance: g.cycles ? g.balanced / g.cycles : 1 }));
};

R.views.push({
  id: "operations",
  title: "Operations",
  available: (data) => !!data.report.operations,
  render(host, data) {
    const ops = data.report.operations, lanes = ops.lanes;
    const maxDepth = Math.max(1, ...ops.rows.map((r) => r.name.split("/").length));
    const depth = R.el("select", { id: "ops-depth" }, R.el("option", { value: 0 }, "full name"),
      Array.from({ length: Math.min(maxDepth, 6) }, (_, i) => R.el("option", { value: i + 1 }, `first ${i + 1} part(s)`)));
    const filter = R.el("input", { type: "search", id: "ops-filter", placeholder: "filter by name" });
    const columns = [
      { key: "name", title: "Operation" }, { key: "steps", title: "Steps", num: true },
      { key: "cycles", title: "Cycles", num: true }, { key: "share", title: "Share", num: true },
      ...lanes.map((l) => ({ key: l, title: l, num: true })),
      { key: "tileBalance", title: "Tile balance", num: true, help: "cycle-weighted mean of the steps' tile balance" },
      { key: "memory", title: "Vertex memory", num: true, help: "vertex memory of the operation's compute sets" },
      { key: "flops", title: "FLOPs", num: true, help: "floating-point operations of the compute sets the steps ran (the codelets' estimates); – where unknown" },
    ];
    let sortKey = "cycles", descending = true;
    const body = R.el("tbody");
    const count = R.el("span", { class: "muted", id: "ops-count" });
    const fill = () => {
      const rows = R.groupOperations(ops.rows, Number(depth.value), lanes)
        .filter((r) => !filter.value || r.name.toLowerCase().includes(filter.value.toLowerCase()));
      for (const r of rows) r.share = ops.totalCycles ? r.cycles / ops.totalCycles : 0;
      rows.sort((x, y) => {
        const a = x[sortKey] ?? -1, b = y[sortKey] ?? -1;  /* unknown FLOPs sort below 0 */
        const order = typeof a === "string" ? a.localeCompare(b) : a - b;
        return descending ? -order : order;
      });
      count.textContent = `${R.int(rows.length)} operation(s); ${R.int(ops.totalCycles)} step cycles in all`;
      body.replaceChildren(...rows.slice(0, 1000).map((r) => R.el("tr", {}, columns.map((c) => {
        const v = r[c.key];
        const text = c.key === "name" ? R.el("span", { class: "mono" }, v)
          : c.key === "share" || c.key === "tileBalance" ? R.pct(v) : c.key === "memory" ? R.bytes(v) : R.int(v);
        return R.el("td", { class: c.num ? "num" : "" }, text);
      }))));
    };
    const head = R.el("tr", {}, columns.map((c) => R.el("th", { class: "sortable" + (c.num ? " num" : ""), title: c.help,
      "data-key": c.key, onclick: () => { descending = sortKey === c.key ? !descending : c.key !== "name"; sortKey = c.key; fill(); } }, c.title)));
    depth.addEventListener("change", fill);
    filter.addEventListener("input", fill);
    host.append(R.panel("Operations",
      R.el("div", { class: "controls" }, R.el("label", {}, "Group by ", depth), filter, count),
      R.el("table", { id: "ops-table" }, R.el("thead", {}, head), body),
      R.note("An operation is a step's debug name; the exchanges before and after a compute set belong to its operation. FLOPs are the codelets' estimates for the compute sets the steps ran (computeSets.flops, a Tremula extension of the format); – where unknown.")));
    fill();
  },
});
