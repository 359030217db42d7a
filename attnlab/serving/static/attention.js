/*
 * attnlab attention view: plain JavaScript, no dependencies, no build step, works offline.
 *
 * API (the script defines one global):
 *
 *   window.AttnView.render(container, data, {layer: 0, head: 0})  -> view
 *       Head view (like bertviz's): the tokens twice, "from" on the left and "to" on the right, and a
 *       line from each left token to each right token whose opacity and width are the attention weight.
 *       A layer and a head selector sit above it (head may be "all": every head overlaid in its colour).
 *       Hovering a left token isolates the attention it pays; hovering a right token, the attention it
 *       receives. Returns {element, setSelection(layer, head), selection()}.
 *   window.AttnView.renderModelView(container, data, {onSelect}) -> view
 *       Model view: every (layer, head) as a small heat map (rows = from token, columns = to token),
 *       layers as rows and heads as columns. Clicking a cell calls onSelect(layer, head) when given.
 *       Returns {element}.
 *   window.AttnView.validate(data)  -> throws an Error naming what is wrong with `data`.
 *
 * `data` is what attnlab.tasks.attention.attention_weights returns (and the server's /v1/attention):
 *   {"tokens": [str, ...], "layers": L, "heads": H,
 *    "attentions": [[[[float]]]]}          // [layer][head][from_token][to_token], rows sum to 1
 *
 * DOM contract (tests rely on it): the head view draws exactly ONE element with class "attn-token" per
 * token (the left column, data-index = token position); the right column uses "attn-target". The model
 * view draws one "attn-cell" (a <canvas>, data-layer / data-head) per head and no "attn-token".
 * Selectors: "select.attn-layer-select", "select.attn-head-select". The stylesheet is injected once as
 * <style id="attn-view-style">, so including this script is all a page needs.
 */
