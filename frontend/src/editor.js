// The exercise page's code editor: CodeMirror 6 mounted over the page's <textarea data-editor>.
//
// The textarea stays in the HTML as the editor without JavaScript. Here it is hidden and kept
// equal to the editor's text on every change, so the form posts it as before (and anything
// listening for "input" on the textarea hears each change).
//
// Keyboard: Tab indents and Shift+Tab dedents; Esc, then Tab (or Shift+Tab), leaves the editor;
// Ctrl+M (Shift+Alt+M on a Mac) makes Tab move focus until pressed again. Ctrl/Cmd+F searches.
// Ctrl/Cmd+Enter is left to the page (it submits), not taken by the editor.
//
// The page's other scripts use one global, set once the editor is mounted:
//
//   window.loopgradeEditor = {
//     getValue(): string               the code as it stands
//     setValue(text: string): void     replace the code (undoable; saved as a draft like typing)
//     markLine(lineNumber: number, message: string): void
//                                      highlight line `lineNumber` (1-based) with a gutter marker;
//                                      the message is the marker's tooltip and part of the
//                                      editor's description, read by screen readers when the
//                                      editor has the focus. It is no live region: the page says
//                                      what happened once, in its own words (the marks would
//                                      say it a second time)
//     clearMarks(): void               remove every mark
//     focus(): void                    put the keyboard focus in the editor
//   }
//
// A "loopgrade-editor-ready" event is dispatched on document once it is set.
// Drafts (./drafts.js) are kept from this module's changes.

import { closeBrackets, closeBracketsKeymap } from "@codemirror/autocomplete";
import {
  defaultKeymap,
  history,
  historyKeymap,
  indentWithTab,
  isolateHistory,
} from "@codemirror/commands";
import { python } from "@codemirror/lang-python";
import {
  bracketMatching,
  foldGutter,
  indentOnInput,
  indentUnit,
  syntaxHighlighting,
} from "@codemirror/language";
import { highlightSelectionMatches, search, searchKeymap } from "@codemirror/search";
import { EditorState, RangeSet, StateEffect, StateField } from "@codemirror/state";
import {
  Decoration,
  EditorView,
  GutterMarker,
  crosshairCursor,
  drawSelection,
  dropCursor,
  gutter,
  highlightActiveLine,
  highlightActiveLineGutter,
  highlightSpecialChars,
  keymap,
  lineNumbers,
  rectangularSelection,
} from "@codemirror/view";
import { classHighlighter } from "@lezer/highlight";
import { startDrafts } from "./drafts.js";

// Marks on lines: a line number -> message map, mapped through edits like any position.
const setMarks = StateEffect.define();

class MarkMarker extends GutterMarker {
  constructor(message) {
    super();
    this.message = message;
  }
  eq(other) {
    return other.message === this.message;
  }
  toDOM() {
    const marker = document.createElement("span");
    marker.className = "cm-mark-marker";
    marker.title = this.message;
    marker.textContent = "!";
    return marker;
  }
}

const marksField = StateField.define({
  create: () => ({ lines: Decoration.none, gutter: RangeSet.empty }),
  update(marks, transaction) {
    let { lines, gutter: markers } = marks;
    lines = lines.map(transaction.changes);
    markers = markers.map(transaction.changes);
    for (const effect of transaction.effects) {
      if (!effect.is(setMarks)) continue;
      const doc = transaction.state.doc;
      const ranges = effect.value
        .filter((mark) => mark.line >= 1 && mark.line <= doc.lines)
        .sort((a, b) => a.line - b.line)
        .map((mark) => ({ from: doc.line(mark.line).from, message: mark.message }));
      lines = Decoration.set(
        ranges.map((r) =>
          Decoration.line({ class: "cm-marked-line", attributes: { title: r.message } }).range(r.from),
        ),
      );
      markers = RangeSet.of(ranges.map((r) => new MarkMarker(r.message).range(r.from)));
    }
    return { lines, gutter: markers };
  },
  provide: (field) => [
    EditorView.decorations.from(field, (marks) => marks.lines),
    gutter({ class: "cm-mark-gutter", markers: (view) => view.state.field(field).gutter }),
  ],
});

