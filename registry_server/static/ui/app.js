// Progressive enhancement only: every page works without this file.
// 1. A "Copy" button next to each [data-copy] element.
// 2. Live search: the search page updates its results as you type, keeping the URL in step.
// 3. The "Try it" box of an adapter page answers without reloading the page.
// 4. On a phone, the search filters start folded away unless one is in use.
"use strict";

function addCopyButtons() {
  if (!navigator.clipboard) return;
  document.querySelectorAll("[data-copy]").forEach(function (el) {
    var button = document.createElement("button");
    button.type = "button";
    button.className = "copy-button";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy " + (el.getAttribute("aria-label") || "text"));
    button.addEventListener("click", function () {
      navigator.clipboard.writeText(el.textContent.trim()).then(function () {
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = "Copy"; }, 1500);
      });
    });
    // A code block's button goes after the block, not inside it.
    (el.parentElement.tagName === "PRE" ? el.parentElement : el).after(button);
  });
}

// The results heading stays the same element, a live region whose text changes, so screen
// readers announce the new count (a freshly inserted region is not announced).
function swapResults(fresh) {
  var results = document.getElementById("results");
  var heading = document.getElementById("results-h");
  heading.textContent = fresh.querySelector("#results-h").textContent;
  Array.from(results.children).forEach(function (child) {
    if (child !== heading) child.remove();
  });
  Array.from(fresh.children).forEach(function (child) {
    if (child.id !== "results-h") results.appendChild(document.adoptNode(child));
  });
}

function liveSearch() {
  var form = document.getElementById("search-form");
  if (!form || !window.fetch || !window.DOMParser) return;
  var timer = null, pending = null;

  function update() {
    var params = new URLSearchParams(new FormData(form));
    Array.from(params.keys()).forEach(function (key) {
      if (!params.get(key)) params.delete(key);
    });
    var url = form.action + (params.toString() ? "?" + params : "");
    if (pending) pending.abort();
    pending = new AbortController();
    fetch(url, { signal: pending.signal, headers: { "Accept": "text/html" } })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("results");
        if (!fresh) return;
        swapResults(fresh);
        document.title = doc.title;
        history.replaceState(null, "", url);
      })
      .catch(function () { /* aborted or offline: the form still submits normally */ });
  }

  form.addEventListener("input", function (event) {
    if (event.target.type === "search" || event.target.type === "text" || !event.target.type) {
      clearTimeout(timer);
      timer = setTimeout(update, 250);
    }
  });
  form.addEventListener("change", function (event) {
    if (event.target.tagName === "SELECT" || event.target.type === "checkbox") update();
  });
}

// The "Try it" form answers in place (the page does not reload); without this, a plain post.
function tryItInPlace() {
  var form = document.querySelector("form[data-try]");
  var result = document.getElementById("try-result");
  if (!form || !result || !window.fetch || !window.DOMParser) return;
  var button = form.querySelector("button[type=submit]");
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    button.disabled = true;
    button.textContent = "Running…";
    fetch(form.action, { method: "POST", body: new FormData(form) })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("try-result");
        result.replaceChildren.apply(result, fresh ? Array.from(fresh.childNodes).map(function (node) {
          return document.adoptNode(node);
        }) : []);
      })
      .catch(function () { form.submit(); })
      .finally(function () {
        button.disabled = false;
        button.textContent = "Run";
      });
  });
}

function foldFilters() {
  var filters = document.querySelector("details.filters");
  if (!filters || !window.matchMedia("(max-width: 700px)").matches) return;
  var inUse = Array.from(filters.querySelectorAll("input, select")).some(function (el) {
    return el.type === "checkbox" ? el.checked : el.value;
  });
  if (!inUse) filters.open = false;
}

document.addEventListener("DOMContentLoaded", function () {
  addCopyButtons();
  liveSearch();
  tryItInPlace();
  foldFilters();
});
