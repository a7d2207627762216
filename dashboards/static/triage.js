/* Triage on the alerts pages (templates/_triage.html). The person's API token is kept in this
   tab's sessionStorage and sent as "Authorization: Bearer" by fetch: no cookie carries it, so a
   request forged by another site has no credentials (no CSRF token needed), and it is gone when
   the tab closes. The form sends PATCH /api/alerts for the checked alerts (or the page's one
   alert) with the reason ("why", required for several); the server answers all or none, then
   the page reloads to show the new state. */
(function () {
  "use strict";
  var KEY = "perfbisect-token";
  var root = document.getElementById("triage");
  if (!root) return;
  var tokenForm = document.getElementById("token-form"), state = document.getElementById("token-state");
  var form = document.getElementById("triage-form"), message = document.getElementById("triage-message");

  function showState() {
    state.textContent = sessionStorage.getItem(KEY)
      ? "A token is set for this tab."
      : "Triage needs a token with the triage scope (perfbisect token create NAME --scope triage).";
  }
  tokenForm.addEventListener("submit", function (e) {
    e.preventDefault();
    var value = tokenForm.elements.token.value.trim();
    if (value) sessionStorage.setItem(KEY, value);
    tokenForm.elements.token.value = "";
    showState();
  });
  document.getElementById("token-forget").addEventListener("click", function () {
    sessionStorage.removeItem(KEY);
    showState();
  });
  var all = document.getElementById("pick-all");
  if (all) all.addEventListener("change", function () {
    document.querySelectorAll("input.pick").forEach(function (box) { box.checked = all.checked; });
  });

  function selected() {
    if (root.dataset.alertId) return [Number(root.dataset.alertId)];
    return Array.from(document.querySelectorAll("input.pick:checked")).map(function (b) { return Number(b.value); });
  }

  function detail(body) {
    if (!body || body.detail === undefined) return "";
    if (typeof body.detail === "string") return body.detail;
    return body.detail.map(function (d) { return (d.loc || []).slice(1).join(".") + ": " + d.msg; }).join("; ");
  }

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    var ids = selected(), token = sessionStorage.getItem(KEY), body = {ids: ids}, changed = false;
    ["status", "assignee", "bug", "note"].forEach(function (name) {
      var value = form.elements[name].value.trim();
      if (value) { body[name] = value === "-" ? "" : value; changed = true; }
    });
    if (!ids.length) { message.textContent = "Select at least one alert."; return; }
    if (!changed) { message.textContent = "Choose a status or fill a field to change."; return; }
    var reason = form.elements.reason.value.trim();
    if (reason) body.reason = reason;
    if (!reason && !root.dataset.alertId) { message.textContent = "Say why (the reason is kept on every alert)."; return; }
    if (!token) { message.textContent = "Enter a token with the triage scope first."; return; }
    message.textContent = "Saving…";
    fetch("/api/alerts", {method: "PATCH", body: JSON.stringify(body),
                          headers: {"Content-Type": "application/json", "Accept": "application/json",
                                    "Authorization": "Bearer " + token}})
      .then(function (r) {
        if (r.ok) { window.location.reload(); return; }
        return r.json().catch(function () { return {}; }).then(function (j) {
          message.textContent = "Not saved (" + r.status + "): " + (detail(j) || r.statusText);
        });
      })
      .catch(function (err) { message.textContent = "Not saved: " + err; });
  });
  showState();
})();
