// A plain textarea as a code editor: Tab indents with spaces, Enter keeps the indentation.
// Esc, then Tab, leaves the editor, so keyboard users are never trapped.
"use strict";
(function () {
  const INDENT = "    ";

  function insert(textarea, text) {
    // execCommand keeps the browser's undo history; setRangeText is the fallback.
    textarea.focus();
    if (!document.execCommand || !document.execCommand("insertText", false, text)) {
      textarea.setRangeText(text, textarea.selectionStart, textarea.selectionEnd, "end");
    }
  }

  function lineStart(value, position) {
    return value.lastIndexOf("\n", position - 1) + 1;
  }

  function dedent(textarea) {
    const value = textarea.value;
    const start = lineStart(value, textarea.selectionStart);
    const spaces = /^ {1,4}/.exec(value.slice(start));
    if (!spaces) return;
    const caret = textarea.selectionStart;
    textarea.setSelectionRange(start, start + spaces[0].length);
    insert(textarea, "");
    const back = Math.max(start, caret - spaces[0].length);
    textarea.setSelectionRange(back, back);
  }

  function attach(textarea) {
    let escaped = false;
    textarea.addEventListener("keydown", function (event) {
      if (event.key === "Escape") { escaped = true; return; }
      if (event.key === "Tab" && !escaped && !event.ctrlKey && !event.altKey && !event.metaKey) {
        event.preventDefault();
        if (event.shiftKey) dedent(textarea); else insert(textarea, INDENT);
        return;
      }
      if (event.key === "Enter" && !event.shiftKey && !event.ctrlKey && !event.metaKey) {
        const value = textarea.value;
        const start = lineStart(value, textarea.selectionStart);
        const line = value.slice(start, textarea.selectionStart);
        let indent = /^[ \t]*/.exec(line)[0];
        if (/:\s*$/.test(line)) indent += INDENT;
        event.preventDefault();
        insert(textarea, "\n" + indent);
      }
      escaped = false;
    });
  }

  document.querySelectorAll("textarea[data-editor]").forEach(attach);
})();
