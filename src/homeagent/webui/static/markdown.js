// Markdown from the model, rendered safely: marked turns it into HTML and DOMPurify strips
// anything that could run (scripts, event handlers, javascript: URLs). If either library is
// missing (no `npm install`), the text is shown as plain text instead — never unsanitised HTML.

let loaded = null;

function load() {
  if (!loaded) {
    loaded = Promise.all([
      import("/vendor/marked/lib/marked.esm.js"),
      import("/vendor/dompurify/dist/purify.es.mjs"),
    ]).then(([markedMod, purifyMod]) => {
      const purify = purifyMod.default;
      purify.addHook("afterSanitizeAttributes", (node) => {
        if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
      });
      return { marked: markedMod.marked, purify };
    }).catch((err) => { console.info("markdown libraries unavailable, showing plain text", err); return null; });
  }
  return loaded;
}

export async function markdownReady() { return (await load()) !== null; }

export async function renderMarkdown(el, text) {
  const libs = await load();
  if (!libs) {
    el.classList.add("plain");
    el.textContent = text;
    return;
  }
  const html = libs.marked.parse(text || "", { gfm: true, breaks: true, async: false });
  el.innerHTML = libs.purify.sanitize(html, { USE_PROFILES: { html: true }, FORBID_TAGS: ["style", "form", "input"] });
}
