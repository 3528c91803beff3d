"use strict";
(function () {
  const team = JSON.parse(document.getElementById("team-slug").textContent);
  // When the server drew the table: every (re)connection asks for the changes made since.
  const since = JSON.parse(document.getElementById("since").textContent);
  const body = document.getElementById("runs");
  const fmt = (n) => Number(n).toLocaleString();
  function cell(text, cls) { const td = document.createElement("td"); if (cls) td.className = cls; td.textContent = text; return td; }
  function row(run) {
    const tr = document.createElement("tr");
    tr.dataset.run = run.id;
    const first = document.createElement("td"), a = document.createElement("a");
    a.href = `/runs/${run.id}/`; a.textContent = new Date(run.created_at).toISOString().replace("T", " ").slice(0, 19);
    first.appendChild(a); tr.appendChild(first);
    tr.appendChild(cell(run.workflow || run.agent));
    const st = document.createElement("td"), badge = document.createElement("span");
    badge.className = `status ${run.status}`; badge.textContent = run.status; st.appendChild(badge); tr.appendChild(st);
    const t = run.totals;
    tr.appendChild(cell(t.duration_s === null ? "" : `${t.duration_s.toFixed(1)} s`));
    tr.appendChild(cell(`${fmt(t.prompt_tokens)} / ${fmt(t.completion_tokens)}`));
    tr.appendChild(cell(`$${Number(t.cost_usd).toFixed(4)}`));
    tr.appendChild(cell(run.input.length > 80 ? run.input.slice(0, 79) + "…" : run.input, "task"));
    return tr;
  }
  monitorSocket(`/ws/runs/?team=${encodeURIComponent(team)}&since=${since}`, {
    onState: setLive,
    onMessage(m) {
      if (m.message !== "run") return;
      const fresh = row(m.run), old = body.querySelector(`tr[data-run="${m.run.id}"]`);
      body.querySelector("tr.empty")?.remove();
      if (old) old.replaceWith(fresh); else body.prepend(fresh);
    },
  });
})();
