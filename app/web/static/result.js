// The learner's loop without leaving the page, and results that arrive by themselves.
//
// - The exercise form (data-submit-in-place) is posted in the background with its CSRF token
//   and an Idempotency-Key (a retry after a dropped connection makes one submission); the
//   code stays in the editor and the result appears in the panel below it. A 503 (the server
//   busy, nothing stored) is sent again, with the same key, after the wait its Retry-After
//   asks for, the panel counting it down. Ctrl/Cmd+Enter submits. Without JavaScript the form posts and the result page opens, as always.
//   The page's live region (#result-announcement) says each state, then the result's headline
//   only (score and diagnosis); the headline takes the focus and is scrolled into view; the
//   unit's strip and the "Next exercise" action are taken from the page fetched again.
// - A result that is not finished (data-events: its progress stream) follows the server's
//   events: queued with its place, running with the seconds so far, then the result.
//   Where the stream cannot be had, it asks for the result every few seconds instead.
//   The submission page's live region says the same as the exercise page's: each state, then
//   the headline only.
// - Other live sections (data-poll, a regrade or its dry run in progress) are fetched again
//   every half second; the page's live region says their status line once they finish, not
//   every count on the way nor the tables.
// The editor is window.loopgradeEditor when present (getValue, setValue, markLine, clearMarks,
// focus), the textarea otherwise.
"use strict";
(function () {
  const POLL_MS = 500;
  const FALLBACK_POLL_MS = 3000;
  const SEND_ATTEMPTS = 3;
  // A busy server's Retry-After is waited, and the code sent again with its key, while the
  // waits add up to no more than this (as loopgrade-client does).
  const BUSY_WAIT_SECONDS = 180;

  // --- the editor, whichever it is ----------------------------------------------------------

  function editorOf(textarea) {
    const rich = window.loopgradeEditor;
    if (rich) return rich;
    return {
      getValue: function () { return textarea.value; },
      setValue: function (value) { textarea.value = value; },
      markLine: function (line) {
        // The textarea cannot draw a mark: select the line so that it is plain to see.
        const lines = textarea.value.split("\n");
        if (line < 1 || line > lines.length) return;
        const start = lines.slice(0, line - 1).join("\n").length + (line > 1 ? 1 : 0);
        textarea.dataset.markedLine = String(line);
        textarea.setAttribute("aria-invalid", "true");
        textarea.focus({ preventScroll: true });
        textarea.setSelectionRange(start, start + lines[line - 1].length);
      },
      clearMarks: function () {
        delete textarea.dataset.markedLine;
        textarea.removeAttribute("aria-invalid");
      },
      focus: function () { textarea.focus(); },
    };
  }

  // --- the page's live region: states, then a result's headline only -------------------------

  const announcement = document.getElementById("result-announcement");

  function announce(text) {
    if (announcement) announcement.textContent = text;
  }

  // The result's headline (its score and diagnosis, or why there is none) in `container`: the
  // one thing the live region says of the result (the rest is read when the reader goes there).
  // A tag beside the score (practice) is shown, not said: the page says it already.
  function announceHeadline(container) {
    const headline = container.querySelector(".score, .status");
    if (!headline) return null;
    const words = headline.cloneNode(true);
    words.querySelectorAll(".tag").forEach(function (tag) { tag.remove(); });
    announce("Result: " + words.textContent.replace(/\s+/g, " ").trim());
    return headline;
  }

  // --- following one submission -------------------------------------------------------------

  function statusLine(text, withSpinner) {
    const p = document.createElement("p");
    p.className = "status";
    if (withSpinner) {
      const spinner = document.createElement("span");
      spinner.className = "spinner";
      spinner.setAttribute("aria-hidden", "true");
      p.appendChild(spinner);
    }
    const words = document.createElement("span");
    words.className = "state-text";
    words.textContent = text;
    p.appendChild(words);
    return p;
  }

  // Shows the state in `panel`, and says it in the page's live region; calls onDone(done) once
  // finished. Returns a function that stops following (a newer submission takes the panel).
  function follow(panel, urls, onDone) {
    let timer = null;
    let source = null;
    let finished = false;
    let runningSince = null;

    function show(text, elapsed) {
      let line = panel.querySelector(".status");
      if (!line) {
        panel.replaceChildren(statusLine("", true));
        line = panel.querySelector(".status");
      }
      const words = line.querySelector(".state-text");
      // Only a change of state is announced: the seconds tick in a part the reader skips.
      if (words.textContent !== text) {
        words.textContent = text;
        announce(text);
      }
      let clock = line.querySelector(".elapsed");
      if (elapsed === null) {
        if (clock) clock.remove();
        return;
      }
      if (!clock) {
        clock = document.createElement("span");
        clock.className = "elapsed";
        clock.setAttribute("aria-hidden", "true");
        line.appendChild(clock);
      }
      clock.textContent = elapsed + " s";
    }

    function tick() {
      if (runningSince === null) return;
      show("Grading: running your code on the test cases…", Math.round((Date.now() - runningSince) / 1000));
    }

    function finish(done) {
      if (finished) return;
      finished = true;
      clearInterval(timer);
      onDone(done);
    }

    function pollInstead() {
      // No stream (too many open, or no EventSource): the result section, every few seconds.
      if (finished) return;
      fetch(urls.result, { cache: "no-store", credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          if (html && html.indexOf('data-finished="true"') !== -1) {
            finish({ html: html, url: urls.page, line: null });
          } else {
            setTimeout(pollInstead, FALLBACK_POLL_MS);
          }
        })
        .catch(function () { setTimeout(pollInstead, FALLBACK_POLL_MS); });
    }

    function stop() {
      finished = true;
      clearInterval(timer);
      if (source) source.close();
    }

    if (!window.EventSource) { show("Waiting for the result…", null); pollInstead(); return stop; }
    source = new EventSource(urls.events);
    timer = setInterval(tick, 1000);
    source.addEventListener("queued", function (event) {
      const data = JSON.parse(event.data);
      runningSince = null;
      show(data.position === 1 ? "Queued: next in line for a grader…"
        : "Queued: " + data.position + " in line for a grader…", null);
    });
    function running(event) {
      const data = JSON.parse(event.data);
      if (data.status !== "running") return;
      runningSince = Date.now() - 1000 * (data.elapsed_seconds || 0);
      tick();
    }
    source.addEventListener("running", running);
    source.addEventListener("heartbeat", running);
    source.addEventListener("done", function (event) {
      source.close();
      finish(JSON.parse(event.data));
    });
    source.addEventListener("busy", function () { source.close(); pollInstead(); });
    source.addEventListener("error", function () {
      // Closed by the server (a refusal, a restart): EventSource retries by itself unless
      // the answer was not a stream at all; then ask for the result instead.
      if (source.readyState === EventSource.CLOSED && !finished) pollInstead();
    });
    return stop;
  }

  // --- the submission page: an unfinished result follows its events ------------------------

  document.querySelectorAll("[data-events]").forEach(function (section) {
    if (section.dataset.finished === "true") return;
    const id = section.dataset.submission;
    const status = section.querySelector(".status") || section;
    const holder = document.createElement("div");
    status.replaceWith(holder);
    follow(holder, { events: section.dataset.events, result: section.dataset.poll, page: "/submissions/" + id },
      function (done) {
        const fresh = document.createElement("div");
        fresh.innerHTML = done.html;
        const result = fresh.querySelector("#result");
        if (result) {
          section.className = result.className;
          section.dataset.finished = "true";
          section.innerHTML = result.innerHTML;
        }
        announceHeadline(section);
        document.dispatchEvent(new CustomEvent("loopgrade:updated", { detail: section }));
      });
  });

  // --- other live sections: fetched again until finished -------------------------------------

  async function poll(section) {
    if (section.dataset.finished === "true") return;
    try {
      const response = await fetch(section.dataset.poll, { cache: "no-store", credentials: "same-origin" });
      if (response.ok) {
        const holder = document.createElement("div");
        holder.innerHTML = await response.text();
        const fresh = holder.querySelector("[data-poll]");
        if (fresh) {
          section.className = fresh.className;
          section.dataset.finished = fresh.dataset.finished;
          section.innerHTML = fresh.innerHTML;
          document.dispatchEvent(new CustomEvent("loopgrade:updated", { detail: section }));
          if (fresh.dataset.finished === "true") {
            const line = section.querySelector(".status");
            if (line) announce(line.textContent.replace(/\s+/g, " ").trim());
            return;
          }
        }
      }
    } catch (error) {
      // The server may be restarting; keep trying.
    }
    setTimeout(function () { poll(section); }, POLL_MS);
  }

  document.querySelectorAll("[data-poll]:not([data-events])").forEach(function (section) {
    setTimeout(function () { poll(section); }, POLL_MS);
  });

  // --- the exercise page: submit in the background -------------------------------------------

  function newKey() {
    // crypto.randomUUID needs a secure context; getRandomValues does not.
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, function (b) { return b.toString(16).padStart(2, "0"); }).join("");
  }

  const form = document.querySelector("form[data-submit-in-place]");
  if (!form) return;
  const textarea = form.querySelector("textarea[name=code]");
  const button = form.querySelector("button[type=submit]");
  const errorBox = document.getElementById("form-error");
  const panel = document.getElementById("live-result");
  const panelBody = panel.querySelector(".live-result-body");
  // "Next exercise": in the result, right after its feedback and hints, once one is shown;
  // back in its own place while the next submission is sent and graded.
  const nextExercise = document.getElementById("next-exercise");
  let sending = false;
  let stopFollowing = null;
  let plainPost = false;

  function showError(text) {
    errorBox.textContent = text;
    errorBox.hidden = !text;
    const described = (textarea.getAttribute("aria-describedby") || "").split(" ")
      .filter(function (id) { return id && id !== "form-error"; });
    if (text) described.push("form-error");
    textarea.setAttribute("aria-describedby", described.join(" "));
  }

  // The result's headline, said by the live region, is also a heading that takes the focus.
  function showHeadline(headline) {
    headline.id = "result-headline";
    headline.tabIndex = -1;
    headline.setAttribute("role", "heading");
    headline.setAttribute("aria-level", "3");
    headline.focus({ preventScroll: true });
    // On a laptop the result starts below the fold: its top comes up (Submit just above it).
    headline.scrollIntoView({ block: "start" });
  }

  // The unit's strip and the "Next exercise" action as the server now sees them.
  function refreshProgress() {
    fetch(form.action, { cache: "no-store", credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        const fresh = new DOMParser().parseFromString(html, "text/html");
        ["unit-strip", "next-exercise"].forEach(function (id) {
          const here = document.getElementById(id);
          const there = fresh.getElementById(id);
          if (here && there) here.replaceChildren.apply(here, Array.from(there.childNodes));
        });
      })
      .catch(function () {
        // Shown on the next visit; the result itself is in place.
      });
  }

  function mark(editor, line, message) {
    // Said on the form too, whichever editor draws the mark (tests and styles read it).
    form.dataset.markedLine = String(line);
    editor.markLine(line, message);
  }

  async function send(body, key) {
    // The same key on every try: the server makes one submission of however many arrive.
    let lastError = null;
    for (let attempt = 0; attempt < SEND_ATTEMPTS; attempt++) {
      try {
        return await fetch(form.action, {
          method: "POST",
          body: body,
          credentials: "same-origin",
          headers: { "Accept": "application/json", "Idempotency-Key": key },
        });
      } catch (error) {
        lastError = error;
        await new Promise(function (resolve) { setTimeout(resolve, 500 * (attempt + 1)); });
      }
    }
    throw lastError;
  }

  // Seconds to wait before sending again, or null: only a 503 with a Retry-After in seconds
  // that keeps the waits within BUSY_WAIT_SECONDS.
  function busyWait(response, waitedSeconds) {
    if (response.status !== 503) return null;
    const header = (response.headers.get("Retry-After") || "").trim();
    if (!/^[0-9]+$/.test(header)) return null;
    const seconds = Math.max(1, parseInt(header, 10));
    return waitedSeconds + seconds <= BUSY_WAIT_SECONDS ? seconds : null;
  }

  async function submitInPlace() {
    if (sending || button.disabled) return;
    const editor = editorOf(textarea);
    textarea.value = editor.getValue();
    editor.clearMarks();
    delete form.dataset.markedLine;
    showError("");
    sending = true;
    button.disabled = true;
    if (stopFollowing) stopFollowing();  // the panel is this submission's now
    stopFollowing = null;
    panel.hidden = false;
    if (nextExercise) panel.after(nextExercise);
    panelBody.replaceChildren(statusLine("Sending your code…", true));
    announce("Sending your code…");
    let response;
    try {
      const key = newKey();
      let busyWaited = 0;
      response = await send(new FormData(form), key);
      let wait = busyWait(response, busyWaited);
      while (wait !== null) {
        busyWaited += wait;
        for (let left = wait; left > 0; left--) {
          panelBody.replaceChildren(statusLine("The graders are busy: sending your code again in " + left + " s…", true));
          if (left === wait) announce("The graders are busy: your code is sent again in " + wait + " seconds.");
          await new Promise(function (resolve) { setTimeout(resolve, 1000); });
        }
        panelBody.replaceChildren(statusLine("Sending your code…", true));
        response = await send(new FormData(form), key);
        wait = busyWait(response, busyWaited);
      }
    } catch (error) {
      sending = false;
      button.disabled = false;
      panelBody.replaceChildren();
      panel.hidden = true;
      announce("");
      showError("Your code could not be sent: the server did not answer. It is still in the editor; try again.");
      errorBox.focus();
      return;
    }
    const type = response.headers.get("content-type") || "";
    if (!type.startsWith("application/json")) {
      // Not an answer for this script (the session ended, say): post the form as a page, so
      // that the server's own page takes it from here, code and all.
      plainPost = true;
      form.submit();
      return;
    }
    const answer = await response.json();
    if (answer.location) {
      // The session had ended: the server kept the code; signing in brings it back.
      window.location.assign(answer.location);
      return;
    }
    if (!response.ok) {
      sending = false;
      button.disabled = false;
      panelBody.replaceChildren();
      panel.hidden = true;
      announce("");
      showError(answer.detail || "The submission was not accepted.");
      // The message takes the focus and is said once, as focused. The editor's mark says
      // nothing by itself (it is the editor's description, read when the learner goes there).
      if (answer.line) mark(editor, answer.line, "The message above the editor is about this line");
      errorBox.focus();
      return;
    }
    // Accepted: the learner may edit and submit again while this one is graded.
    sending = false;
    button.disabled = false;
    const file = form.querySelector("input[type=file]");
    if (file) file.value = "";  // sent once; the next submission is the editor's again
    stopFollowing = follow(panelBody, answer, function (done) {
      const fresh = document.createElement("div");
      fresh.innerHTML = done.html;
      const result = fresh.querySelector("#result");
      // The fragment's own polling hooks would repeat this panel's work.
      if (result) {
        result.removeAttribute("data-poll");
        result.removeAttribute("data-events");
      }
      const link = document.createElement("p");
      link.className = "result-link";
      const a = document.createElement("a");
      a.href = done.url;
      a.textContent = "This result on its own page";
      link.appendChild(a);
      panelBody.replaceChildren(fresh, link);
      const nextSteps = panelBody.querySelector(".result-next-steps");
      if (nextSteps && nextExercise) nextSteps.append(nextExercise);
      document.dispatchEvent(new CustomEvent("loopgrade:updated", { detail: panel }));
      if (done.line) mark(editor, done.line, "Your code failed on this line");
      const headline = announceHeadline(panelBody);
      if (headline) showHeadline(headline);
      refreshProgress();
    });
  }

  form.addEventListener("submit", function (event) {
    if (plainPost) return;
    // An upload goes the same way, in the form's data.
    event.preventDefault();
    submitInPlace();
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && form.contains(document.activeElement)) {
      event.preventDefault();
      submitInPlace();
    }
  });
})();
