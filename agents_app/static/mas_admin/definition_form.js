// The definition form: show the editor chosen ("the form" or "the markdown"); the other stays in the page, hidden.
(function () {
  "use strict";
  function apply() {
    var chosen = document.querySelector("input[name=editor]:checked");
    // None chosen: a form posted without the choice (the markdown editor of old), shown as it was sent.
    var mode = chosen ? chosen.value : "markdown";
    document.querySelectorAll("fieldset.mas-fields-editor").forEach(function (el) { el.hidden = mode !== "fields"; });
    document.querySelectorAll("fieldset.mas-markdown-editor").forEach(function (el) { el.hidden = mode !== "markdown"; });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("input[name=editor]").forEach(function (el) { el.addEventListener("change", apply); });
    apply();
  });
})();
