/* Reload every 5 s while the server says work is in flight (body data-refresh="live"), but stop,
   and say so, after 6 reloads in a row (30 s) that changed nothing on the page. */
(function () {
  "use strict";
  if (document.body.dataset.refresh !== "live") return;
  var main = document.getElementById("main"), key = "perfbisect-refresh:" + location.pathname + location.search;
  var text = main ? main.textContent.replace(/\s+/g, " ") : "";
  var hash = 0;
  for (var i = 0; i < text.length; i++) hash = (hash * 31 + text.charCodeAt(i)) | 0;
  var seen = JSON.parse(sessionStorage.getItem(key) || "{}");
  var same = seen.hash === hash ? (seen.same || 0) + 1 : 0;
  sessionStorage.setItem(key, JSON.stringify({hash: hash, same: same}));
  var note = document.getElementById("refresh-note");
  if (same >= 6) {
    if (note) note.textContent = "Nothing changed for 30 s: auto-refresh stopped. Reload the page to check again.";
    sessionStorage.removeItem(key);
    return;
  }
  setTimeout(function () { window.location.reload(); }, 5000);
})();
