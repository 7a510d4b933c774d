// After "Sign out" (its answer set the cookie below): this browser forgets the drafts it kept in
// localStorage for signed-in learners ("loopgrade:draft:<user id>:..."), so that the next person
// at a shared computer cannot read their code. The server keeps each learner's confirmed draft;
// leaving a page whose text the server had not confirmed asked first. Drafts made signed out
// ("loopgrade:draft:anon:...") belong to no account and stay.
"use strict";
(function () {
  const COOKIE = "loopgrade_forget_drafts";
  if (!document.cookie.split("; ").includes(COOKIE + "=1")) return;
  try {
    const signedIn = [];
    for (let index = 0; index < localStorage.length; index++) {
      const key = localStorage.key(index);
      if (key && key.startsWith("loopgrade:draft:") && !key.startsWith("loopgrade:draft:anon:")) {
        signedIn.push(key);
      }
    }
    signedIn.forEach(function (key) { localStorage.removeItem(key); });
  } catch (error) {
    // Storage disabled: this browser kept nothing.
  }
  document.cookie = COOKIE + "=; Max-Age=0; Path=/" + (location.protocol === "https:" ? "; Secure; SameSite=None" : "");
})();