(function () {
  "use strict";

  var ROW = 22; // px per token row in the head view (fixed, so no layout measurement is needed)
  var LINK_WIDTH = 180; // px between the two token columns
  var COLOURS = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
    "#8c6d31", "#843c39", "#7b4173", "#3182bd",
  ];
  var SVG_NS = "http://www.w3.org/2000/svg";

  var CSS = [
    ".attn-view{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;color:#222}",
    ".attn-controls{display:flex;gap:12px;align-items:center;margin:0 0 8px}",
    ".attn-controls label{display:flex;gap:4px;align-items:center}",
    ".attn-head-body{display:flex;align-items:flex-start}",
    ".attn-column{display:flex;flex-direction:column}",
    ".attn-token,.attn-target{height:" + ROW + "px;line-height:" + ROW + "px;padding:0 6px;white-space:nowrap;" +
      "cursor:default;border-radius:3px}",
    ".attn-token{text-align:right}",
    ".attn-target{text-align:left}",
    ".attn-token.attn-active,.attn-target.attn-active{background:#ffe9a8}",
    ".attn-links line{stroke-linecap:round}",
    ".attn-model{display:grid;gap:4px;align-items:center}",
    ".attn-model-label{font-size:11px;color:#555;text-align:center}",
    ".attn-cell{border:1px solid #ddd;cursor:pointer;image-rendering:pixelated}",
    ".attn-cell:hover{border-color:#333}",
    ".attn-cell.attn-selected{border:2px solid #d62728}",
    ".attn-error{color:#b00020}",
  ].join("\n");

  function injectStyle(doc) {
    if (doc.getElementById("attn-view-style")) return;
    var style = doc.createElement("style");
    style.id = "attn-view-style";
    style.textContent = CSS;
    (doc.head || doc.documentElement).appendChild(style);
  }

  function validate(data) {
    if (!data || typeof data !== "object") throw new Error("attention data: expected an object");
    var tokens = data.tokens, att = data.attentions;
    if (!Array.isArray(tokens) || tokens.length === 0) throw new Error("attention data: 'tokens' must be a non-empty list");
    if (!Array.isArray(att) || att.length === 0) throw new Error("attention data: 'attentions' must be a non-empty list");
    if (data.layers !== undefined && data.layers !== att.length) {
      throw new Error("attention data: 'layers' is " + data.layers + " but 'attentions' has " + att.length + " layers");
    }
    var T = tokens.length, H = att[0].length;
    for (var l = 0; l < att.length; l++) {
      if (!Array.isArray(att[l]) || att[l].length !== H) throw new Error("attention data: layer " + l + " has " + (att[l] && att[l].length) + " heads, expected " + H);
      for (var h = 0; h < H; h++) {
        var m = att[l][h];
        if (!Array.isArray(m) || m.length !== T) throw new Error("attention data: layer " + l + " head " + h + " has " + (m && m.length) + " rows, expected " + T + " (one per token)");
        for (var i = 0; i < T; i++) {
          if (!Array.isArray(m[i]) || m[i].length !== T) throw new Error("attention data: layer " + l + " head " + h + " row " + i + " has " + (m[i] && m[i].length) + " values, expected " + T);
        }
      }
    }
    if (data.heads !== undefined && data.heads !== H) throw new Error("attention data: 'heads' is " + data.heads + " but the layers have " + H + " heads");
    return {layers: att.length, heads: H, tokens: T};
  }

  function el(doc, tag, cls, text) {
    var node = doc.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function clear(container) {
    while (container.firstChild) container.removeChild(container.firstChild);
  }

  function option(doc, select, value, label) {
    var o = doc.createElement("option");
    o.value = String(value);
    o.textContent = label;
    select.appendChild(o);
  }

  function clampInt(value, lo, hi, fallback) {
    var n = parseInt(value, 10);
    if (isNaN(n)) return fallback;
    return Math.max(lo, Math.min(hi, n));
  }

  // -- head view --------------------------------------------------------------------------------------
  function render(container, data, opts) {
    opts = opts || {};
    var doc = container.ownerDocument || document;
    injectStyle(doc);
    clear(container);
    var shape;
    try {
      shape = validate(data);
    } catch (e) {
      container.appendChild(el(doc, "div", "attn-error", e.message));
      throw e;
    }
    var T = shape.tokens;
    var state = {
      layer: clampInt(opts.layer, 0, shape.layers - 1, 0),
      head: opts.head === "all" ? "all" : clampInt(opts.head, 0, shape.heads - 1, 0),
      focus: null, // {side: "from" | "to", index}
    };

    var root = el(doc, "div", "attn-view attn-head-view");
    var controls = el(doc, "div", "attn-controls");
    var layerLabel = el(doc, "label", "", "Layer ");
    var layerSelect = el(doc, "select", "attn-layer-select");
    for (var l = 0; l < shape.layers; l++) option(doc, layerSelect, l, String(l));
    layerLabel.appendChild(layerSelect);
    var headLabel = el(doc, "label", "", "Head ");
    var headSelect = el(doc, "select", "attn-head-select");
    for (var h = 0; h < shape.heads; h++) option(doc, headSelect, h, String(h));
    option(doc, headSelect, "all", "all");
    headLabel.appendChild(headSelect);
    controls.appendChild(layerLabel);
    controls.appendChild(headLabel);
    root.appendChild(controls);

    var body = el(doc, "div", "attn-head-body");
    var left = el(doc, "div", "attn-column attn-from");
    var right = el(doc, "div", "attn-column attn-to");
    var svg = doc.createElementNS(SVG_NS, "svg");
    svg.setAttribute("class", "attn-links");
    svg.setAttribute("width", String(LINK_WIDTH));
    svg.setAttribute("height", String(T * ROW));
    var fromNodes = [], toNodes = [];
    data.tokens.forEach(function (tok, i) {
      var a = el(doc, "div", "attn-token", tok);
      a.setAttribute("data-index", String(i));
      a.title = tok + " (" + i + ")";
      var b = el(doc, "div", "attn-target", tok);
      b.setAttribute("data-index", String(i));
      b.title = tok + " (" + i + ")";
      a.addEventListener("mouseenter", function () { state.focus = {side: "from", index: i}; draw(); });
      b.addEventListener("mouseenter", function () { state.focus = {side: "to", index: i}; draw(); });
      a.addEventListener("mouseleave", function () { state.focus = null; draw(); });
      b.addEventListener("mouseleave", function () { state.focus = null; draw(); });
      left.appendChild(a);
      right.appendChild(b);
      fromNodes.push(a);
      toNodes.push(b);
    });
    body.appendChild(left);
    body.appendChild(svg);
    body.appendChild(right);
    root.appendChild(body);
    container.appendChild(root);

    function draw() {
      layerSelect.value = String(state.layer);
      headSelect.value = String(state.head);
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      var heads = state.head === "all" ? range(shape.heads) : [state.head];
      var scale = state.head === "all" ? 1 / Math.sqrt(shape.heads) : 1;
      var f = state.focus;
      heads.forEach(function (h) {
        var m = data.attentions[state.layer][h];
        var colour = COLOURS[h % COLOURS.length];
        for (var i = 0; i < T; i++) {
          if (f && f.side === "from" && f.index !== i) continue;
          for (var j = 0; j < T; j++) {
            if (f && f.side === "to" && f.index !== j) continue;
            var w = m[i][j];
            if (!(w > 0.01)) continue; // below 1% the line is invisible; skipping keeps the DOM small
            var line = doc.createElementNS(SVG_NS, "line");
            line.setAttribute("x1", "0");
            line.setAttribute("y1", String(i * ROW + ROW / 2));
            line.setAttribute("x2", String(LINK_WIDTH));
            line.setAttribute("y2", String(j * ROW + ROW / 2));
            line.setAttribute("stroke", colour);
            line.setAttribute("stroke-opacity", String(Math.min(1, w * scale)));
            line.setAttribute("stroke-width", String(0.5 + 2.5 * w));
            svg.appendChild(line);
          }
        }
      });
      for (var k = 0; k < T; k++) {
        var hiFrom = f && ((f.side === "from" && f.index === k));
        var hiTo = f && ((f.side === "to" && f.index === k));
        fromNodes[k].classList.toggle("attn-active", !!hiFrom);
        toNodes[k].classList.toggle("attn-active", !!hiTo);
        // the focused token's weights as background shading on the other column
        var weight = 0;
        if (f && f.side === "from") weight = mean(heads, function (h) { return data.attentions[state.layer][h][f.index][k]; });
        if (f && f.side === "to") weight = mean(heads, function (h) { return data.attentions[state.layer][h][k][f.index]; });
        var shade = f ? "rgba(31,119,180," + Math.min(1, weight).toFixed(3) + ")" : "";
        if (f && f.side === "from" && !hiTo) toNodes[k].style.background = shade;
        else if (f && f.side === "to" && !hiFrom) fromNodes[k].style.background = shade;
        if (!f || f.side === "from") fromNodes[k].style.background = "";
        if (!f || f.side === "to") toNodes[k].style.background = "";
      }
    }

    layerSelect.addEventListener("change", function () { state.layer = clampInt(layerSelect.value, 0, shape.layers - 1, 0); draw(); });
    headSelect.addEventListener("change", function () {
      state.head = headSelect.value === "all" ? "all" : clampInt(headSelect.value, 0, shape.heads - 1, 0);
      draw();
    });
    draw();
    return {
      element: root,
      setSelection: function (layer, head) {
        state.layer = clampInt(layer, 0, shape.layers - 1, state.layer);
        state.head = head === "all" ? "all" : clampInt(head, 0, shape.heads - 1, 0);
        draw();
      },
      selection: function () { return {layer: state.layer, head: state.head}; },
    };
  }

  function range(n) {
    var out = [];
    for (var i = 0; i < n; i++) out.push(i);
    return out;
  }

  function mean(items, fn) {
    var s = 0;
    items.forEach(function (x) { s += fn(x); });
    return items.length ? s / items.length : 0;
  }

  // -- model view (small multiples) -------------------------------------------------------------------
  function renderModelView(container, data, opts) {
    opts = opts || {};
    var doc = container.ownerDocument || document;
    injectStyle(doc);
    clear(container);
    var shape;
    try {
      shape = validate(data);
    } catch (e) {
      container.appendChild(el(doc, "div", "attn-error", e.message));
      throw e;
    }
    var T = shape.tokens;
    var px = Math.max(1, Math.min(6, Math.floor(72 / T))); // pixels per attention value
    var size = px * T;
    var root = el(doc, "div", "attn-view attn-model");
    root.style.gridTemplateColumns = "auto repeat(" + shape.heads + ", " + (size + 2) + "px)";
    root.appendChild(el(doc, "div", "attn-model-label", ""));
    for (var h = 0; h < shape.heads; h++) root.appendChild(el(doc, "div", "attn-model-label", "head " + h));
    var cells = [];
    for (var l = 0; l < shape.layers; l++) {
      root.appendChild(el(doc, "div", "attn-model-label", "layer " + l));
      for (var hh = 0; hh < shape.heads; hh++) {
        var canvas = doc.createElement("canvas");
        canvas.className = "attn-cell";
        canvas.width = size;
        canvas.height = size;
        canvas.setAttribute("data-layer", String(l));
        canvas.setAttribute("data-head", String(hh));
        canvas.title = "layer " + l + ", head " + hh;
        paint(canvas, data.attentions[l][hh], T, px, COLOURS[hh % COLOURS.length]);
        (function (layer, head, node) {
          node.addEventListener("click", function () {
            cells.forEach(function (c) { c.classList.remove("attn-selected"); });
            node.classList.add("attn-selected");
            if (typeof opts.onSelect === "function") opts.onSelect(layer, head);
          });
        })(l, hh, canvas);
        cells.push(canvas);
        root.appendChild(canvas);
      }
    }
    container.appendChild(root);
    return {element: root};
  }

  function paint(canvas, matrix, T, px, colour) {
    var ctx = canvas.getContext && canvas.getContext("2d");
    if (!ctx) return; // no canvas support: the cell stays blank but the grid is still there
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    var rgb = [parseInt(colour.substr(1, 2), 16), parseInt(colour.substr(3, 2), 16), parseInt(colour.substr(5, 2), 16)];
    for (var i = 0; i < T; i++) {
      for (var j = 0; j < T; j++) {
        var w = Math.max(0, Math.min(1, matrix[i][j]));
        ctx.fillStyle = "rgba(" + rgb[0] + "," + rgb[1] + "," + rgb[2] + "," + w.toFixed(3) + ")";
        ctx.fillRect(j * px, i * px, px, px);
      }
    }
  }

  var api = {render: render, renderModelView: renderModelView, validate: validate, css: CSS};
  if (typeof window !== "undefined") window.AttnView = api;
  if (typeof module !== "undefined" && module.exports) module.exports = api;
})();
