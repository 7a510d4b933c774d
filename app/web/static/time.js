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

  // The same words as app/web/rendering.py's countdown_words, kept current every minute.
  function unit(count, name) { return count + " " + name + (count === 1 ? "" : "s"); }
  function countdownWords(seconds) {
    const whole = Math.floor(Math.abs(seconds));
    const days = Math.floor(whole / 86400);
    const hours = Math.floor((whole % 86400) / 3600);
    const minutes = Math.floor((whole % 3600) / 60);
    let span;
    if (days) span = unit(days, "day") + (hours ? ", " + unit(hours, "hour") : "");
    else if (hours) span = unit(hours, "hour") + (minutes ? ", " + unit(minutes, "minute") : "");
    else span = unit(Math.max(minutes, 1), "minute");
    return seconds >= 0 ? "in " + span : span + " ago";
  }
  function countdowns(root) {
    root.querySelectorAll("time[data-countdown]").forEach(function (element) {
      const when = new Date(element.getAttribute("datetime"));
      if (isNaN(when)) return;
      element.textContent = countdownWords((when - Date.now()) / 1000);
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
  countdowns(document);
  setInterval(function () { countdowns(document); }, 60 * 1000);
  document.addEventListener("loopgrade:updated", function (event) {
    localize(event.detail);
    countdowns(event.detail);
  });
})();
