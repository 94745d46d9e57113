/* Liveness view: not-always-live bytes per program step; a step's live variables on click,
   and the difference between two steps (shift-click the second). */
"use strict";

R.liveAt = (vars, step) => {
  const out = [];
  if (!vars || !vars.liveFrom) return out;
  for (let v = 0; v < vars.names.length; v++)
    if (!vars.alwaysLive[v] && vars.liveFrom[v] <= step && step <= vars.liveTo[v]) out.push(v);
  return out.sort((a, b) => vars.bytes[b] - vars.bytes[a]);
};
R.programLabel = (programs, pid) => {
  const p = programs && programs.programs[pid];
  return p ? `${p.type}${p.name ? " " + p.name : ""} (program ${pid})` : `program ${pid}`;
};

R.views.push({
  id: "liveness",
  title: "Liveness",
  available: (data) => !!data.report.liveness,
  render(host, data) {
    const live = data.report.liveness, vars = data.report.memory && data.report.memory.variables;
    const progs = data.report.programs;
    const withAlways = R.el("input", { type: "checkbox", id: "live-always" });
    const inA = R.el("input", { type: "number", id: "live-step-a", min: 0, max: live.bytes.length - 1, style: "width:90px" });
    const inB = R.el("input", { type: "number", id: "live-step-b", min: 0, max: live.bytes.length - 1, style: "width:90px" });
    const detail = R.el("section", { class: "panel", id: "live-detail" }, R.note("Click a step; shift-click a second step to see the difference."));
    const series = () => [{ label: "not-always-live", color: "#4e79a7",
      values: withAlways.checked ? live.bytes.map((b) => b + live.alwaysLive) : live.bytes }];
    const describe = (i) => `step ${i}: ${R.bytes(live.bytes[i])} not-always-live; ${R.programLabel(progs, live.program[i])}`;
    let chart;
    const varRows = (list) => list.slice(0, 300).map((v) => [R.el("span", { class: "mono" }, vars.names[v]), R.bytes(vars.bytes[v])]);
    const show = () => {
      const a = inA.value === "" ? -1 : Number(inA.value), b = inB.value === "" ? -1 : Number(inB.value);
      chart.mark([a, b].filter((i) => i >= 0));
      if (a < 0) return;
      const parts = [R.el("h2", { text: `Step ${a}` }), R.kv([
        ["Program", R.programLabel(progs, live.program[a])],
        ["Not-always-live", R.bytes(live.bytes[a]), "live-bytes-a"],
        ["Always-live", R.bytes(live.alwaysLive)],
      ])];
      if (!vars || !vars.liveFrom) {
        parts.push(R.note("This profile has no variable table: live variables cannot be listed."));
      } else if (b < 0) {
        const list = R.liveAt(vars, a);
        parts.push(R.el("h3", { text: `${list.length} live variable(s), largest first` }),
          R.el("div", { class: "scroll" }, R.table([{ title: "Variable" }, { title: "Bytes", num: true }], varRows(list), { id: "live-vars" })));
      } else {
        const la = new Set(R.liveAt(vars, a)), lb = new Set(R.liveAt(vars, b));
        const born = [...lb].filter((v) => !la.has(v)), died = [...la].filter((v) => !lb.has(v));
        const sum = (l) => l.reduce((s, v) => s + vars.bytes[v], 0);
        parts.push(R.kv([[`Step ${b}: not-always-live`, R.bytes(live.bytes[b])],
          ["Difference", R.bytes(live.bytes[b] - live.bytes[a]), "live-diff"]]),
          R.el("h3", { text: `Live at ${b} but not at ${a}: ${born.length} (${R.bytes(sum(born))})` }),
          R.el("div", { class: "scroll" }, R.table([{ title: "Variable" }, { title: "Bytes", num: true }], varRows(born.sort((x, y) => vars.bytes[y] - vars.bytes[x])))),
          R.el("h3", { text: `Live at ${a} but not at ${b}: ${died.length} (${R.bytes(sum(died))})` }),
          R.el("div", { class: "scroll" }, R.table([{ title: "Variable" }, { title: "Bytes", num: true }], varRows(died.sort((x, y) => vars.bytes[y] - vars.bytes[x])))));
      }
      detail.replaceChildren(...parts);
    };
    const onClick = (i, ev) => {
      if (ev.shiftKey && inA.value !== "") inB.value = i; else { inA.value = i; inB.value = ""; }
      show();
    };
    const chartHost = R.el("div");
    const rebuild = () => {
      chart = R.lineChart({ series: series(), describe, onClick });
      R.livenessChart = chart; // for tests and the console
      chartHost.replaceChildren(chart.canvas);
      show();
    };
    withAlways.addEventListener("change", rebuild);
    inA.addEventListener("change", show);
    inB.addEventListener("change", show);
    const peakStep = live.bytes.indexOf(Math.max(...live.bytes));
    host.append(R.panel("Not-always-live memory per program step",
      R.el("div", { class: "controls" }, R.el("label", {}, withAlways, " add always-live (" + R.bytes(live.alwaysLive) + ")"),
        R.el("label", {}, "Step ", inA), R.el("label", {}, "compare with ", inB),
        R.el("span", { class: "muted", id: "live-peak" }, `peak ${R.bytes(live.peak)} at step ${peakStep} of ${live.bytes.length}`)),
      chartHost,
      live.source === "byProgram" ? R.note("Steps read from the byProgram tree (no programSteps table in this profile).") : null),
    detail);
    rebuild();
  },
});
