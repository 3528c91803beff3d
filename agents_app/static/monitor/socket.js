// A websocket that reconnects by itself, resuming after the last event it saw.
"use strict";
function monitorSocket(path, { onMessage, onState, lastSeq = () => null }) {
  let delay = 500, stopped = false;
  function open() {
    const after = lastSeq();
    const url = new URL(path, location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    if (after !== null) url.searchParams.set("after", after);
    const ws = new WebSocket(url);
    ws.onopen = () => { delay = 500; onState(true); };
    ws.onmessage = (e) => onMessage(JSON.parse(e.data));
    ws.onclose = (e) => {
      onState(false, e.code);
      if (stopped || [4400, 4401, 4404].includes(e.code)) return;
      setTimeout(open, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  open();
  return { stop() { stopped = true; } };
}
function setLive(on, code) {
  const el = document.getElementById("live");
  el.classList.toggle("off", !on);
  el.textContent = on ? "live" : (code >= 4400 ? `closed (${code})` : "reconnecting…");
}
