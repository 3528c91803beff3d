// One line a person wants to read per event ("researcher called vfs_write notes.md (121 B)");
// the event's whole JSON stays one click away in the log.
"use strict";
const describeEvent = (function () {
  const MAX = 180;
  const enc = new TextEncoder();
  const clip = (text, n = 80) => {
    const s = String(text ?? "").replace(/\s+/g, " ").trim();
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  };
  const quote = (text, n) => (text ? `“${clip(text, n)}”` : "");
  // What a guardrail's action did to what it found (agents_app/execution/guardrails.py).
  const GUARDED = {block: "blocked", redact: "redacted", mask: "masked", warn: "flagged", fence: "fenced",
                   ask: "held for a person"};
  // Where a guardrail checked, when its name with spaces does not read well.
  const GUARDED_AT = {outgoing: "outgoing notification"};
  const bytes = (n) => (n >= 1024 * 1024 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${(n / 1024).toFixed(1)} kB` : `${n} B`);
  const num = (n) => Number(n || 0).toLocaleString("en-US");
  const money = (v) => {
    const n = Number(v || 0);
    if (!n) return "$0";
    return n < 0.01 ? `$${n.toPrecision(2)}` : `$${n.toFixed(4)}`;
  };
  const who = (e) => e.agent || "run";
  const TARGETS = ["path", "url", "query", "agent", "name", "key", "channel", "filename", "skill", "command"];

  function toolTarget(args) {
    if (!args || typeof args !== "object") return "";
    for (const key of TARGETS) {
      if (typeof args[key] === "string" && args[key]) {
        const extra = typeof args.content === "string" ? ` (${bytes(enc.encode(args.content).length)})` : "";
        return ` ${clip(args[key], 60)}${extra}`;
      }
    }
    const keys = Object.keys(args);
    return keys.length ? ` (${keys.slice(0, 4).join(", ")}${keys.length > 4 ? ", …" : ""})` : "";
  }
  // What a suspended session waits for, from the counts its event carries (events recorded before them: the reason).
  function awaits(d) {
    if (d.children === undefined) return d.reason === "children" ? "its children" : "a person";
    const parts = [];
    if (d.approvals) parts.push(d.approvals === 1 ? "an approval" : `${num(d.approvals)} approvals`);
    if (d.questions) parts.push(d.questions === 1 ? "a person's answer" : `${num(d.questions)} answers from people`);
    if (d.children) parts.push(d.children === 1 ? "its child" : `its ${num(d.children)} children`);
    if (!parts.length) return "nothing any more (it resumes)";
    return parts.length === 1 ? parts[0] : `${parts.slice(0, -1).join(", ")} and ${parts.at(-1)}`;
  }
  function generic(e) {
    const parts = Object.entries(e.data || {}).filter(([, v]) => v !== null && v !== "" && typeof v !== "object")
      .slice(0, 4).map(([k, v]) => `${k} ${clip(v, 40)}`);
    return `${who(e)} · ${e.type.replace(/_/g, " ")}${parts.length ? ": " + parts.join(", ") : ""}`;
  }

  const RULES = {
    run_start: (e, d) => `run started${d.workflow ? ` (workflow ${d.workflow})` : d.agent ? ` with ${d.agent}` : ""}${d.input ? ": " + quote(d.input, 100) : ""}${d.forked_from ? ` — forked from event #${d.fork_seq} of run ${d.forked_from.slice(0, 8)}` : ""}`,
    run_complete: (e, d) => `run ${d.status}${d.duration_s !== undefined ? ` in ${Number(d.duration_s).toFixed(1)} s` : ""}`
      + (d.prompt_tokens !== undefined ? `, ${num(d.prompt_tokens)} + ${num(d.completion_tokens)} tokens, ${money(d.cost_usd)}` : "")
      + (d.error ? ` — ${clip(d.error, 80)}` : ""),
    run_status: (e, d) => `run is ${d.status}`,
    activation_queued: (e, d) => `${who(e)} ${d.restored ? "restored" : "queued"} (${d.kind}${d.depth ? `, depth ${d.depth}` : ""}${d.restored ? `, ${d.checkpoints} checkpoint entries` : ""})`,
    session_start: (e, d) => `${who(e)} ${d.resumed ? "resumed" : "started"} (${d.kind || "session"}, attempt ${d.attempt || 1}${d.tier ? ", " + d.tier + " tier" : ""})`,
    session_end: (e, d) => `${who(e)} ended: ${d.status}${d.result ? " — " + quote(d.result, 90) : ""}${d.failure && d.failure.message ? " — " + clip(d.failure.message, 90) : ""}`,
    session_suspended: (e, d) => `${who(e)} suspended: waits for ${awaits(d)}`,
    children_cancelled: (e, d) => `${who(e)} cancelled ${(d.activations || []).length} unfinished child(ren): ${clip(d.reason, 80)}`,
    llm_request: (e, d) => `${who(e)} asked ${d.model || "the model"}${d.purpose ? ` (${d.purpose})` : ""}: ${num(d.messages)} messages, ${num(d.tools)} tools${d.step ? `, step ${d.step}` : ""}`,
    llm_response: (e, d) => {
      const usage = d.usage || {}, calls = (d.tool_calls || []).map((c) => c.name);
      const what = calls.length ? `calls ${calls.join(", ")}` : quote(d.text, 80) || "(no text)";
      return `${d.model || "model"} answered ${who(e)}${d.cached ? " from the cache" : ""}: ${what} · ${num(usage.prompt_tokens)} + ${num(usage.completion_tokens)} tokens, ${money(d.cost_usd)}`;
    },
    tool_call: (e, d) => `${who(e)} called ${d.name}${toolTarget(d.arguments)}`,
    tool_result: (e, d) => `${d.name} ${d.ok ? "→" : `failed (${d.error_kind || "error"}):`} ${clip(d.content, 90)}`,
    delegate: (e, d) => `${d.from || who(e)} delegated to ${d.to}: ${quote(d.task, 90)}`,
    spawn: (e, d) => `${d.from || who(e)} spawned ${d.to}${d.wait === false ? " (not waiting)" : ""}: ${quote(d.task, 90)}`,
    signal: (e, d) => `${d.from || who(e)} signalled ${d.to}: ${clip(d.message, 90)}`,
    file_change: (e, d) => `${who(e)} ${d.action || "changed"} ${d.path}${d.bytes !== undefined ? ` (${bytes(d.bytes)})` : ""}${d.version > 1 ? `, version ${d.version}` : ""}`,
    escalation: (e, d) => `${who(e)} escalated from ${d.from || "?"} to ${d.to || "?"}${d.to_model ? ` (${d.to_model})` : ""}${d.reason ? ": " + clip(d.reason, 60) : ""}`,
    retry: (e, d) => `${who(e)} retries ${d.what || ""} (attempt ${d.attempt}${d.delay_s !== undefined ? `, in ${d.delay_s} s` : ""}${d.reason ? `, ${d.reason}` : ""})`,
    budget_warning: (e, d) => `budget warning: ${money(d.cost_usd)} spent of a ${money(d.warn_cost_usd)} warning line`,
    stream_chunk: (e, d) => `${who(e)} writes ${quote(d.text, 80)}`,
    workflow_start: (e, d) => `workflow ${d.workflow || d.mode || ""} started${d.trigger ? ` (${d.trigger})` : ""}`,
    workflow_complete: (e, d) => `workflow ${d.status || "finished"}`,
    step_start: (e, d) => `step ${d.step} started${d.round ? ` (round ${d.round})` : ""}`,
    step_complete: (e, d) => `step ${d.step} succeeded${d.round ? ` (round ${d.round})` : ""}`,
    step_failed: (e, d) => `step ${d.step} failed${d.error ? ": " + clip(d.error, 90) : ""}`,
    step_skipped: (e, d) => `step ${d.step} skipped${d.reason ? ": " + clip(d.reason, 90) : ""}`,
    step_retry: (e, d) => `step ${d.step} retried${d.attempt ? ` (attempt ${d.attempt})` : ""}`,
    loop_round: (e, d) => `loop round ${d.round}: ${(d.steps || []).join(", ")}`,
    memory_stored: (e, d) => `${who(e)} stored a memory${d.text ? ": " + quote(d.text, 80) : ""}`,
    blackboard_write: (e, d) => `${who(e)} wrote ${d.key} on the blackboard`,
    blackboard_read: (e, d) => `${who(e)} read ${d.key} from the blackboard`,
    channel_publish: (e, d) => `${who(e)} published on ${d.channel}`,
    channel_subscribe: (e, d) => `${who(e)} subscribed to ${d.channel}`,
    guardrail_triggered: (e, d) => `guardrail ${d.guardrail} ${GUARDED[d.action] || d.action} the ${GUARDED_AT[d.where] || (d.where || "").replace(/_/g, " ")}${d.event ? ` (${d.event})` : ""}${d.tool ? ` of ${d.tool}` : ""}: ${clip(d.excerpt, 80)}`,
  };

  return function describe(e) {
    const rule = RULES[e.type];
    let line;
    try { line = rule ? rule(e, e.data || {}) : generic(e); } catch (_) { line = generic(e); }
    return clip(line, MAX);
  };
})();
