// Rows edited in a form (mas_core/admin_fields_editor.RowsWidget): "Add a …" copies the row template under
// the next free number, "Remove" takes a row out of the post. Either tells the page with an "input" event.
(function () {
  "use strict";
  function renumber(rows) {
    rows.querySelectorAll(":scope > .mas-row-list > .mas-row .mas-row-number").forEach(function (el, n) {
      el.textContent = String(n + 1);
    });
  }
  function changed(rows) {
    renumber(rows);
    rows.dispatchEvent(new Event("input", { bubbles: true }));
  }
  document.addEventListener("click", function (event) {
    var add = event.target.closest(".mas-row-add"), remove = event.target.closest(".mas-row-remove");
    if (add) {
      var rows = add.closest(".mas-rows"), list = rows.querySelector(".mas-row-list");
      if (list.children.length >= Number(rows.dataset.max)) return;
      var index = Number(rows.dataset.next);
      rows.dataset.next = String(index + 1);
      var html = rows.querySelector("template.mas-row-template").innerHTML.replace(/__index__/g, String(index));
      list.insertAdjacentHTML("beforeend", html);
      changed(rows);
      list.lastElementChild.querySelector("input:not([type=hidden]), textarea, select").focus();
    } else if (remove) {
      var owner = remove.closest(".mas-rows");
      remove.closest(".mas-row").remove();
      changed(owner);
    }
  });
})();
