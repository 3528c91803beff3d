// "Save as eval case" on the run page: once the run has finished, an editor adds it to a dataset through
// POST /api/runs/<id>/eval-case (the page's session and CSRF token). The datasets of the run's agent (or
// workflow) are offered from GET /api/evals; a name not among them creates the dataset. A run still going
// shows the form when run.js hears its run_complete (re-dispatched as a "monitor:event" DOM event).
"use strict";
(function () {
  const box = document.getElementById("eval-case");
  if (!box) return;
  const form = document.getElementById("eval-case-form"), outcome = document.getElementById("eval-case-outcome");
  const { run, team, csrf, agent, workflow, datasetUrl } = box.dataset;
  const FINAL = new Set(["succeeded", "failed", "cancelled"]);
  const field = (name) => form.elements.namedItem(name);
  let offered = false;

  async function offerDatasets() {
    if (offered) return;
    offered = true;
    const response = await fetch("/api/evals", { credentials: "same-origin", headers: { "X-MAS-Team": team } });
    if (!response.ok) return;
    const list = document.getElementById("eval-datasets");
    for (const dataset of await response.json()) {
      if ((agent && dataset.agent === agent) || (workflow && dataset.workflow === workflow)) {
        const option = document.createElement("option");
        option.value = dataset.slug; option.label = dataset.name;
        list.appendChild(option);
      }
    }
  }

  function show(text, failed) {
    outcome.textContent = text; outcome.className = failed ? "error" : "saved"; outcome.hidden = false;
  }

  // Saved: the message, and a link to the dataset's page in the admin (its cases, its versions, Run eval…).
  function saved(data) {
    const cases = data.cases || [];
    show(`Saved as case ${cases[cases.length - 1].id} of ${data.slug} (version ${data.version}, ` +
         `${cases.length} ${cases.length === 1 ? "case" : "cases"}). `, false);
    const link = document.createElement("a");
    link.id = "eval-case-dataset"; link.href = datasetUrl.replace("__slug__", encodeURIComponent(data.slug));
    link.textContent = `Open the dataset ${data.slug}`;
    outcome.appendChild(link);
  }

  function problem(data, status) {
    const detail = data && data.detail;
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) return detail.map((item) => `${(item.loc || []).slice(-1)[0]}: ${item.msg}`).join("; ");
    return `the server answered ${status}`;
  }

  document.addEventListener("monitor:event", (event) => {
    const e = event.detail;
    if (e.type === "run_complete" && FINAL.has((e.data || {}).status)) { box.hidden = false; offerDatasets(); }
  });
  if (!box.hidden) offerDatasets();

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button[type=submit]");
    button.disabled = true; outcome.hidden = true;
    try {
      const response = await fetch(`/api/runs/${run}/eval-case`, {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf, "X-MAS-Team": team },
        body: JSON.stringify({ dataset: field("dataset").value.trim(), case_id: field("case_id").value.trim() }),
      });
      const data = await response.json().catch(() => null);
      if (response.status === 201) {
        saved(data);
      } else {
        show(`Not saved: ${problem(data, response.status)}`, true);
      }
    } catch (error) {
      show(`Not saved: ${error}`, true);
    } finally {
      button.disabled = false;
    }
  });
})();
