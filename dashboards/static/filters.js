/* The history page's filters (dashboards/templates/history.html): the shape selects fill the one
   `shape` parameter (K=512,dtype=bf16); empty fields are left out of the URL. A file, not an
   inline script: the Content-Security-Policy runs only the app's own files (service/api/headers.py). */
(function () {
  var form = document.querySelector("form.filters");
  if (!form) return;
  form.addEventListener("submit", function () {
    var parts = [];
    form.querySelectorAll("select.shape-param").forEach(function (s) { if (s.value) parts.push(s.dataset.param + "=" + s.value); });
    form.elements.shape.value = parts.join(",");
    Array.prototype.forEach.call(form.elements, function (e) { if (e.name && !e.value) e.disabled = true; });
  });
})();
