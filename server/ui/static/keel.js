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
    } else {
      conv.appendChild(fresh);
      fresh.classList.add("new");
    }
    if (fresh.querySelector(".files-note")) filesDue = true;
    markBusy();
  });
  es.addEventListener("row", (e) => {
    if (document.getElementById("e" + e.lastEventId)) return; // seen already
    tbody.insertAdjacentHTML("beforeend", e.data);
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
