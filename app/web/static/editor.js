// The code editor: a plain <textarea> (the form field, labelled, usable without JavaScript)
// with line numbers beside it and Python highlighting drawn underneath its transparent text.
// Tab indents with spaces, Shift+Tab dedents, Enter keeps the indentation.
// Esc, then Tab, leaves the editor, so keyboard users are never trapped.
"use strict";
(function () {
  const INDENT = "    ";
  const KEYWORDS = new Set(("and as assert async await break class continue def del elif else except " +
    "finally for from global if import in is lambda nonlocal not or pass raise return try while " +
    "with yield match case").split(" "));
  const CONSTANTS = new Set(["True", "False", "None", "self"]);
  const BUILTINS = new Set(("abs all any bool dict enumerate float getattr hasattr int isinstance " +
    "len list max min print range reversed round set sorted str sum super tuple type zip").split(" "));
  // One alternation, tried at each position: the first group that matches names the token.
  const TOKEN = new RegExp([
    "(#[^\\n]*)",                                                          // 1 comment
    "((?:[rRbBuUfF]{1,2})?(?:'''[\\s\\S]*?(?:'''|$)|\"\"\"[\\s\\S]*?(?:\"\"\"|$)))", // 2 long string
    "((?:[rRbBuUfF]{1,2})?(?:'(?:\\\\.|[^'\\\\\\n])*'?|\"(?:\\\\.|[^\"\\\\\\n])*\"?))", // 3 string
    "(@[A-Za-z_][\\w.]*)",                                                 // 4 decorator
    "(\\b(?:0[xX][0-9a-fA-F_]+|\\d[\\d_]*\\.?\\d*(?:[eE][+-]?\\d+)?j?|\\.\\d+(?:[eE][+-]?\\d+)?)\\b)", // 5 number
    "([A-Za-z_]\\w*)",                                                     // 6 name
  ].join("|"), "g");

  function escapeHtml(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function span(kind, text) {
    return '<span class="tok-' + kind + '">' + escapeHtml(text) + "</span>";
  }

  function highlight(source) {
    let html = "", last = 0, previousName = "", match;
    TOKEN.lastIndex = 0;
    while ((match = TOKEN.exec(source)) !== null) {
      if (match[0] === "") { TOKEN.lastIndex++; continue; }
      html += escapeHtml(source.slice(last, match.index));
      last = TOKEN.lastIndex;
      if (match[1]) html += span("comment", match[1]);
      else if (match[2] || match[3]) html += span("string", match[0]);
      else if (match[4]) html += span("decorator", match[4]);
      else if (match[5]) html += span("number", match[5]);
      else {
        const name = match[6];
        if (previousName === "def" || previousName === "class") html += span("defname", name);
        else if (KEYWORDS.has(name)) html += span("keyword", name);
        else if (CONSTANTS.has(name)) html += span("constant", name);
        else if (BUILTINS.has(name)) html += span("builtin", name);
        else html += escapeHtml(name);
        previousName = name;
        continue;
      }
      previousName = "";
    }
    return html + escapeHtml(source.slice(last));
  }

  function lineStart(value, position) {
    return value.lastIndexOf("\n", position - 1) + 1;
  }

  function attach(textarea) {
    const editor = document.createElement("div");
    editor.className = "code-editor";
    const gutter = document.createElement("div");
    gutter.className = "gutter";
    gutter.setAttribute("aria-hidden", "true");
    const area = document.createElement("div");
    area.className = "code-area";
    const layer = document.createElement("pre");
    layer.className = "highlight";
    layer.setAttribute("aria-hidden", "true");
    const code = document.createElement("code");
    layer.appendChild(code);
    textarea.parentNode.insertBefore(editor, textarea);
    area.appendChild(layer);
    area.appendChild(textarea);
    editor.appendChild(gutter);
    editor.appendChild(area);
    textarea.classList.add("code-input");

    let lines = 0;
    function render() {
      // The trailing newline keeps the layer as tall as the textarea's last (empty) line.
      code.innerHTML = highlight(textarea.value) + "\n";
      const count = textarea.value.split("\n").length;
      if (count !== lines) {
        lines = count;
        let numbers = "";
        for (let i = 1; i <= count; i++) numbers += i + "\n";
        gutter.textContent = numbers;
      }
      sync();
    }
    function sync() {
      layer.scrollTop = textarea.scrollTop;
      layer.scrollLeft = textarea.scrollLeft;
      gutter.scrollTop = textarea.scrollTop;
    }
    function insert(text) {
      // execCommand keeps the browser's undo history; setRangeText is the fallback.
      textarea.focus();
      if (!document.execCommand || !document.execCommand("insertText", false, text)) {
        textarea.setRangeText(text, textarea.selectionStart, textarea.selectionEnd, "end");
        render();
      }
    }
    function dedent() {
      const value = textarea.value;
      const start = lineStart(value, textarea.selectionStart);
      const spaces = /^ {1,4}/.exec(value.slice(start));
      if (!spaces) return;
      const caret = textarea.selectionStart;
      textarea.setSelectionRange(start, start + spaces[0].length);
      insert("");
      const back = Math.max(start, caret - spaces[0].length);
      textarea.setSelectionRange(back, back);
    }

    let escaped = false;
    textarea.addEventListener("keydown", function (event) {
      if (event.key === "Escape") { escaped = true; return; }
      if (event.key === "Tab" && !escaped && !event.ctrlKey && !event.altKey && !event.metaKey) {
        event.preventDefault();
        if (event.shiftKey) dedent(); else insert(INDENT);
        return;
      }
      if (event.key === "Enter" && !event.shiftKey && !event.ctrlKey && !event.metaKey && !event.isComposing) {
        const value = textarea.value;
        const start = lineStart(value, textarea.selectionStart);
        const line = value.slice(start, textarea.selectionStart);
        let indent = /^[ \t]*/.exec(line)[0];
        if (/:\s*(#.*)?$/.test(line)) indent += INDENT;
        event.preventDefault();
        insert("\n" + indent);
      }
      escaped = false;
    });
    textarea.addEventListener("input", render);
    textarea.addEventListener("scroll", sync);
    new ResizeObserver(sync).observe(textarea);
    render();
  }

  document.querySelectorAll("textarea[data-editor]").forEach(attach);
})();
