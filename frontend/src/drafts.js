// Drafts: the code in the editor is never lost.
//
// The page says (data-* on the textarea) what it opened with:
//   data-draft-key       "<user id or anon>:<course id or practice>:<exercise id>", the key in
//                        localStorage ("loopgrade:draft:" + key)
//   data-draft-url       the server's draft of a signed-in learner (GET/PUT JSON), else absent
//   data-code-saved-at   when the server's copy of the opening code was saved ("" for starter)
//   data-starter         the starter code, for "Reset to starter"
//   data-csrf            the CSRF token the PUT carries (header X-CSRF-Token)
//
// Every change is written to localStorage at once and, for a signed-in learner, sent to the
// server a second after typing stops. On opening, the browser's copy replaces the server's
// when it was made on top of the same server copy (so it is newer); if the server's copy
// changed since (another browser, a submission), the server's wins. Leaving the page while
// the server has not confirmed the text asks first.

const SAVE_DELAY_MS = 1000;

function readLocal(storageKey) {
  try {
    const record = JSON.parse(localStorage.getItem(storageKey) || "null");
    return record && typeof record.code === "string" ? record : null;
  } catch {
    return null; // storage disabled or a value we did not write
  }
}

function writeLocal(storageKey, record) {
  try {
    localStorage.setItem(storageKey, JSON.stringify(record));
    return true;
  } catch {
    return false; // full or disabled: the server copy (if any) still holds
  }
}

export function startDrafts(textarea, editor) {
  const { draftKey, draftUrl, codeSavedAt = "", starter, csrf } = textarea.dataset;
  if (!draftKey) return;
  const storageKey = `loopgrade:draft:${draftKey}`;
  const form = textarea.form;
  let serverSavedAt = codeSavedAt;
  // The text the server holds (or, without a server draft, the last one kept in this browser).
  let savedText = editor.getValue();

  const local = readLocal(storageKey);
  if (local && local.code !== savedText && local.serverSavedAt === serverSavedAt) {
    editor.setValue(local.code);
    const note = document.createElement("p");
    note.className = "hint draft-note";
    note.setAttribute("role", "status");
    note.textContent = "Your unsaved code from your last visit is back in the editor.";
    textarea.before(note);
  }
  if (!draftUrl) savedText = editor.getValue();

  let timer = null;
  let sending = null;

  function keepLocally() {
    writeLocal(storageKey, { code: editor.getValue(), serverSavedAt, savedAtMs: Date.now() });
  }

  async function saveToServer() {
    timer = null;
    const code = editor.getValue();
    if (code === savedText) return;
    try {
      const response = await fetch(draftUrl, {
        method: "PUT",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify({ code }),
        credentials: "same-origin",
      });
      if (!response.ok) return; // kept locally; the next change tries again
      const saved = await response.json();
      savedText = saved.code;
      serverSavedAt = saved.updated_at;
      // The browser's copy is now on top of this server copy.
      if (editor.getValue() === savedText) keepLocally();
    } catch {
      // offline: kept locally, and leaving the page warns
    }
  }

  textarea.addEventListener("input", () => {
    keepLocally();
    if (!draftUrl) {
      savedText = editor.getValue();
      return;
    }
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => {
      sending = saveToServer();
    }, SAVE_DELAY_MS);
  });

  if (form) {
    form.addEventListener("submit", () => {
      // The server keeps a submitted body as the draft too.
      keepLocally();
      savedText = editor.getValue();
      if (timer) clearTimeout(timer);
      // "Your session had ended ..." is about the code now sent.
      const kept = document.getElementById("kept-notice");
      if (kept) kept.hidden = true;
    });
  }

  window.addEventListener("beforeunload", (event) => {
    if (editor.getValue() === savedText) return;
    keepLocally();
    event.preventDefault();
    event.returnValue = ""; // older Chromium needs it set to ask
  });

  if (starter !== undefined) {
    const reset = document.createElement("button");
    reset.type = "button";
    reset.className = "secondary reset-starter";
    reset.textContent = "Reset to starter";
    reset.addEventListener("click", () => {
      if (editor.getValue() === starter) return;
      if (!window.confirm("Replace your code with the starter code? Ctrl+Z in the editor undoes it.")) return;
      editor.setValue(starter);
      editor.focus();
    });
    const row = form && form.querySelector(".submit-row");
    if (row) row.append(reset);
    else textarea.after(reset);
  }

  return { pending: () => sending };
}
