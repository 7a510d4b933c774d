// The "Show a hint" button in place: the form is posted in the background (its CSRF token is
// in it), the hints section is taken from the page the server answers with, and the new hint
// takes the focus. Without JavaScript the form posts and the page comes back at the hint.
// A result still grading when the page opened gets its hints once it is in (result.js says
// so with loopgrade:updated); without JavaScript the page's refresh brings them.
"use strict";
(function () {
  document.addEventListener("loopgrade:updated", function (event) {
    const pending = document.querySelector("#hints[data-hints-pending]");
    if (!pending || !event.detail || event.detail.dataset.finished !== "true") return;
    pending.removeAttribute("data-hints-pending");
    fetch(location.pathname, { cache: "no-store", credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("hints");
        if (fresh && !fresh.hasAttribute("data-hints-pending")) pending.replaceWith(fresh);
      })
      .catch(function () { /* the page's next visit shows them */ });
  });

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
