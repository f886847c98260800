// Keel web UI: the pages are rendered by the server; this script only
// keeps them live. A timeline follows its run's Server-Sent Events (rows
// rendered by the server); lists refresh their rendered fragment.
"use strict";

function followTimeline(table) {
  const tbody = document.getElementById("events");
  const es = new EventSource(table.dataset.stream);
  es.addEventListener("row", (e) => {
    if (document.getElementById("e" + e.lastEventId)) return; // seen already
    tbody.insertAdjacentHTML("beforeend", e.data);
    const tr = tbody.lastElementChild;
    if (tr) tr.classList.add("new");
  });
  // The session's token was revoked: stop, and reload (to the sign-in
  // page) instead of reconnecting.
  es.addEventListener("end", () => {
    es.close();
    location.reload();
  });
  es.addEventListener("summary", (e) => {
    const box = document.getElementById("summary");
    if (box.contains(document.activeElement)) return; // someone is typing a reason
    box.innerHTML = e.data;
  });
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
  const tl = document.getElementById("timeline");
  if (tl) followTimeline(tl);
  for (const el of document.querySelectorAll("[data-refresh]")) refreshEvery(el, 2000);
});
