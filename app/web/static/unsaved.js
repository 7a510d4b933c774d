// Asks before leaving a page whose form (marked data-warn-unsaved) holds changes not saved:
// fields changed since the page was ready (time.js has put the dates in the reader's zone by
// then), or a form the server sent back refused (data-warn-unsaved="refused": what it shows was
// not saved). Submitting the form is not leaving it.
"use strict";
(function () {
  const forms = Array.from(document.querySelectorAll("form[data-warn-unsaved]"));
  if (!forms.length) return;
  const state = (form) => new URLSearchParams(new FormData(form)).toString();
  const ready = new Map();
  let submitting = false;
  window.addEventListener("load", function () {
    forms.forEach(function (form) { ready.set(form, state(form)); });
  });
  forms.forEach(function (form) {
    form.addEventListener("submit", function () { submitting = true; });
  });
  window.addEventListener("beforeunload", function (event) {
    const unsaved = forms.some(function (form) {
      return form.dataset.warnUnsaved === "refused" ||
        (ready.has(form) && ready.get(form) !== state(form));
    });
    if (unsaved && !submitting) {
      event.preventDefault();
      event.returnValue = "";
    }
  });
})();
