/* Starts the vendored Swagger UI or ReDoc on the page templates/api_docs.html serves. */
(function () {
  "use strict";
  var url = document.currentScript.dataset.openapi;
  // Swagger UI's own plugin API (no edit of its code): the title block goes into a labelled region
  // landmark (it sits outside Swagger's <main>), and an "Endpoints" h2 sits between the h1
  // title and the h3 tags so the headings do not skip a level.
  var landmarks = function (system) {
    var h = system.React.createElement;
    return {wrapComponents: {
      InfoContainer: function (Original) {
        return function (props) { return h("div", {role: "region", "aria-label": "about the API"}, h(Original, props)); };
      },
      operations: function (Original) {
        return function (props) {
          return h("div", null, h("h2", {className: "visually-hidden"}, "Endpoints"), h(Original, props));
        };
      }
    }};
  };
  if (window.SwaggerUIBundle && document.getElementById("swagger-ui")) {
    SwaggerUIBundle({url: url, dom_id: "#swagger-ui", layout: "BaseLayout", deepLinking: false,
                     showExtensions: true, showCommonExtensions: true, plugins: [landmarks],
                     presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset]});
  } else if (window.Redoc) {
    // Colours with at least 4.5:1 contrast on white (ReDoc's theme options, no edit of its code).
    Redoc.init(url, {theme: {colors: {primary: {main: "#174f8f"}, success: {main: "#146c2e"},
                                      warning: {main: "#8a4b00"}, error: {main: "#9b0000"},
                                      text: {primary: "#1c1c1c", secondary: "#4a4a4a"}}}},
               document.getElementById("redoc"));
    // ReDoc puts h5 section titles ("path Parameters") straight under its h2 operations: they
    // are announced as level 3, so the outline does not skip levels (attributes only, no DOM change).
    var box = document.getElementById("redoc");
    var relevel = function () {
      box.querySelectorAll("h5:not([aria-level])").forEach(function (h) { h.setAttribute("aria-level", "3"); });
    };
    new MutationObserver(relevel).observe(box, {childList: true, subtree: true});
  }
})();
