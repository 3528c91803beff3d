// One run, live: the event log, the agent tree, the workflow DAG, streamed text and totals,
// all rebuilt from the run's events as /ws/runs/<id>/ delivers them (replay, then live).
"use strict";
(function () {
  const runId = JSON.parse(document.getElementById("run-id").textContent);
  const workflow = JSON.parse(document.getElementById("workflow").textContent);
  const clock = JSON.parse(document.getElementById("clock").textContent);
  const $ = (id) => document.getElementById(id);
  const state = {
    lastSeq: null, count: 0, tokensIn: 0, tokensOut: 0, cost: 0, types: new Set(), agents: new Set(),
    // activation id -> {id, agent, kind, parent, from, depth, status, tier, tokens}; a signal's
    // activation re-runs the parent's agent and is drawn below the child that sent it (``from``)
    nodes: new Map(),
    sessions: new Map(), // session id -> activation id
    steps: new Map(),   // workflow step id -> status
    rounds: new Map(),  // workflow step id -> the round of its loop it is in
    // session id -> {el, turn, text, next}: the session's block in "Model output", its current turn's element
    // and markdown source, and the label of the turn its next text starts (set by a model call, else null)
    streams: new Map(),
    dirty: new Map(),  // turn element -> its text, for the turns whose text grew since they were last drawn
  };

  // -- the event log ------------------------------------------------------------------------
  function addOption(select, value) {
    if ([...select.options].some((o) => o.value === value)) return;
    const option = document.createElement("option"); option.value = option.textContent = value; select.appendChild(option);
  }
  function visible(tr) {
    const type = $("f-type").value, agent = $("f-agent").value;
    return (!type || tr.dataset.type === type) && (!agent || tr.dataset.agent === agent);
  }
  const LABELS = ["#", "Time", "Type", "Agent"];
  function logEvent(e) {
    const tr = document.createElement("tr");
    tr.dataset.type = e.type; tr.dataset.agent = e.agent; tr.dataset.seq = e.seq;
    const cells = [e.seq, e.created_at.slice(11, 23), e.type, e.agent];
    cells.forEach((text, i) => {
      const td = document.createElement("td"); td.textContent = text; td.dataset.label = LABELS[i]; tr.appendChild(td);
    });
    const td = document.createElement("td"), details = document.createElement("details"), summary = document.createElement("summary");
    td.className = "what";
    summary.textContent = describeEvent(e);
    details.appendChild(summary);
    details.addEventListener("toggle", () => {
      if (details.open && !details.querySelector("pre")) {
        const pre = document.createElement("pre"); pre.textContent = JSON.stringify(e.data, null, 2); details.appendChild(pre);
      }
    });
    td.appendChild(details); tr.appendChild(td);
    tr.hidden = !visible(tr);
    $("events").appendChild(tr);
    addOption($("f-type"), e.type); addOption($("f-agent"), e.agent || "");
  }

  // -- the live clock: from the run's start, ticking until it ends ---------------------------
  const started = clock.started_at ? Date.parse(clock.started_at) : null;
  // The page's clock may differ from the server's: measure from the duration the server computed.
  const offset = started !== null && clock.duration_s !== null && !clock.finished_at
    ? Date.now() - (started + clock.duration_s * 1000) : 0;
  let tickStart = started, ticking = null;
  function showDuration(seconds) { $("t-duration").textContent = `${seconds.toFixed(1)} s`; }
  function tick() { if (tickStart !== null) showDuration(Math.max(0, (Date.now() - offset - tickStart) / 1000)); }
  function clockStart(at) {
    if (ticking !== null) return;
    tickStart = tickStart ?? at; tick(); ticking = setInterval(tick, 100);
  }
  function clockStop(seconds) {
    if (ticking !== null) clearInterval(ticking);
    ticking = -1; // never again
    if (seconds !== undefined && seconds !== null) showDuration(Number(seconds));
    $("t-duration").dataset.stopped = "1";
  }
  if (started !== null && !clock.finished_at) clockStart(started);
  else if (clock.finished_at) clockStop(clock.duration_s);

  // -- the result, as markdown ------------------------------------------------------------
  function showResult(text, failed) {
    const box = $("result");
    box.hidden = !text; box.classList.toggle("failed", Boolean(failed));
    if (text) renderMarkdown(box, text);
  }
  const drawn = JSON.parse(document.getElementById("run-result").textContent);
  showResult(drawn, $("result").classList.contains("failed"));
  if (drawn) $("result").dataset.whole = "1";

  // -- the workspace's files ----------------------------------------------------------------
  const fileUrl = (path) => `/runs/${runId}/files/${path.split("/").map(encodeURIComponent).join("/")}`;
  function fileRow(li, path) {
    li.dataset.path = path; li.replaceChildren();
    const view = document.createElement("button"); view.type = "button"; view.className = "link view"; view.textContent = path;
    const size = document.createElement("span"); size.className = "muted size";
    const down = document.createElement("a"); down.className = "download"; down.textContent = "download";
    down.href = `${fileUrl(path)}?download=1`; down.setAttribute("download", "");
    li.append(view, " ", size, " ", down);
  }
  function fileChanged(d) {
    if (!d.path) return;
    const list = $("file-list");
    let li = [...list.children].find((item) => item.dataset.path === d.path);
    if (d.action === "deleted") { li?.remove(); }
    else {
      if (!li) {
        li = document.createElement("li"); fileRow(li, d.path);
        const after = [...list.children].find((item) => item.dataset.path > d.path);
        list.insertBefore(li, after || null);
      }
      if (d.bytes !== undefined) li.querySelector(".size").textContent = `${d.bytes} B`;
      li.classList.add("changed");
      if ($("file-view-path").textContent === d.path && !$("file-view").hidden) openFile(d.path);
    }
    $("file-count").textContent = list.children.length;
    document.querySelector("#files .empty-files").hidden = list.children.length > 0;
  }
  async function openFile(path) {
    $("file-view").hidden = false; $("file-view-path").textContent = path; $("file-view-content").textContent = "loading…";
    try {
      const response = await fetch(fileUrl(path), { credentials: "same-origin" });
      $("file-view-content").textContent = response.ok ? await response.text() : `could not read it (${response.status})`;
    } catch (error) {
      $("file-view-content").textContent = `could not read it (${error})`;
    }
  }
  $("file-list").addEventListener("click", (e) => {
    const button = e.target.closest("button.view");
    if (button) openFile(button.closest("li").dataset.path);
  });
  $("file-view-close").addEventListener("click", () => { $("file-view").hidden = true; });
  for (const id of ["f-type", "f-agent"]) {
    $(id).addEventListener("change", () => { for (const tr of $("events").rows) tr.hidden = !visible(tr); });
  }

  // -- what the events mean ---------------------------------------------------------------
  function apply(e) {
    const d = e.data || {};
    switch (e.type) {
      case "activation_queued":
        if (!state.nodes.has(d.activation)) {
          state.nodes.set(d.activation, { id: d.activation, agent: e.agent, kind: d.kind, parent: d.parent,
                                          depth: d.depth, status: "queued", tier: "", tokens: 0 });
        }
        break;
      case "session_start": {
        // A run drawn queued (waiting for a worker or its team's free slot) runs from its first session's start,
        // as the server marks it in the same commit (agents_app/execution/lifecycle.py).
        if ($("status").textContent === "queued") { $("status").className = "status running"; $("status").textContent = "running"; }
        const node = state.nodes.get(d.activation) || { id: d.activation, agent: e.agent, kind: d.kind,
                                                         parent: d.parent, depth: d.depth, tokens: 0 };
        Object.assign(node, { status: "running", tier: d.tier });
        state.nodes.set(d.activation, node); state.sessions.set(e.session, d.activation);
        break;
      }
      case "session_end": {
        const node = state.nodes.get(state.sessions.get(e.session));
        if (node) node.status = d.status === "ok" ? "done" : d.status;
        break;
      }
      case "session_suspended": {  // it waits for children or people, holding no worker, until they settle
        const node = state.nodes.get(state.sessions.get(e.session));
        if (node) node.status = "suspended";
        break;
      }
      case "llm_response": {
        const usage = d.usage || {};
        state.tokensIn += usage.prompt_tokens || 0; state.tokensOut += usage.completion_tokens || 0;
        state.cost += Number(d.cost_usd || 0);
        const node = state.nodes.get(state.sessions.get(e.session));
        if (node) node.tokens += (usage.prompt_tokens || 0) + (usage.completion_tokens || 0);
        break;
      }
      case "signal": {
        // The sender: its session when the event names one, else the running child of the same
        // parent whose agent is ``from`` (the signal is sent from inside that child's session).
        const node = state.nodes.get(d.activation);
        if (!node) break;
        const senders = [...state.nodes.values()].filter((n) => n.id !== node.id && n.parent === node.parent
                                                                && n.agent === d.from && n.status === "running");
        node.from = state.sessions.get(e.session) || senders.at(-1)?.id;
        break;
      }
      case "llm_request": turnBegins(e.session, d.step ? `step ${d.step}` : ""); break;
      case "retry": if (d.what === "model_call") turnBegins(e.session, `attempt ${d.attempt + 1}`); break;
      case "stream_chunk": stream(e); break;
      case "step_start": case "step_complete": case "step_failed": case "step_skipped": case "step_retry":
        // The engine's step states: pending, running, succeeded, failed, skipped.
        state.steps.set(d.step, d.status || { step_start: "running", step_complete: "succeeded",
                                              step_failed: "failed", step_skipped: "skipped",
                                              step_retry: "running" }[e.type]);
        if (d.round) state.rounds.set(d.step, d.round);
        break;
      case "loop_round":
        // A loop's steps start over: pending in their next round.
        for (const step of d.steps || []) { state.steps.set(step, "pending"); state.rounds.set(step, d.round); }
        break;
      case "run_start":
        // A run the server drew as finished keeps the duration it showed.
        if (!["succeeded", "failed", "cancelled"].includes($("status").textContent)) clockStart(Date.parse(e.created_at));
        break;
      case "file_change": fileChanged(d); break;
      case "run_complete":
        $("status").className = `status ${d.status}`; $("status").textContent = d.status;
        clockStop(d.duration_s);
        // The event holds the first 2,000 characters; the page drawn by the server had it whole.
        if ((d.result || d.error) && !(d.result && $("result").dataset.whole)) showResult(d.result || d.error, !d.result);
        document.getElementById("cancel-form")?.remove();
        // A cancelled or failed run stops every agent still queued, working or suspended.
        if (d.status !== "succeeded") {
          for (const node of state.nodes.values()) {
            if (["queued", "running", "suspended"].includes(node.status)) node.status = d.status === "cancelled" ? "cancelled" : "failed";
          }
        }
        break;
    }
  }

  // -- the model's output: a block per session, a part per model turn, each drawn as markdown --------
  // renderMarkdown (monitor/markdown.js) builds nodes and sets only their text: the model's "<script>" is
  // shown, never run. A turn is redrawn once per frame however many chunks arrived (see redraw).
  function streamOf(session) {
    if (!state.streams.has(session)) state.streams.set(session, { el: null, turn: null, text: "", next: null });
    return state.streams.get(session);
  }
  function turnBegins(session, label) {
    if (session) streamOf(session).next = label;
  }
  function stream(e) {
    const s = streamOf(e.session);
    if (!s.el) {
      s.el = document.createElement("div"); s.el.className = "stream";
      const who = document.createElement("b"); who.textContent = e.agent; s.el.appendChild(who);
      $("streams").appendChild(s.el);
    }
    if (!s.turn || s.next !== null) {
      s.turn = document.createElement("div"); s.turn.className = "turn markdown"; s.turn.dataset.label = s.next || "";
      s.el.appendChild(s.turn); s.text = ""; s.next = null;
    }
    s.text += e.data.text || "";
    state.dirty.set(s.turn, s.text);
  }
  function drawStreams() {
    for (const [turn, text] of state.dirty) renderMarkdown(turn, text);
    state.dirty.clear();
  }

  // -- drawing ------------------------------------------------------------------------------
  const el = workflowGraph.el;  // an SVG element with its attributes (monitor/dag.js)
  function layout(items, parentOf) {
    // A tidy-enough tree: depth-first order gives x, depth gives y.
    const children = new Map(), roots = [];
    for (const item of items) {
      const p = parentOf(item);
      if (p && items.some((i) => i.id === p)) (children.get(p) || children.set(p, []).get(p)).push(item);
      else roots.push(item);
    }
    const pos = new Map(); let x = 0;
    (function walk(list, depth) {
      for (const item of list) {
        const kids = children.get(item.id) || [];
        const start = x; walk(kids, depth + 1);
        const cx = kids.length ? (start + x - 1) / 2 : x++;
        pos.set(item.id, { x: cx, y: depth });
      }
    })(roots, 0);
    return pos;
  }
  function drawTree() {
    const svg = $("tree"); svg.replaceChildren();
    const nodes = [...state.nodes.values()];
    // spawn and delegate edges go from the parent to the child; a signal edge from the child
    // that signalled to its parent's agent, woken again
    const above = (n) => (n.kind === "signal" && n.from && state.nodes.has(n.from)) ? n.from : n.parent;
    const pos = layout(nodes, above);
    const W = 170, H = 62, GX = 20, GY = 40;
    let maxX = 0, maxY = 0;
    for (const n of nodes) {
      const p = pos.get(n.id), parent = above(n) && pos.get(above(n));
      if (parent) {
        const x1 = parent.x * (W + GX) + W / 2, y1 = parent.y * (H + GY) + H, x2 = p.x * (W + GX) + W / 2, y2 = p.y * (H + GY);
        el("path", { class: `edge ${n.kind}`, "data-from": above(n), "data-to": n.id,
                     d: `M${x1},${y1} C${x1},${y1 + 20} ${x2},${y2 - 20} ${x2},${y2}` }, svg);
        el("text", { class: "edge-label", x: (x1 + x2) / 2 + 4, y: (y1 + y2) / 2 }, svg, n.kind);
      }
    }
    for (const n of nodes) {
      const p = pos.get(n.id), x = p.x * (W + GX), y = p.y * (H + GY);
      maxX = Math.max(maxX, x + W); maxY = Math.max(maxY, y + H);
      const g = el("g", { class: `node ${n.status}`, "data-activation": n.id, "data-agent": n.agent,
                          "data-kind": n.kind, "data-status": n.status }, svg);
      el("rect", { x, y, width: W, height: H }, g);
      el("text", { x: x + 8, y: y + 18 }, g, `${n.agent} · ${n.kind}`);
      el("text", { class: "sub", x: x + 8, y: y + 35 }, g, `${n.status}${n.tier ? " · " + n.tier : ""}`);
      el("text", { class: "sub", x: x + 8, y: y + 51 }, g, `${n.tokens.toLocaleString()} tokens`);
    }
    svg.setAttribute("viewBox", `-4 -4 ${Math.max(maxX, W) + 8} ${Math.max(maxY, H) + 8}`);
    svg.style.height = `${Math.max(maxY, H) + 8}px`;
  }
  function drawDag() {
    if (!workflow) return;
    // monitor/dag.js draws it (the admin's workflow form too); the run's events give each step its state.
    workflowGraph.draw($("dag"), workflow, { status: (id) => state.steps.get(id) || "pending",
                                            round: (id) => state.rounds.get(id) || 1 });
  }
  let drawing = false;
  function redraw() {
    if (drawing) return; drawing = true;
    requestAnimationFrame(() => {
      drawing = false; drawTree(); drawDag(); drawStreams();
      $("t-in").textContent = state.tokensIn.toLocaleString(); $("t-out").textContent = state.tokensOut.toLocaleString();
      $("t-cost").textContent = `$${state.cost.toFixed(6)}`; $("t-events").textContent = state.count.toLocaleString();
    });
  }

  monitorSocket(`/ws/runs/${runId}/`, {
    lastSeq: () => state.lastSeq,
    onState: setLive,
    onMessage(m) {
      if (m.message !== "events") return;
      for (const e of m.events) {
        if (state.lastSeq !== null && e.seq <= state.lastSeq) continue;
        state.lastSeq = e.seq; state.count += 1;
        logEvent(e); apply(e);
        document.dispatchEvent(new CustomEvent("monitor:event", { detail: e }));  // approvals.js listens
      }
      redraw();
    },
  });
  drawDag();
})();
