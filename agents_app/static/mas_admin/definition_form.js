// The definition form: show the editor chosen ("the form" or "the markdown"); the other stays in the page, hidden.
// Switching carries what was typed: the page posts itself to the admin's switch-editor view, which answers the
// markdown the fields compose, or the fields' values for the markdown (mas_core/admin_fields_editor.py). Nothing
// is saved there. An error (a field that does not clean, a markdown that does not read) keeps the view shown.
(function () {
  "use strict";
  var shown = null;  // the view on screen: "fields" or "markdown"

  function chosen() {
    var input = document.querySelector("input[name=editor]:checked");
    // None chosen: a form posted without the choice (the markdown editor of old), shown as it was sent.
    return input ? input.value : "markdown";
  }

  function show(mode) {
    shown = mode;
    document.querySelectorAll("fieldset.mas-fields-editor").forEach(function (el) { el.hidden = mode !== "fields"; });
    document.querySelectorAll("fieldset.mas-markdown-editor").forEach(function (el) { el.hidden = mode !== "markdown"; });
  }

  function errorBox() {
    var box = document.getElementById("mas-switch-errors");
    if (!box) {
      box = document.createElement("div");
      box.id = "mas-switch-errors";
      box.className = "mas-switch-errors errornote";
      box.setAttribute("role", "alert");
      var row = document.querySelector(".form-row.field-editor");
      row.parentNode.insertBefore(box, row.nextSibling);
    }
    return box;
  }

  function report(lines) {
    var box = errorBox();
    box.textContent = "";
    var intro = document.createElement("p");
    intro.textContent = "Not switched: " + (shown === "fields" ? "fix these in the form first." : "the markdown has an error.");
    box.appendChild(intro);
    var list = document.createElement("ul");
    lines.forEach(function (line) {
      var item = document.createElement("li");
      item.textContent = line;
      list.appendChild(item);
    });
    box.appendChild(list);
    box.hidden = false;
  }

  function fire(el) {
    el.dispatchEvent(new Event("input", { bubbles: true }));
    el.dispatchEvent(new Event("change", { bubbles: true }));
  }

  function addChoice(form, name, value, label, template) {
    // A choice only this markdown names (a model or server the team does not have): offered as the server would.
    var select = form.querySelector("select[name='" + name + "']");
    if (select) {
      var option = document.createElement("option");
      option.value = value;
      option.textContent = label;
      select.appendChild(option);
      return;
    }
    var owner = document.getElementById("id_" + name);
    if (!owner) return;
    var item = document.createElement("div"), labelEl = document.createElement("label"), box = document.createElement("input");
    box.type = template;
    box.name = name;
    box.value = value;
    labelEl.appendChild(box);
    labelEl.appendChild(document.createTextNode(" " + label));
    item.appendChild(labelEl);
    owner.appendChild(item);
  }

  function setRows(owner, rows) {
    var name = owner.dataset.name, list = owner.querySelector(":scope > .mas-row-list");
    var template = owner.querySelector(":scope > template.mas-row-template").innerHTML;
    list.textContent = "";
    rows.forEach(function (row, n) {
      list.insertAdjacentHTML("beforeend", template.replace(/__index__/g, String(n)));
      var el = list.lastElementChild;
      el.querySelector(".mas-row-number").textContent = String(n + 1);
      el.querySelector("input[name='" + name + "-" + n + "-was']").value = row.was;
      Object.keys(row.values).forEach(function (key) {
        var value = row.values[key], cells = el.querySelectorAll("[name='" + name + "-" + n + "-" + key + "']");
        cells.forEach(function (cell) {
          if (cell.type === "checkbox") cell.checked = Array.isArray(value) && value.indexOf(cell.value) >= 0;
          else cell.value = value === null || value === undefined ? "" : String(value);
        });
      });
    });
    owner.dataset.next = String(rows.length);
    fire(owner);
  }

  function fill(form, answer) {
    Object.keys(answer.values).forEach(function (name) {
      var value = answer.values[name], rows = form.querySelector(".mas-rows[data-name='" + name + "']");
      if (rows) { setRows(rows, value || []); return; }
      var inputs = form.querySelectorAll("fieldset.mas-fields-editor [name='" + name + "']");
      if (!inputs.length) return;
      var first = inputs[0];
      if ((first.type === "checkbox" || first.type === "radio") && Array.isArray(value) || first.tagName === "SELECT") {
        var wanted = [].concat(value === null || value === undefined ? [] : value).map(String);
        var present = Array.prototype.map.call(first.tagName === "SELECT" ? first.options : inputs, function (el) { return el.value; });
        (answer.choices[name] || []).forEach(function (choice) {
          if (wanted.indexOf(choice[0]) >= 0 && present.indexOf(choice[0]) < 0) addChoice(form, name, choice[0], choice[1], first.type);
        });
        if (first.tagName === "SELECT") {
          first.value = wanted.length ? wanted[0] : "";
          fire(first);
          return;
        }
        inputs = form.querySelectorAll("fieldset.mas-fields-editor [name='" + name + "']");
        inputs.forEach(function (el) { el.checked = wanted.indexOf(el.value) >= 0; fire(el); });
      } else if (first.type === "checkbox") {
        first.checked = Boolean(value);
        fire(first);
      } else {
        first.value = value === null || value === undefined ? "" : String(value);
        fire(first);
      }
    });
  }

  function switchTo(input) {
    var to = input.value, form = input.form, from = shown;
    if (to === from) return;
    var url = input.dataset.switchUrl;
    if (!url) { show(to); return; }
    var radios = document.querySelectorAll("input[name=editor]");
    var data = new FormData(form);
    data.set("editor", from);
    data.set("to", to);
    radios.forEach(function (el) { el.disabled = true; });
    form.dataset.switching = "1";
    fetch(url, { method: "POST", body: data, credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; },
          function () { return { ok: false, body: { errors: ["the server answered " + response.status] } }; });
      })
      .then(function (result) {
        if (!result.ok) throw result.body.errors || ["the server answered an error"];
        if (to === "markdown") {
          var textarea = form.querySelector("textarea[name=markdown]");
          textarea.value = result.body.markdown;
          fire(textarea);
        } else {
          fill(form, result.body);
        }
        var box = document.getElementById("mas-switch-errors");
        if (box) box.hidden = true;
        show(to);
      })
      .catch(function (problem) {
        report(Array.isArray(problem) ? problem : ["could not reach the server (" + problem + ")"]);
        form.querySelector("input[name=editor][value='" + from + "']").checked = true;
      })
      .finally(function () {
        radios.forEach(function (el) { el.disabled = false; });
        delete form.dataset.switching;
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var radios = document.querySelectorAll("input[name=editor]");
    radios.forEach(function (el) {
      el.addEventListener("change", function () { if (el.checked) switchTo(el); });
    });
    // Mid-switch the choice is disabled, so not posted: a save then would not know which view to save.
    var form = radios.length ? radios[0].form : null;
    if (form) form.addEventListener("submit", function (event) { if (form.dataset.switching) event.preventDefault(); });
    show(chosen());
  });
})();
