// The start form (templates/monitor/start_form.html): the fields of what is chosen are shown, the others hidden
// and disabled (a disabled field is neither required nor sent).
"use strict";
(function () {
  const target = document.getElementById("start-target");
  if (!target) return;
  function show() {
    const value = target.value, kind = value.split(":")[0];
    for (const fields of document.querySelectorAll("#start-run .start-fields")) {
      const on = fields.dataset.for === value || (fields.dataset.for === "agent" && kind === "agent");
      fields.hidden = !on; fields.disabled = !on;
    }
  }
  target.addEventListener("change", show);
  show();
})();
