// The "Show a hint" button in place: the form is posted in the background (its CSRF token is
// in it), the hints section is taken from the page the server answers with, and the new hint
// takes the focus. Without JavaScript the form posts and the page comes back at the hint.
"use strict";
(function () {
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
