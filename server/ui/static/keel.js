// Keel web UI: the pages are rendered by the server; this script only
// keeps them live. A run page follows its run's Server-Sent Events
// (conversation entries, raw event rows and the header, all rendered by
// the server); lists refresh their rendered fragment.
"use strict";

// followRun keeps the run page live: "item" messages are conversation
// entries (an entry with the id of one shown replaces it: a call's
// result, its approval), "row" messages the raw events, "summary" the
// header with the approvals and the actions that apply now.
function followRun(conv) {
  const tbody = document.getElementById("events");
  const es = new EventSource(conv.dataset.stream);
  let filesDue = false;
  // seen is the newest event shown (a row's id); live the model's text
  // as it streams (streamed() below), removed once an event after it
  // arrives.
  let seen = 0;
  const live = streamed(conv);
  const output = callOutput();
  es.addEventListener("item", (e) => {
    const tmp = document.createElement("div");
    tmp.innerHTML = e.data;
    const fresh = tmp.firstElementChild;
    if (!fresh) return;
    const old = document.getElementById(fresh.id);
    if (old) {
      // Keep a call the person opened or closed as it was.
      const d = old.querySelector("details"), n = fresh.querySelector("details");
      if (d && n && d.dataset.touched) { n.open = d.open; n.dataset.touched = "1"; }
      old.replaceWith(fresh);
      output.rendered(fresh);
    } else {
      conv.appendChild(fresh);
      fresh.classList.add("new");
    }
    if (fresh.querySelector(".files-note")) filesDue = true;
    markBusy();
  });
  es.addEventListener("row", (e) => {
    seen = Math.max(seen, Number(e.lastEventId) || 0);
    live.drop(seen);
    if (document.getElementById("e" + e.lastEventId)) return; // seen already
    tbody.insertAdjacentHTML("beforeend", e.data);
  });
  es.addEventListener("delta", (e) => {
    const d = JSON.parse(e.data);
    if (d.call_id) output.add(d); else live.add(d, seen);
  });
  // The session's token was revoked: stop, and reload (to the sign-in
  // page) instead of reconnecting.
  es.addEventListener("end", () => {
    es.close();
    location.reload();
  });
  es.addEventListener("summary", (e) => {
    const box = document.getElementById("summary");
    const a = document.activeElement;
    if (box.contains(a) && (a.tagName === "INPUT" || a.tagName === "TEXTAREA") && a.value !== "") return; // someone is typing
    box.innerHTML = e.data;
    markBusy();
    if (filesDue) { filesDue = false; refreshFiles(); }
  });
  markBusy();
}

// streamed shows the model call in progress: "delta" messages of the
// feed carry its text (escaped by the server, set here as text, never as
// HTML) with the byte range [offset, end) of the call's text they
// cover. A delta at offset 0 starts the text over (a reconnect, a new
// call); the next one continues it; a delta older than the newest event
// shown is stale. The journaled message replaces it when it arrives.
function streamed(conv) {
  let box = null, key = "", have = 0, after = 0;
  const drop = (seen) => {
    if (box && seen > after) { box.remove(); box = null; key = ""; have = 0; }
  };
  const add = (d, seen) => {
    if (d.after < seen) return;
    const k = d.after + ":" + d.call;
    if (!box || k !== key) {
      if (d.offset !== 0) return;
      drop(Infinity);
      box = document.createElement("div");
      box.className = "item live";
      box.id = "live-model";
      box.innerHTML = '<div class="msg assistant streaming"><div class="who"></div><div class="text"></div><div class="notes"></div></div>';
      box.querySelector(".who").textContent = "model · writing…";
      conv.appendChild(box);
      key = k; have = 0; after = d.after;
    }
    const text = box.querySelector(".text");
    if (d.text) {
      if (d.offset === 0) { text.textContent = d.text; have = d.end; }
      else if (d.offset === have) { text.textContent += d.text; have = d.end; }
    }
    if (d.tool || d.retry) {
      const n = document.createElement("div");
      n.textContent = d.tool ? "→ writing a " + d.tool + " call" : "model " + d.retry;
      box.querySelector(".notes").appendChild(n);
    }
  };
  return { add, drop };
}

// callOutput shows what running commands print: "delta" messages with
// a call_id carry pieces of its output (escaped by the server, set here
// as text) with the byte range [offset, end) they cover. A piece at the
// end of what the page has is appended; one that starts before it (a
// reconnect) replaces it; one past it follows a gap the server did not
// keep ("[…]"). The page keeps the last 60 lines, under the call's
// arguments, until the call's journaled result replaces the call.
function callOutput() {
  const outs = new Map(); // call id → {have, text}
  const show = (id) => {
    const o = outs.get(id);
    const el = document.getElementById("call-" + id);
    const d = el && el.querySelector("details.call.running");
    if (!o || !d) return;
    let pre = d.querySelector("pre.live-output");
    if (!pre) {
      pre = document.createElement("pre");
      pre.className = "output live-output";
      d.appendChild(pre);
    }
    pre.textContent = o.text;
  };
  const add = (d) => {
    let o = outs.get(d.call_id);
    if (!o) { o = { have: 0, text: "" }; outs.set(d.call_id, o); }
    if (d.end <= o.have && d.offset !== 0) return;
    if (d.offset < o.have || d.offset === 0) o.text = d.output;
    else if (d.offset === o.have) o.text += d.output;
    else o.text += "\n[…]\n" + d.output;
    o.have = d.end;
    const lines = o.text.split("\n");
    if (lines.length > 61) o.text = lines.slice(lines.length - 61).join("\n");
    show(d.call_id);
  };
  // rendered is told of each call rendered again: a running one keeps
  // its live output, a finished one shows its journaled result.
  const rendered = (el) => {
    if (!el.id || !el.id.startsWith("call-")) return;
    const id = el.id.slice(5);
    if (el.querySelector("details.call.running")) show(id); else outs.delete(id);
  };
  return { add, rendered };
}

// markBusy hides the rewind and fork buttons of checkpoints while the run
// executes.
function markBusy() {
  const st = document.getElementById("run-status");
  document.body.classList.toggle("busy", !!(st && st.dataset.busy));
}

async function refreshFiles() {
  const box = document.getElementById("files");
  if (!box) return;
  try {
    const r = await fetch(box.dataset.files, { credentials: "same-origin" });
    if (!r.ok) return;
    const tmp = document.createElement("div");
    tmp.innerHTML = await r.text();
    const fresh = tmp.firstElementChild;
    if (fresh) document.getElementById("files").replaceWith(fresh);
  } catch (_) { /* try again with the next change */ }
}

function refreshEvery(el, ms) {
  const url = el.dataset.refresh;
  setInterval(async () => {
    if (el.contains(document.activeElement) && document.activeElement.tagName === "INPUT") return;
    try {
      const r = await fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } });
      if (!r.ok) return;
      const html = await r.text();
      const tmp = document.createElement("div");
      tmp.innerHTML = html;
      const fresh = tmp.firstElementChild;
      const target = fresh && document.getElementById(fresh.id);
      if (target) target.replaceWith(fresh);
    } catch (_) { /* the server may be restarting: try again next time */ }
  }, ms);
}

document.addEventListener("DOMContentLoaded", () => {
  const conv = document.getElementById("conversation");
  if (conv) followRun(conv);
  // A call opened or closed by hand stays so when it is rendered again.
  document.addEventListener("click", (e) => {
    const s = e.target.closest && e.target.closest("details.call > summary");
    if (s) s.parentElement.dataset.touched = "1";
  });
  for (const el of document.querySelectorAll("[data-refresh]")) refreshEvery(el, 2000);
});
