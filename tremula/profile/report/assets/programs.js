/* Program tree view: control programs and functions down to compute sets, exchanges and
   stream copies, built lazily as nodes are opened. */
"use strict";

R.views.push({
  id: "programs",
  title: "Program tree",
  available: (data) => !!data.report.programs,
  render(host, data) {
    const { programs, controlPrograms, functionPrograms } = data.report.programs;
    const node = (pid, label, depth) => {
      const p = programs[pid] || { type: "?" };
      const kids = p.type === "Call" ? (functionPrograms[p.target] != null ? [functionPrograms[p.target]] : []) : p.children || [];
      const extra = [
        p.computeSet != null ? `compute set ${p.computeSet}` : null,
        p.exchange != null ? `exchange ${p.exchange}` : null,
        p.count != null ? `× ${p.count}` : null,
        p.syncType ? p.syncType : null,
        p.type === "Call" ? `function ${p.target}` : null,
      ].filter(Boolean).join(", ");
      const li = R.el("li", { "data-program": pid });
      const toggle = R.el("span", { class: "toggle" }, kids.length ? "▸" : "");
      const head = R.el("div", { class: "node" }, toggle,
        R.el("span", { class: "ptype" + (kids.length ? "" : " leaf") }, p.type),
        label ? R.el("b", {}, label + " ") : null,
        R.el("span", { class: "mono" }, p.name || ""), extra ? R.el("span", { class: "muted" }, `  ${extra}`) : null,
        R.el("span", { class: "muted" }, `  #${pid}`));
      li.append(head);
      let list = null;
      li.open = (open) => {
        if (!kids.length) return;
        if (open && !list) { list = R.el("ul", {}, kids.map((k) => node(k, null, depth + 1))); li.append(list); }
        if (list) list.hidden = !open;
        toggle.textContent = open ? "▾" : "▸";
        li.dataset.open = open ? "1" : "";
      };
      head.addEventListener("click", () => li.open(!(list && !list.hidden)));
      return li;
    };
    const roots = [
      ...controlPrograms.map((pid, i) => node(pid, `Control program ${i}`, 0)),
      ...functionPrograms.map((pid, i) => node(pid, `Function ${i}`, 0)),
    ];
    const expand = (items, depth) => {
      for (const li of items) {
        li.open(true);
        const list = li.querySelector(":scope > ul");
        if (depth > 1 && list) expand(list.children, depth - 1);
      }
    };
    const tree = R.el("div", { class: "tree", id: "program-tree" }, R.el("ul", {}, roots));
    host.append(R.panel(`Programs (${programs.length})`,
      R.el("div", { class: "controls" },
        R.el("button", { class: "small", id: "tree-expand", onclick: () => expand(roots, 3) }, "Expand 3 levels"),
        R.el("button", { class: "small", onclick: () => roots.forEach((li) => li.open(false)) }, "Collapse")),
      tree));
    roots.slice(0, 1).forEach((li) => li.open(true));
  },
});
