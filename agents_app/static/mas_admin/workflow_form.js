// The workflow form's step graph: drawn from the step and loop rows as they are, redrawn at every change,
// with the monitor's drawing code (monitor/dag.js). Nothing is sent to the server for it.
(function () {
  "use strict";
  function list(text) {
    return String(text || "").split(",").map(function (item) { return item.trim(); }).filter(Boolean);
  }
  function cell(row, key) {
    var input = row.querySelector("[name$='-" + key + "']");
    return input ? input.value : "";
  }
  function rows(name) {
    var owner = document.querySelector(".mas-rows[data-name=" + name + "]");
    return owner ? Array.prototype.slice.call(owner.querySelectorAll(":scope > .mas-row-list > .mas-row")) : [];
  }
  function read() {
    var steps = rows("steps").map(function (row) {
      return { id: cell(row, "id").trim(), agent: cell(row, "agent").trim(), depends_on: list(cell(row, "depends_on")) };
    }).filter(function (step) { return step.id; });
    var loops = rows("loops").map(function (row) {
      return { steps: list(cell(row, "steps")), until: cell(row, "until").trim(), max_rounds: cell(row, "max_rounds") || "?" };
    }).filter(function (loop) { return loop.steps.length; });
    return { steps: steps, loops: loops };
  }
  var pending = false;
  function redraw() {
    var svg = document.getElementById("mas-step-graph");
    if (!svg || pending) return;
    pending = true;
    requestAnimationFrame(function () {
      pending = false;
      var drawn = workflowGraph.draw(svg, read());
      var note = document.getElementById("mas-step-graph-note");
      note.hidden = drawn.blocked.size === 0;
      note.textContent = drawn.blocked.size ? "On a cycle, or after one (these cannot run): " +
        Array.from(drawn.blocked).join(", ") : "";
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (!document.getElementById("mas-step-graph")) return;
    document.querySelectorAll(".mas-rows[data-name=steps], .mas-rows[data-name=loops]").forEach(function (owner) {
      owner.addEventListener("input", redraw);
      owner.addEventListener("change", redraw);
    });
    redraw();
  });
})();
