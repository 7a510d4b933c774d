// Times are written in UTC by the server; show them in the reader's own time zone, and let
// date inputs speak it too (the form sends the zone's name along).
"use strict";
(function () {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const format = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

  function pad(n) { return String(n).padStart(2, "0"); }

  function localize(root) {
    root.querySelectorAll("time[data-local]").forEach(function (element) {
      const when = new Date(element.getAttribute("datetime"));
      if (isNaN(when)) return;
      element.title = element.textContent;
      element.textContent = format.format(when);
      element.removeAttribute("data-local");
    });
  }

  document.querySelectorAll("input[data-utc]").forEach(function (input) {
    if (!input.dataset.utc) return;
    const when = new Date(input.dataset.utc);
    if (isNaN(when)) return;
    input.value = when.getFullYear() + "-" + pad(when.getMonth() + 1) + "-" + pad(when.getDate()) +
      "T" + pad(when.getHours()) + ":" + pad(when.getMinutes());
  });
  document.querySelectorAll("input[data-timezone]").forEach(function (input) { input.value = zone; });
  localize(document);
  document.addEventListener("loopgrade:updated", function (event) { localize(event.detail); });
})();
