// Inside another site's frame (an LMS), asks the framing page to fit the frame to this page, so
// that only the LMS page scrolls. The message is the one Canvas documents ("Using
// window.postMessage in LTI Tools") and Moodle's and Sakai's handlers accept:
// {subject: "lti.frameResize", height: <CSS pixels>}, sent to the parent once the page is laid
// out and again whenever its height changes. It goes to the LMS's origin when the session came
// from an LMS launch (<body data-lms-origin>), else to any origin: only the registered
// platforms may frame these pages (frame-ancestors), and it says nothing but a height.
"use strict";
(function () {
  if (window.parent === window) return;
  const root = document.documentElement;
  // The page's heights that follow the viewport's (the editor's) would grow with every resize.
  root.classList.add("in-frame");
  const targetOrigin = document.body.dataset.lmsOrigin || "*";
  let sentHeight = 0;

  function sendHeight() {
    const height = Math.ceil(root.getBoundingClientRect().height);
    if (height === sentHeight) return;
    sentHeight = height;
    window.parent.postMessage({ subject: "lti.frameResize", height: height }, targetOrigin);
  }

  if (window.ResizeObserver) {
    new ResizeObserver(sendHeight).observe(root);
  } else {
    window.addEventListener("load", sendHeight);
    document.addEventListener("loopgrade:updated", sendHeight);
  }
  sendHeight();
})();
