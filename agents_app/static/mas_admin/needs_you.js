// The dashboard's "Needs you" block (agents_app/needs_you.py): a request is decided where it is shown. Each button
// posts to POST /api/approvals/<id> — the endpoint, checks and service of the monitor and the API — with the
// page's session, its CSRF token and the board's team; the row then says what was decided, or why it was refused.
(function () {
  "use strict";
  function outcome(answer) {
    var by = answer.decided_by || "the system", decision = answer.decision || {};
    if (answer.status === "answered") return "Answered by " + by + ": “" + (decision.answer || "") + "”";
    if (answer.status === "rejected") return (answer.kind === "question" ? "Declined by " : "Rejected by ") + by +
      (decision.message ? ": “" + decision.message + "”" : ".");
    if (answer.status === "approved") return "Approved by " + by + ".";
    return answer.status + " by " + by + ".";
  }
  function problem(answer, status) {
    var detail = answer && answer.detail;
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) return detail.map(function (part) { return part.msg; }).join("; ");
    return "Refused (" + status + ")";
  }
  function decrement(block, kind) {
    var figure = block.querySelector("[data-count=" + (kind === "question" ? "questions" : "approvals") + "] .mas-number");
    if (figure) figure.textContent = String(Math.max(0, Number(figure.textContent) - 1));
  }
  function settle(item, block, answer) {
    item.dataset.status = answer.status;
    var actions = item.querySelector(".mas-need-actions");
    if (actions) actions.remove();
    item.querySelector(".mas-need-error").hidden = true;
    var done = item.querySelector(".mas-need-outcome");
    done.textContent = outcome(answer);
    done.hidden = false;
    decrement(block, item.dataset.kind);
  }
  function body(button, item) {
    var decision = button.dataset.decision;
    if (decision === "answer") {
      var typed = item.querySelector(".mas-need-answer");
      return { decision: "answer", answer: button.dataset.answer !== undefined ? button.dataset.answer : typed.value };
    }
    return { decision: decision };
  }
  async function decide(button) {
    var item = button.closest(".mas-need"), block = button.closest(".mas-needs");
    var buttons = item.querySelectorAll(".mas-need-actions button"), error = item.querySelector(".mas-need-error");
    buttons.forEach(function (b) { b.disabled = true; });
    error.hidden = true;
    var response, answer = {};
    try {
      response = await fetch("/api/approvals/" + item.dataset.request, {
        method: "POST", credentials: "same-origin", body: JSON.stringify(body(button, item)),
        headers: { "Content-Type": "application/json", "X-CSRFToken": block.dataset.csrf, "X-MAS-Team": block.dataset.team },
      });
      answer = await response.json().catch(function () { return {}; });
    } catch (err) {
      buttons.forEach(function (b) { b.disabled = false; });
      error.textContent = "The decision was not sent: " + err.message;
      error.hidden = false;
      return;
    }
    if (response.ok) return settle(item, block, answer);
    error.textContent = problem(answer, response.status);
    error.hidden = false;
    if (response.status === 409) {  // decided already, or its run ended: nothing left to click
      item.querySelector(".mas-need-actions").remove();
      item.dataset.status = "gone";
    } else {
      buttons.forEach(function (b) { b.disabled = false; });
    }
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest(".mas-needs[data-can-decide='1'] .mas-need-actions button[data-decision]");
    if (button) decide(button);
  });
})();
