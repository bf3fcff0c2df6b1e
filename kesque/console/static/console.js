// kesque console: the live charts (an inline SVG line chart, no library) and confirmations.
"use strict";

(function () {
  // a form with class "confirm" (delete a topic, abort a transaction) asks first
  document.querySelectorAll("form.confirm").forEach(function (f) {
    f.addEventListener("submit", function (e) {
      if (!window.confirm("Really? This cannot be undone.")) e.preventDefault();
    });
  });

  var tp = document.getElementById("chart-throughput");
  var lag = document.getElementById("chart-lag");
  if (!tp || !lag) return;

  var WINDOW = 60; // points kept (two minutes at one poll every 2 s)
  var COLORS = ["#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a3069", "#57606a"];
  var rates = {}; // topic -> [[t, records/s]]
  var lags = {}; // group -> [[t, lag]]
  var last = null;

  function push(series, name, t, v) {
    var s = series[name] || (series[name] = []);
    s.push([t, v]);
    if (s.length > WINDOW) s.shift();
  }

  function el(name, attrs, text) {
    var e = document.createElementNS("http://www.w3.org/2000/svg", name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text; // textContent: names are never parsed as markup
    return e;
  }

  function draw(svg, series) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var W = +svg.getAttribute("width"), H = +svg.getAttribute("height");
    var L = 60, R = 150, T = 10, B = 20;
    var names = Object.keys(series).sort();
    var tmin = Infinity, tmax = -Infinity, vmax = 1;
    names.forEach(function (n) {
      series[n].forEach(function (p) {
        tmin = Math.min(tmin, p[0]); tmax = Math.max(tmax, p[0]); vmax = Math.max(vmax, p[1]);
      });
    });
    if (!names.length || tmax <= tmin) {
      svg.appendChild(el("text", { x: L, y: H / 2 }, "waiting for data…"));
      return;
    }
    function x(t) { return L + (W - L - R) * (t - tmin) / (tmax - tmin); }
    function y(v) { return T + (H - T - B) * (1 - v / vmax); }
    svg.appendChild(el("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), stroke: "#d0d7de" }));
    svg.appendChild(el("text", { x: 4, y: y(vmax) + 10 }, vmax.toFixed(vmax < 10 ? 1 : 0)));
    svg.appendChild(el("text", { x: 4, y: y(0) }, "0"));
    names.forEach(function (n, i) {
      var c = COLORS[i % COLORS.length];
      var pts = series[n].map(function (p) { return x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1); });
      svg.appendChild(el("polyline", { points: pts.join(" "), fill: "none", stroke: c, "stroke-width": 2 }));
      svg.appendChild(el("text", { x: W - R + 8, y: T + 12 + 14 * i, fill: c, "data-series": n }, n));
    });
  }

  function poll() {
    fetch("/api/stats", { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (s) {
        var t = s.time_ms / 1000;
        if (last) {
          var dt = Math.max(t - last.time_ms / 1000, 0.001);
          Object.keys(s.end_offsets).forEach(function (name) {
            var before = last.end_offsets[name];
            if (before !== undefined) push(rates, name, t, Math.max(s.end_offsets[name] - before, 0) / dt);
          });
        }
        Object.keys(s.lag).forEach(function (g) { push(lags, g, t, s.lag[g]); });
        last = s;
        draw(tp, rates);
        draw(lag, lags);
      })
      .catch(function () { /* the next poll tries again */ })
      .finally(function () { setTimeout(poll, 2000); });
  }
  poll();
})();
