// LTI Platform Storage ("LTI Client Side postMessages" and "Platform Storage" specs): for
// browsers that keep no cookie inside the LMS's frame, the login's state is kept by the LMS
// page itself. At login this page puts it there (lti.put_data) and goes on to the platform;
// at launch it reads it back (lti.get_data) and posts the launch again, from this origin,
// with what it read: the server checks it came from the LMS page that started the login.
(function () {
  "use strict";
  const page = document.querySelector("[data-lti-storage]");
  if (!page) return;
  const data = page.dataset;
  const status = page.querySelector("[data-storage-status]");
  const form = page.querySelector("[data-storage-launch]");
  const ANSWER_TIMEOUT_MS = 10000;

  function storageFrame() {
    // "_parent" is the LMS page; any other name is a frame of the LMS page, beside this one.
    if (data.target === "_parent") return window.parent;
    try {
      return window.parent.frames[data.target];
    } catch (error) {
      return undefined;
    }
  }

  function messageId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // One request to the LMS page; resolves with its answer, rejects with its error.
  function ask(message) {
    return new Promise((resolve, reject) => {
      const frame = storageFrame();
      if (!frame || frame === window) {
        reject(new Error("the LMS page has no storage frame " + data.target));
        return;
      }
      const timer = setTimeout(() => {
        window.removeEventListener("message", listen);
        reject(new Error("the LMS page did not answer"));
      }, ANSWER_TIMEOUT_MS);
      function listen(event) {
        const answer = event.data;
        if (event.origin !== data.origin || !answer || answer.message_id !== message.message_id) {
          return;
        }
        if (answer.subject !== message.subject + ".response") return;
        window.removeEventListener("message", listen);
        clearTimeout(timer);
        if (answer.error) {
          reject(new Error(answer.error.message || answer.error.code || "refused"));
        } else {
          resolve(answer);
        }
      }
      window.addEventListener("message", listen);
      frame.postMessage(message, data.origin);
    });
  }

  if (data.ltiStorage === "put") {
    ask({ subject: "lti.put_data", message_id: messageId(), key: data.key, value: data.value })
      .then(() => window.location.replace(data.next))
      .catch((error) => {
        status.textContent =
          "The LMS did not keep this launch's state (" + error.message + "). " +
          "Open the activity from the LMS again.";
      });
  } else {
    ask({ subject: "lti.get_data", message_id: messageId(), key: data.key })
      .then((answer) => {
        form.elements.lti_storage_value.value = typeof answer.value === "string" ? answer.value : "";
      })
      .catch(() => {
        // Posted empty: the server refuses it and says why.
      })
      .finally(() => form.submit());
  }
})();
