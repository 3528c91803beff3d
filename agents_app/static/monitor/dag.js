// A workflow's steps drawn as a graph: one row a level, one edge a dependency, loops as dashed edges back.
// Shared by the monitor (a run's steps and their status) and the admin's workflow form (the steps being edited).
"use strict";
const workflowGraph = (function () {
  const SVG = "http://www.w3.org/2000/svg";
  const W = 150, H = 44, GX = 24, GY = 40;

  // The levels of workflows_app/engine/dag.py's topological_levels: each round takes, in definition order,
  // the steps whose dependencies all lie in earlier rounds. What is being edited may be wrong: a dependency
  // on no step is left out, and steps on a cycle (or after one) go in a last level, marked ``blocked``.
  function levels(steps) {
    const ids = new Set(steps.map((s) => s.id)), done = new Set(), result = [];
    let remaining = steps;
    while (remaining.length) {
      const deps = (s) => s.depends_on.filter((d) => ids.has(d) && d !== s.id);
      const ready = remaining.filter((s) => deps(s).every((d) => done.has(d)));
      if (!ready.length) return { levels: [...result, remaining.map((s) => s.id)], blocked: new Set(remaining.map((s) => s.id)) };
      result.push(ready.map((s) => s.id));
      ready.forEach((s) => done.add(s.id));
      remaining = remaining.filter((s) => !done.has(s.id));
    }
    return { levels: result, blocked: new Set() };
  }

  function el(name, attrs, parent, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    parent.appendChild(node); return node;
  }

  // A label kept inside its box: cut to ``width`` with "…" (measured once drawn; in an SVG not on screen, which
  // measures nothing, by an estimate of its characters). The whole text stays in data-full. True if cut.
  function fit(text, width) {
    const full = text.textContent;
    text.dataset.full = full;
    const size = parseFloat(getComputedStyle(text).fontSize) || 12;
    const drawn = text.getComputedTextLength() > 0;
    const length = (n) => (n === 0 ? 0 : drawn ? text.getSubStringLength(0, n) : n * size * 0.62);
    if (length(full.length) <= width) return false;
    const room = width - size * 0.8;  // what the "…" leaves
    let low = 0, high = full.length;  // the longest start of the text that fits
    while (low < high) {
      const mid = Math.ceil((low + high) / 2);
      if (length(mid) <= room) low = mid; else high = mid - 1;
    }
    text.textContent = `${full.slice(0, low)}…`;
    return true;
  }

  // workflow: {steps: [{id, agent, depends_on}], loops: [{steps, until, max_rounds}]}; a step id twice is drawn once.
  // options.status(id) and options.round(id), when given, label each step with its state in a run.
  function draw(svg, workflow, options = {}) {
    svg.replaceChildren();
    const seen = new Set();
    const steps = workflow.steps.filter((s) => !seen.has(s.id) && seen.add(s.id));
    const { levels: rows, blocked } = levels(steps);
    const level = new Map(), pos = new Map();
    rows.forEach((ids, l) => ids.forEach((id, i) => { level.set(id, l); pos.set(id, { x: i * (W + GX), y: l * (H + GY) }); }));
    let maxX = W, maxY = H;
    for (const s of steps) for (const d of s.depends_on) {
      if (!pos.has(d) || d === s.id) continue;
      const a = pos.get(d), b = pos.get(s.id), span = level.get(s.id) - level.get(d);
      // An edge that skips levels bows out to the right so it does not run through the steps between.
      const path = span <= 1 ? `M${a.x + W / 2},${a.y + H} L${b.x + W / 2},${b.y}`
        : `M${a.x + W},${a.y + H / 2} C${a.x + W + 30 * span},${a.y + H / 2} ${b.x + W + 30 * span},${b.y + H / 2} ${b.x + W},${b.y + H / 2}`;
      maxX = Math.max(maxX, a.x + W + 24 * span, b.x + W + 24 * span);
      el("path", { class: "edge", "data-from": d, "data-to": s.id, d: path }, svg);
    }
    const loops = workflow.loops || [], looping = new Set(loops.flatMap((l) => l.steps));
    for (const loop of loops) {
      // A dashed edge back from the loop's last step to its first, labelled with its condition.
      const members = loop.steps.filter((id) => pos.has(id));
      if (!members.length) continue;
      const first = members.reduce((a, b) => (level.get(b) < level.get(a) ? b : a));
      const last = members.reduce((a, b) => (level.get(b) > level.get(a) ? b : a));
      const a = pos.get(last), b = pos.get(first), x = Math.max(a.x, b.x) + W, bow = 36;
      el("path", { class: "loop-edge", "data-from": last, "data-to": first,
                   d: `M${a.x + W},${a.y + H / 2} C${x + bow},${a.y + H / 2} ${x + bow},${b.y + H / 2} ${b.x + W},${b.y + H / 2}` }, svg);
      const label = `↻ ${loop.until ? loop.until + " · " : ""}≤ ${loop.max_rounds} rounds`;
      el("text", { class: "edge-label loop-label", x: x + bow, y: (a.y + b.y + H) / 2 }, svg, label);
      maxX = Math.max(maxX, x + bow + 8 + 6 * label.length);
    }
    for (const s of steps) {
      const p = pos.get(s.id), status = options.status ? options.status(s.id) : null;
      maxX = Math.max(maxX, p.x + W); maxY = Math.max(maxY, p.y + H);
      const round = looping.has(s.id) && options.round ? options.round(s.id) : null;
      const state = blocked.has(s.id) ? "blocked" : status;
      const g = el("g", { class: state ? `node ${state}` : "node", "data-step": s.id, "data-level": level.get(s.id),
                          ...(status ? { "data-status": status } : {}), ...(round ? { "data-round": round } : {}) }, svg);
      el("rect", { x: p.x, y: p.y, width: W, height: H }, g);
      const name = el("text", { class: "name", x: p.x + 8, y: p.y + 18 }, g, round ? `${s.id} · round ${round}` : s.id);
      const sub = el("text", { class: "sub", x: p.x + 8, y: p.y + 34 }, g, status ? `${s.agent} · ${status}` : s.agent);
      // A long step id or agent name is cut to the box; the whole of both shows as the step's tooltip.
      const cut = [fit(name, W - 16), fit(sub, W - 16)].some(Boolean);
      g.insertBefore(el("title", {}, g, `${name.dataset.full}\n${sub.dataset.full}`), g.firstChild);
      if (cut) g.dataset.cut = "1";
    }
    svg.setAttribute("viewBox", `-4 -4 ${maxX + 8} ${maxY + 8}`); svg.style.height = `${maxY + 8}px`;
    return { levels: rows, blocked };
  }

  return { draw, levels, el, fit };
})();
