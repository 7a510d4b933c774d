// A page that answers a form with a question or a message (the override's confirmation, an
// extension to confirm, "Extension saved.", why it was not saved) puts the focus on it: a
// keyboard or screen reader user lands there, not at the top of <body>. The element says so
// with data-land-focus (and tabindex="-1" when it is no control).
"use strict";
(function () {
  const target = document.querySelector("[data-land-focus]");
  if (!target) return;
  target.focus({ preventScroll: true });
  target.scrollIntoView({ block: "center" });
})();