// Ctrl/Cmd+Enter submits the page's form (the page's own script), so the editor lets it pass.
const keysForThePage = new Set(["Mod-Enter"]);

function mount(textarea, styleNonce) {
  const label = document.querySelector(`label[for="${textarea.id}"]`);
  if (label && !label.id) label.id = `${textarea.id}-label`;
  const marksText = document.createElement("p");
  marksText.className = "visually-hidden";
  marksText.id = `${textarea.id}-marks`;
  const describedBy = [textarea.getAttribute("aria-describedby"), marksText.id]
    .filter(Boolean)
    .join(" ");

  const view = new EditorView({
    doc: textarea.value,
    extensions: [
      lineNumbers(),
      highlightActiveLineGutter(),
      highlightSpecialChars(),
      history(),
      foldGutter(),
      drawSelection(),
      dropCursor(),
      EditorState.allowMultipleSelections.of(true),
      EditorState.tabSize.of(4),
      indentUnit.of("    "),
      indentOnInput(),
      syntaxHighlighting(classHighlighter),
      bracketMatching(),
      closeBrackets(),
      rectangularSelection(),
      crosshairCursor(),
      highlightActiveLine(),
      highlightSelectionMatches(),
      search({ top: true }),
      python(),
      marksField,
      EditorView.cspNonce.of(styleNonce || ""),
      keymap.of([
        ...closeBracketsKeymap,
        ...defaultKeymap.filter((binding) => !keysForThePage.has(binding.key)),
        ...searchKeymap,
        ...historyKeymap,
        indentWithTab,
      ]),
      EditorView.contentAttributes.of({
        "aria-label": label ? label.textContent.replace(/\s+/g, " ").trim() : "Code",
        "aria-describedby": describedBy,
        autocapitalize: "off",
        autocorrect: "off",
        // Already focusable (contenteditable); said outright so that checkers such as axe
        // see the scrolling editor's content as reachable by keyboard. No extra tab stop.
        tabindex: "0",
      }),
      EditorView.updateListener.of((update) => {
        if (!update.docChanged) return;
        textarea.value = update.state.doc.toString();
        textarea.dispatchEvent(new Event("input", { bubbles: true }));
      }),
    ],
  });
  textarea.hidden = true;
  textarea.classList.add("editor-source");
  textarea.after(view.dom, marksText);
  // The label named the textarea; clicking it now focuses the editor.
  if (label) label.addEventListener("click", () => view.focus());

  let marks = [];
  function describeMarks() {
    marksText.textContent = marks.map((m) => `Line ${m.line}: ${m.message}`).join(". ");
  }
  return {
    getValue: () => view.state.doc.toString(),
    setValue(text) {
      // Its own undo step, never merged with the typing just before it.
      view.dispatch({
        changes: { from: 0, to: view.state.doc.length, insert: String(text) },
        annotations: isolateHistory.of("full"),
      });
    },
    markLine(lineNumber, message) {
      marks = [...marks.filter((m) => m.line !== lineNumber), { line: lineNumber, message: String(message) }];
      view.dispatch({ effects: setMarks.of(marks) });
      describeMarks();
    },
    clearMarks() {
      marks = [];
      view.dispatch({ effects: setMarks.of(marks) });
      describeMarks();
    },
    focus: () => view.focus(),
  };
}

// The page's Content-Security-Policy allows <style> elements with its nonce only; the page puts
// that nonce on this script's tag.
const styleNonce = document.currentScript ? document.currentScript.nonce : "";
const textarea = document.querySelector("textarea[data-editor]");
if (textarea) {
  window.loopgradeEditor = mount(textarea, styleNonce);
  startDrafts(textarea, window.loopgradeEditor);
  document.dispatchEvent(new Event("loopgrade-editor-ready"));
}
