"use strict";
(function () {
  const team = JSON.parse(document.getElementById("team-slug").textContent);
  // When the server drew the table: every (re)connection asks for the changes made since.
  const since = JSON.parse(document.getElementById("since").textContent);
  // New runs are added only to the first page of the unfiltered list; rows shown are always kept current.
  const liveNew = JSON.parse(document.getElementById("live-new").textContent);
  const body = document.getElementById("runs");
  const withActions = document.querySelector("table.runs thead th:last-child").textContent === "";
  const fmt = (n) => Number(n).toLocaleString("en-US");
  // As the server writes a moment (mas_project/formats): 2026-11-26 14:05, in the server's time zone.
  const zone = JSON.parse(document.getElementById("time-zone").textContent);
  const moment = new Intl.DateTimeFormat("sv-SE", { timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit",
                                                    hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  function cell(label, text, cls) {
    const td = document.createElement("td"); td.dataset.label = label;
    if (cls) td.className = cls; td.textContent = text; return td;
  }
  function cells(run) {
    const first = cell("Started", ""), a = document.createElement("a");
    a.href = `/runs/${run.id}/`; a.textContent = moment.format(new Date(run.created_at));
    first.appendChild(a);
    const st = cell("Status", ""), badge = document.createElement("span");
    badge.className = `status ${run.status}`; badge.textContent = run.status; st.appendChild(badge);
    const t = run.totals;
    return [first, cell("Agent / workflow", run.workflow || run.agent), st,
            cell("Duration", t.duration_s === null ? "" : `${t.duration_s.toFixed(1)} s`),
            cell("Tokens", `${fmt(t.prompt_tokens)} / ${fmt(t.completion_tokens)}`),
            cell("Cost", `$${Number(t.cost_usd).toFixed(4)}`),
            cell("Task", run.input.length > 80 ? run.input.slice(0, 79) + "…" : run.input, "task")];
  }
  monitorSocket(`/ws/runs/?team=${encodeURIComponent(team)}&since=${since}`, {
    onState: setLive,
    onMessage(m) {
      if (m.message !== "run") return;
      const old = body.querySelector(`tr[data-run="${m.run.id}"]`);
      if (old) {
        // The actions cell (archive, delete) stays as the server drew it.
        const fresh = cells(m.run);
        fresh.forEach((td, i) => old.cells[i].replaceWith(td));
        return;
      }
      if (!liveNew) return;
      const tr = document.createElement("tr"); tr.dataset.run = m.run.id;
      for (const td of cells(m.run)) tr.appendChild(td);
      if (withActions) tr.appendChild(cell("", "", "actions"));
      body.querySelector("tr.empty")?.remove();
      body.prepend(tr);
    },
  });
})();
