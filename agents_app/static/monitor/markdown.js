// A small markdown renderer that cannot inject HTML: it builds DOM nodes and sets only their
// text, so a result holding <script> or <img onerror> shows those characters, never runs them.
// Blocks: headings, paragraphs, fenced code, lists (- * + and 1.), quotes, rules, pipe tables.
// Inline: `code`, **bold**, *italic* / _italic_, [links](http(s) or relative URLs only).
"use strict";
const renderMarkdown = (function () {
  const MAX_CHARS = 200000; // longer texts are cut here (with a note): the page stays responsive
  const INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|\b_([^_\s][^_]*)_\b|\[([^\]]+)\]\(([^)\s]+)\)/g;

  function safeUrl(url) {
    if (/^(https?:\/\/|\/(?!\/)|#|\.\.?\/)/i.test(url)) return url;
    if (!/^[a-z][a-z0-9+.-]*:/i.test(url) && !url.startsWith("//")) return url; // a relative path
    return null; // javascript:, data:, protocol-relative … are shown as text
  }
  function inline(parent, text) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      let node;
      if (m[2] !== undefined) { node = document.createElement("code"); node.textContent = m[2]; }
      else if (m[3] !== undefined || m[4] !== undefined) { node = document.createElement("strong"); inline(node, m[3] ?? m[4]); }
      else if (m[5] !== undefined || m[6] !== undefined) { node = document.createElement("em"); inline(node, m[5] ?? m[6]); }
      else {
        const url = safeUrl(m[8]);
        if (url === null) node = document.createTextNode(m[0]);
        else { node = document.createElement("a"); node.href = url; node.rel = "noopener noreferrer nofollow"; inline(node, m[7]); }
      }
      parent.appendChild(node);
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }
  function tableCells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  }

  return function render(container, source) {
    container.replaceChildren();
    let text = String(source ?? "");
    const cut = text.length > MAX_CHARS;
    if (cut) text = text.slice(0, MAX_CHARS);
    const lines = text.replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    const add = (tag, parent = container) => parent.appendChild(document.createElement(tag));
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) { i++; continue; }
      if ((m = line.match(/^\s*(```+|~~~+)\s*([\w+-]*)/))) {
        const fence = m[1], pre = add("pre"), code = add("code", pre), body = [];
        if (m[2]) code.dataset.lang = m[2];
        for (i++; i < lines.length && !lines[i].trim().startsWith(fence); i++) body.push(lines[i]);
        code.textContent = body.join("\n"); i++;
        continue;
      }
      if ((m = line.match(/^(#{1,6})\s+(.*?)\s*#*\s*$/))) { inline(add(`h${m[1].length}`), m[2]); i++; continue; }
      if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) { add("hr"); i++; continue; }
      if (/^\s*>/.test(line)) {
        const quote = [];
        for (; i < lines.length && /^\s*>/.test(lines[i]); i++) quote.push(lines[i].replace(/^\s*>\s?/, ""));
        render(add("blockquote"), quote.join("\n"));
        continue;
      }
      if ((m = line.match(/^\s*([-*+]|\d{1,9}[.)])\s+/))) {
        const ordered = /\d/.test(m[1]), list = add(ordered ? "ol" : "ul");
        const item = ordered ? /^\s*\d{1,9}[.)]\s+(.*)$/ : /^\s*[-*+]\s+(.*)$/;
        let li = null;
        for (; i < lines.length && lines[i].trim(); i++) {
          const im = lines[i].match(item);
          if (im) { li = add("li", list); inline(li, im[1]); }
          else if (li && /^\s+\S/.test(lines[i])) { li.appendChild(document.createTextNode(" ")); inline(li, lines[i].trim()); }
          else break;
        }
        continue;
      }
      if (line.includes("|") && i + 1 < lines.length && /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/.test(lines[i + 1])) {
        const table = add("table"), head = add("tr", add("thead", table)), body = add("tbody", table);
        for (const c of tableCells(line)) inline(add("th", head), c);
        for (i += 2; i < lines.length && lines[i].includes("|") && lines[i].trim(); i++) {
          const tr = add("tr", body);
          for (const c of tableCells(lines[i])) inline(add("td", tr), c);
        }
        continue;
      }
      const para = [];
      for (; i < lines.length && lines[i].trim() && !/^(#{1,6}\s|\s*```|\s*~~~|\s*>|\s*([-*+]|\d{1,9}[.)])\s+)/.test(lines[i]); i++) {
        para.push(lines[i].trim());
      }
      if (!para.length) { para.push(line.trim()); i++; }
      const p = add("p");
      para.forEach((part, n) => { if (n) p.appendChild(document.createElement("br")); inline(p, part); });
    }
    if (cut) { const note = add("p"); note.className = "muted"; note.textContent = `… (the first ${MAX_CHARS.toLocaleString("en-US")} characters)`; }
  };
})();
