// The start form (templates/monitor/start_form.html): the fields of what is chosen are shown, the others hidden
// and disabled (a disabled field is neither required nor sent).
//
// "Try without a model": the script is sent only while its box is open. Its examples are the chosen agent's tools
// (the option's data-examples); picking one fills the script from the server (monitor-start-example) and the
// task if it is empty.
"use strict";
(function () {
  const target = document.getElementById("start-target");
  if (!target) return;
  const tryBox = document.getElementById("start-try");
  const example = document.getElementById("start-example");
  const script = document.getElementById("start-script");
  const task = document.getElementById("start-task");
  const none = document.getElementById("start-example-none");
  const problem = document.getElementById("start-example-error");

  function show() {
    const value = target.value, kind = value.split(":")[0];
    for (const fields of document.querySelectorAll("#start-run .start-fields")) {
      const on = fields.dataset.for === value || (fields.dataset.for === "agent" && kind === "agent");
      fields.hidden = !on; fields.disabled = !on;
    }
    examplesShow();
  }

  function examplesShow() {
    if (!example) return;
    const option = target.selectedOptions[0];
    const tools = option && option.dataset.examples ? option.dataset.examples.split(" ").filter(Boolean) : [];
    example.replaceChildren(new Option("a tool of the agent…", ""), ...tools.map((tool) => new Option(tool, tool)));
    example.disabled = tools.length === 0;
    none.hidden = tools.length > 0;
    problem.hidden = true;
  }

  function scriptSent() {
    script.disabled = !tryBox.open;  // closed: a run with the agent's own model
  }

  async function exampleFill() {
    problem.hidden = true;
    if (!example.value) return;
    const agent = target.value.split(":").slice(1).join(":");
    const url = `${example.dataset.url}&agent=${encodeURIComponent(agent)}&tool=${encodeURIComponent(example.value)}`;
    let answer, body;
    try {
      answer = await fetch(url, {headers: {Accept: "application/json"}, credentials: "same-origin"});
      body = await answer.json();
    } catch (error) {
      problem.textContent = `The example could not be loaded: ${error.message}`;
      problem.hidden = false;
      return;
    }
    if (!answer.ok) {
      problem.textContent = body.detail || `The example could not be loaded (${answer.status}).`;
      problem.hidden = false;
      return;
    }
    script.value = JSON.stringify(body.script, null, 2);
    if (!task.value.trim()) task.value = body.task;
  }

  target.addEventListener("change", show);
  if (tryBox) {
    tryBox.addEventListener("toggle", scriptSent);
    example.addEventListener("change", exampleFill);
    scriptSent();
  }
  show();
})();
