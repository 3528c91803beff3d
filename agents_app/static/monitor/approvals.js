// People in the loop on the run page: the run's requests for a person, rebuilt from its events
// (approval_requested, human_question, approval_decided, run_status, run_complete) as run.js
// receives them (it re-dispatches each one as a "monitor:event" DOM event), with buttons that
// decide a pending one through POST /api/approvals/<id> (the page's session and CSRF token).
// Viewers see the requests without buttons. The event log's lines of these types are made readable.
"use strict";
(function () {
  const box = document.getElementById("approvals");
  if (!box) return;
  const list = document.getElementById("approval-list");
  const canDecide = box.dataset.canDecide === "1", team = box.dataset.team, csrf = box.dataset.csrf;
  const cards = new Map(); // request id -> card element
  const FINAL = new Set(["succeeded", "failed", "cancelled"]);

  function node(tag, attrs = {}, text) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") el.className = v; else if (k.startsWith("data-")) el.setAttribute(k, v); else el[k] = v;
    }
    if (text !== undefined) el.textContent = text;
    return el;
  }
  const quote = (text, max = 120) => (text.length > max ? `“${text.slice(0, max - 1)}…”` : `“${text}”`);
  const compact = (value, max = 140) => { const s = JSON.stringify(value ?? {}); return s.length > max ? s.slice(0, max - 1) + "…" : s; };

  // -- the cards -------------------------------------------------------------------------------
  function card(e) {
    const d = e.data || {};
    if (cards.has(d.request)) return;
    const el = node("div", { class: "approval pending", "data-request": d.request, "data-kind": d.kind,
                             "data-status": "pending", "data-agent": e.agent });
    const head = node("div", { class: "what" });
    head.appendChild(node("b", {}, e.agent));
    if (d.kind === "question") {
      head.appendChild(document.createTextNode(" asks: "));
      el.appendChild(head);
      el.appendChild(node("p", { class: "question" }, d.question));
    } else if (d.kind === "answer") {
      head.appendChild(document.createTextNode(" holds its answer"));
      el.appendChild(head);
      el.appendChild(node("pre", { class: "result" }, d.arguments?.answer ?? ""));
    } else {
      head.appendChild(document.createTextNode(d.kind === "gate" ? " waits at a gate: "
        : d.kind === "result" ? " holds the result of " : " wants to call "));
      head.appendChild(node("code", { class: "tool" }, d.call?.name || ""));
      el.appendChild(head);
      el.appendChild(d.kind === "result" ? node("pre", { class: "result" }, d.arguments?.result ?? "")
        : node("pre", { class: "arguments" }, JSON.stringify(d.arguments ?? {}, null, 2)));
    }
    const deadline = d.deadline ? new Date(d.deadline).toLocaleString() : "";
    el.appendChild(node("p", { class: "why" }, `${d.reason || ""}${deadline ? ` · deadline ${deadline}, then ${d.default}` : ""}`));
    if (canDecide) el.appendChild(actions(d)); else el.appendChild(node("p", { class: "view-only" },
      "Waiting for an operator or admin to decide."));
    el.appendChild(node("p", { class: "outcome", hidden: true }));
    el.appendChild(node("p", { class: "error", hidden: true }));
    cards.set(d.request, el); list.appendChild(el); box.hidden = false;
  }

  // A button that opens an editor of ``value``, and the editor: its approve button gives ``approve`` the text.
  function editing(label, cls, value, approveLabel, approve) {
    const edit = node("button", { type: "button", class: "edit secondary" }, label);
    const editor = node("div", { class: "editor", hidden: true });
    const text = node("textarea", { class: cls, rows: 8, spellcheck: false });
    text.value = value;
    const approveEdited = node("button", { type: "button", class: "approve-edited" }, approveLabel);
    approveEdited.addEventListener("click", () => approve(text.value));
    edit.setAttribute("aria-expanded", "false");
    edit.addEventListener("click", () => {
      editor.hidden = !editor.hidden; edit.setAttribute("aria-expanded", String(!editor.hidden));
      if (!editor.hidden) text.focus();
    });
    editor.append(text, approveEdited);
    return [edit, editor];
  }

  function actions(d) {
    const bar = node("div", { class: "actions" });
    const decide = (body) => send(d.request, body, bar);
    if (d.kind === "question") {
      if ((d.choices || []).length) {
        for (const choice of d.choices) {
          const b = node("button", { type: "button", class: "choice", "data-choice": choice }, choice);
          b.addEventListener("click", () => decide({ decision: "answer", answer: choice }));
          bar.appendChild(b);
        }
      } else {
        const answer = node("textarea", { class: "answer", rows: 2, placeholder: "Your answer" });
        const send_ = node("button", { type: "button", class: "answer-send" }, "Answer");
        send_.addEventListener("click", () => decide({ decision: "answer", answer: answer.value }));
        bar.append(answer, send_);
      }
    } else {
      const approve = node("button", { type: "button", class: "approve" }, "Approve");
      approve.addEventListener("click", () => decide({ decision: "approve" }));
      bar.appendChild(approve);
      if (d.kind === "approval") {
        bar.append(...editing("Edit arguments", "edit-arguments", JSON.stringify(d.arguments ?? {}, null, 2),
          "Approve with these arguments", (value) => {
            let args;
            try { args = JSON.parse(value); } catch (err) { return showError(bar, `The arguments are not JSON: ${err.message}`); }
            decide({ decision: "approve", arguments: args });
          }));
      } else if (d.kind === "result" || d.kind === "answer") {  // the person may let the content go on changed
        const key = d.kind;
        bar.append(...editing(`Edit the ${key}`, "edit-result", d.arguments?.[key] ?? "",
          key === "result" ? "Let the model read this" : "Let this answer out",
          (value) => decide({ decision: "approve", arguments: { [key]: value } })));
      }
    }
    const reject = node("div", { class: "reject" });
    const message = node("input", { type: "text", class: "reject-message", maxLength: 10000,
                                    placeholder: d.kind === "question" ? "Why you do not answer (optional)"
                                      : "Message to the agent: why, what to do instead" });
    const rejectButton = node("button", { type: "button", class: "reject-send danger" },
                              d.kind === "question" ? "Decline" : "Reject");
    rejectButton.addEventListener("click", () => decide({ decision: "reject", message: message.value }));
    reject.append(message, rejectButton);
    bar.appendChild(reject);
    return bar;
  }

  function showError(bar, text) {
    const error = bar.parentElement.querySelector(".error");
    error.textContent = text; error.hidden = false;
  }

  async function send(requestId, body, bar) {
    for (const b of bar.querySelectorAll("button")) b.disabled = true;
    bar.parentElement.querySelector(".error").hidden = true;
    let response, answer = {};
    try {
      response = await fetch(`/api/approvals/${requestId}`, {
        method: "POST", credentials: "same-origin", body: JSON.stringify(body),
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf, "X-MAS-Team": team },
      });
      answer = await response.json().catch(() => ({}));
    } catch (err) {
      for (const b of bar.querySelectorAll("button")) b.disabled = false;
      return showError(bar, `The decision was not sent: ${err.message}`);
    }
    if (response.ok) return decided(requestId, { status: answer.status, by: answer.decided_by, ...answer.decision });
    const detail = Array.isArray(answer.detail) ? answer.detail.map((p) => p.msg).join("; ") : answer.detail;
    showError(bar, detail || `Refused (${response.status})`);
    if (response.status === 409) bar.remove(); // decided already, or the run ended: nothing to click any more
    else for (const b of bar.querySelectorAll("button")) b.disabled = false;
  }

  function outcomeText(d) {
    const by = d.by || "the system";
    if (d.status === "expired") return `No one decided before the deadline: ${d.decision} applied by the system.`;
    if (d.status === "answered") return `Answered by ${by}: ${quote(d.answer || "")}`;
    if (d.status === "rejected") return `Rejected by ${by}${d.message ? `: ${quote(d.message)}` : "."}`;
    if (d.status === "approved") return `Approved by ${by}${d.arguments ? " with edited arguments" : ""}.`;
    return `${d.status} by ${by}.`;
  }

  function decided(requestId, d) {
    const el = cards.get(requestId);
    if (!el || el.dataset.status !== "pending") return;
    el.dataset.status = d.status; el.classList.remove("pending"); el.classList.add(d.status);
    el.querySelector(".actions")?.remove(); el.querySelector(".view-only")?.remove();
    el.querySelector(".error").hidden = true;
    const outcome = el.querySelector(".outcome");
    outcome.textContent = outcomeText(d); outcome.hidden = false;
    if (d.arguments) {
      el.querySelector(".arguments").textContent = JSON.stringify(d.arguments, null, 2);
    }
  }

  function runEnded(status) {
    for (const [id, el] of cards) {
      if (el.dataset.status === "pending") decided(id, { status: "cancelled", by: `the run (${status})` });
    }
  }

  // -- readable event lines ----------------------------------------------------------------------
  function line(e) {
    const d = e.data || {};
    switch (e.type) {
      case "approval_requested":
        if (d.kind === "gate") return `waits at ${d.call?.name} for approval: ${d.reason}`;
        if (d.kind === "result") return `holds the result of ${d.call?.name} for a person: ${d.reason}`;
        if (d.kind === "answer") return `holds its answer for a person: ${d.reason}`;
        return `asks to call ${d.call?.name} ${compact(d.arguments)} — ${d.reason}`;
      case "human_question":
        return `asks a person: ${quote(d.question || "")}${(d.choices || []).length ? ` [${d.choices.join(" | ")}]` : ""}`;
      case "approval_decided": return outcomeText(d);
      case "run_status": return d.status === "waiting" ? `run waiting for a person (${d.pending} pending)` : `run ${d.status}`;
    }
    return null;
  }

  function setStatus(status) {
    const el = document.getElementById("status");
    if (!el || FINAL.has(el.textContent)) return;
    el.className = `status ${status}`; el.textContent = status;
  }

  document.addEventListener("monitor:event", (ev) => {
    const e = ev.detail, d = e.data || {};
    const text = line(e);
    if (text) {
      const summary = document.querySelector(`#events tr[data-seq="${e.seq}"] summary`);
      if (summary) summary.textContent = text;
    }
    switch (e.type) {
      case "approval_requested": case "human_question": card(e); break;
      case "approval_decided": decided(d.request, d); break;
      case "run_status": setStatus(d.status); break;
      case "run_complete": runEnded(d.status); break;
    }
  });
})();
