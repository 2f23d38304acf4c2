// fleet.js: the fleet view's only script (host/ui/fleet_page.py renders the HTML): it swaps in what the "fleet"
// server-sent event carries and says whether the stream is live. No library, no network beyond this server.
"use strict";
(function () {
  var live = document.getElementById("live");
  var es = new EventSource("/events");
  es.addEventListener("fleet", function (e) {
    document.getElementById("fleet").innerHTML = JSON.parse(e.data).html;
  });
  es.onopen = function () { live.textContent = "live"; live.className = "up"; };
  es.onerror = function () { live.textContent = "reconnecting"; live.className = "down"; };  // EventSource retries
})();
