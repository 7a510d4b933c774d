// Replace the result section with a fresh copy every half second until grading has finished.
// Without JavaScript, a <noscript> meta refresh reloads the whole page instead.
"use strict";
(function () {
  const INTERVAL_MS = 500;

  function current() {
    return document.getElementById("result");
  }

  async function poll() {
    const section = current();
    if (!section || section.dataset.finished === "true") return;
    try {
      const response = await fetch(section.dataset.poll, { cache: "no-store" });
      if (response.ok) {
        const holder = document.createElement("div");
        holder.innerHTML = await response.text();
        const fresh = holder.querySelector("#result");
        if (fresh) {
          // Update in place: screen readers announce changes inside an existing live region.
          section.className = fresh.className;
          section.dataset.finished = fresh.dataset.finished;
          section.innerHTML = fresh.innerHTML;
          if (fresh.dataset.finished === "true") return;
        }
      }
    } catch (error) {
      // The server may be restarting; keep trying.
    }
    setTimeout(poll, INTERVAL_MS);
  }

  setTimeout(poll, INTERVAL_MS);
})();
