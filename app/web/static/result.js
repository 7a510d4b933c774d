// Replace a live section (data-poll: its URL) with a fresh copy every half second until its
// data-finished says it is done: a submission being graded, a regrade in progress.
// Without JavaScript, a <noscript> meta refresh reloads the whole page instead.
"use strict";
(function () {
  const INTERVAL_MS = 500;

  async function poll(section) {
    if (section.dataset.finished === "true") return;
    try {
      const response = await fetch(section.dataset.poll, { cache: "no-store", credentials: "same-origin" });
      if (response.ok) {
        const holder = document.createElement("div");
        holder.innerHTML = await response.text();
        const fresh = holder.querySelector("[data-poll]");
        if (fresh) {
          // Update in place: screen readers announce changes inside an existing live region.
          section.className = fresh.className;
          section.dataset.finished = fresh.dataset.finished;
          section.innerHTML = fresh.innerHTML;
          document.dispatchEvent(new CustomEvent("loopgrade:updated", { detail: section }));
          if (fresh.dataset.finished === "true") return;
        }
      }
    } catch (error) {
      // The server may be restarting; keep trying.
    }
    setTimeout(function () { poll(section); }, INTERVAL_MS);
  }

  document.querySelectorAll("[data-poll]").forEach(function (section) {
    setTimeout(function () { poll(section); }, INTERVAL_MS);
  });
})();
