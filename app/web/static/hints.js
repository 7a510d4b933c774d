// The "Show a hint" button in place: the form is posted in the background (its CSRF token is
// in it), the hints section is taken from the page the server answers with, and the new hint
// takes the focus. Without JavaScript the form posts and the page comes back at the hint.
// A result still grading when the page opened gets its hints once it is in (result.js says
// so with loopgrade:updated), and so does a result shown in place on the exercise page;
// without JavaScript the submission page's refresh brings them.
"use strict";
(function () {
  // Hints for a result that came in after the page opened: on the submission page and on the
  // exercise page (the result shown in place), in the result's own place for them, right
  // after its feedback (_result.html's .result-next-steps).
  document.addEventListener("loopgrade:updated", function (event) {
    const section = event.detail;
    if (!section) return;
    const pending = document.querySelector("[data-hints-pending]");
    const ownPage = section.id === "live-result" && section.querySelector(".result-link a");
    if (pending && section.dataset.finished === "true") {
      pending.remove();
      bringHints(location.pathname, function (fresh) { placeHints(section, fresh); });
    } else if (ownPage) {
      bringHints(ownPage.getAttribute("href"), function (fresh) { placeHints(section, fresh); });
    }
  });

  function placeHints(section, fresh) {
    const shown = document.getElementById("hints");
    if (shown) shown.remove();
    const slot = section.querySelector(".result-next-steps");
    if (slot) slot.prepend(fresh);
  }

  function bringHints(url, place) {
    fetch(url, { cache: "no-store", credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("hints");
        if (fresh) place(fresh);
      })
      .catch(function () { /* the result's own page shows them */ });
  }

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-hint-form")) return;
    event.preventDefault();
    const level = form.querySelector("input[name=level]").value;
    fetch(form.action, { method: "POST", body: new FormData(form), credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        const page = new DOMParser().parseFromString(html, "text/html");
        const fresh = page.getElementById("hints");
        const refused = page.querySelector(".form-error");
        const current = document.getElementById("hints");
        if (!fresh || !current) { form.submit(); return; }
        current.replaceWith(fresh);
        if (refused) fresh.prepend(refused);
        const opened = document.getElementById("hint-" + level);
        (opened || fresh.querySelector("button") || fresh).focus();
      })
      .catch(function () { form.submit(); });
  });
})();
