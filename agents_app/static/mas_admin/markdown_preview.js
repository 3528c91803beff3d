// A markdown body (textarea.mas-body) gets Write / Preview / Side by side: the preview is rendered by the
// monitor's renderer (monitor/markdown.js), which builds DOM nodes and sets only their text, so HTML in the
// body (a <script>, an onerror) shows as characters and never runs. It follows the text as it is typed.
(function () {
  "use strict";
  var MODES = [["write", "Write"], ["preview", "Preview"], ["both", "Side by side"]];
  function setUp(textarea) {
    var box = document.createElement("div"), tabs = document.createElement("div"), preview = document.createElement("div");
    box.className = "mas-md-editor";
    box.dataset.mode = "write";
    tabs.className = "mas-md-tabs";
    tabs.setAttribute("role", "tablist");
    preview.className = "mas-md-preview";
    preview.setAttribute("aria-live", "polite");
    textarea.parentNode.insertBefore(box, textarea);
    var panes = document.createElement("div");
    panes.className = "mas-md-panes";
    panes.appendChild(textarea);
    panes.appendChild(preview);
    box.appendChild(tabs);
    box.appendChild(panes);
    function render() {
      if (box.dataset.mode !== "write") renderMarkdown(preview, textarea.value);
    }
    function choose(mode) {
      box.dataset.mode = mode;
      textarea.hidden = mode === "preview";
      preview.hidden = mode === "write";
      tabs.querySelectorAll("button").forEach(function (button) {
        button.setAttribute("aria-selected", String(button.dataset.mode === mode));
      });
      render();
    }
    MODES.forEach(function (entry) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "mas-md-tab";
      button.dataset.mode = entry[0];
      button.setAttribute("role", "tab");
      button.textContent = entry[1];
      button.addEventListener("click", function () { choose(entry[0]); });
      tabs.appendChild(button);
    });
    textarea.addEventListener("input", render);
    choose("write");
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("textarea.mas-body").forEach(setUp);
  });
})();
