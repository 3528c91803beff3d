// Forms that undo nothing ask first: <form data-confirm="question">.
"use strict";
document.addEventListener("submit", (e) => {
  const question = e.target.dataset && e.target.dataset.confirm;
  if (question && !window.confirm(question)) e.preventDefault();
}, true);
