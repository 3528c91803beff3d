// "Fork from here" on each event of a run, finished or still going (a running run forks from its history
// committed by then): the form above the table gets the event's seq
// (and, for a tool event, an optional result for that tool call) and posts it; the server opens the fork.
(function () {
  const form = document.getElementById("fork-form");
  const rows = document.getElementById("events");
  if (!form || !rows) return;
  const TOOL_EVENTS = ["tool_call", "tool_result"];

  function offer(tr) {
    if (tr.querySelector(".fork-here")) return;
    const button = document.createElement("button");
    button.type = "button"; button.className = "link small fork-here"; button.textContent = "Fork from here";
    button.addEventListener("click", () => choose(tr));
    tr.cells[0].appendChild(button);  // monitor.css: below the number on a desk, beside it on a phone
  }

  function choose(tr) {
    form.elements.seq.value = tr.dataset.seq;
    document.getElementById("fork-seq").textContent = `#${tr.dataset.seq} (${tr.dataset.type})`;
    const tool = TOOL_EVENTS.includes(tr.dataset.type);
    document.getElementById("fork-tool").hidden = !tool;
    if (!tool) { form.elements.edit.checked = false; form.elements.tool_result.value = ""; }
    form.hidden = false;
    form.scrollIntoView({ block: "nearest" });
  }

  document.getElementById("fork-close").addEventListener("click", () => { form.hidden = true; });

  for (const tr of rows.rows) offer(tr);
  new MutationObserver((changes) => {
    for (const change of changes) for (const node of change.addedNodes) if (node.tagName === "TR") offer(node);
  }).observe(rows, { childList: true });
})();
