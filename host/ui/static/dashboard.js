// dashboard.js: the edgetwin dashboard's only script. The server renders the HTML (host/ui/app.py); this file
// swaps in what its server-sent events carry, and streams the question box's answer. No library, no network.
"use strict";
(function () {
  var node = document.body.getAttribute("data-node");
  var live = document.getElementById("live");

  function nodeBox(name, title) {  // one block of plots per node, made on first sight, titled by its plant's name
    var id = "plots-" + name.replace(/[^A-Za-z0-9_-]/g, "_");
    var box = document.getElementById(id);
    if (!box) {
      box = document.createElement("div");
      box.id = id;
      box.className = "node-plots";
      box.appendChild(document.createElement("h3"));
      document.getElementById("plots").appendChild(box);
    }
    box.firstChild.textContent = title || name;
    return box;
  }

  function update(msg) {
    if (msg.plant !== undefined) document.getElementById("plant").innerHTML = msg.plant;
    Object.keys(msg.plots).forEach(function (key) {
      var el = document.getElementById(key);
      if (!el) {
        el = document.createElement("div");
        el.id = key;
        el.className = "plot-box";
        nodeBox(msg.plots[key].node, msg.plots[key].title).appendChild(el);
      }
      el.innerHTML = msg.plots[key].svg;
    });
    var list = document.getElementById("notes");
    msg.notes.forEach(function (html) { list.insertAdjacentHTML("afterbegin", html); });
    while (list.children.length > 200) list.removeChild(list.lastChild);
  }

  function connect() {
    var es = new EventSource("/events" + (node ? "?node=" + encodeURIComponent(node) : ""));
    es.addEventListener("open", function () { live.textContent = "live"; live.className = "up"; });
    es.addEventListener("error", function () { live.textContent = "reconnecting"; live.className = "down"; });
    es.addEventListener("update", function (e) { update(JSON.parse(e.data)); });
  }
  connect();

  var form = document.getElementById("ask-form");
  if (!form) return;
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var q = document.getElementById("question").value;
    var progress = document.getElementById("ask-progress");
    var answer = document.getElementById("answer");
    var windows = document.getElementById("windows");
    progress.textContent = "asking...";
    answer.textContent = "";
    answer.className = "streaming";
    document.getElementById("unconfirmed").innerHTML = "";
    windows.innerHTML = "";
    var es = new EventSource("/ask?q=" + encodeURIComponent(q));
    es.addEventListener("progress", function (e) { progress.textContent = JSON.parse(e.data); });
    es.addEventListener("windows", function (e) {
      JSON.parse(e.data).forEach(function (w) {
        var li = document.createElement("li");
        li.id = "window-" + w.n;
        li.className = "window";
        var head = document.createElement("div");
        head.className = "span";
        head.textContent = "[" + w.n + "] " + w.span + " (relevance " + w.relevance + ")";
        var pre = document.createElement("pre");
        pre.textContent = w.text;
        li.appendChild(head);
        li.appendChild(pre);
        windows.appendChild(li);
      });
    });
    es.addEventListener("text", function (e) { answer.textContent += JSON.parse(e.data); });
    es.addEventListener("done", function (e) {
      var d = JSON.parse(e.data);
      es.close();
      answer.className = "done";
      if (d.answer !== null && d.answer !== undefined) answer.textContent = d.answer;
      var doubts = document.getElementById("unconfirmed");
      doubts.innerHTML = "";
      if (d.unconfirmed && d.unconfirmed.length) {  // what no log line confirms, said to the operator
        var head = document.createElement("div");
        head.textContent = "Not confirmed by the log:";
        doubts.appendChild(head);
        var ul = document.createElement("ul");
        d.unconfirmed.forEach(function (c) {
          var li = document.createElement("li");
          li.textContent = c.kind + ": " + c.text + (c.why ? " (" + c.why + ")" : "");
          ul.appendChild(li);
        });
        doubts.appendChild(ul);
      }
      d.cited.forEach(function (n) {
        var w = document.getElementById("window-" + n);
        if (w) w.classList.add("cited");
      });
      progress.textContent = d.cited.length ? "answered; the cited windows are marked" :
        "answered; the answer cites no window (it was given those below)";
    });
    es.addEventListener("failed", function (e) {  // the server's own error line
      es.close();
      answer.className = "done";
      progress.textContent = "error: " + JSON.parse(e.data);
    });
    es.addEventListener("error", function () {  // the connection itself
      if (es.readyState === EventSource.CLOSED || answer.className === "done") return;
      es.close();
      progress.textContent = "the connection was lost";
    });
  });
})();
