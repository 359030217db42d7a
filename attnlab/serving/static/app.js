/*
 * attnlab web page: plain JavaScript, no dependencies, no build step (served by `attnlab serve`).
 *
 * On load it reads GET /v1/info and shows only the panels of the endpoints the model serves. Each panel's
 * form POSTs JSON to /v1/<endpoint> and draws the answer; the attention panel hands /v1/attention's JSON to
 * window.AttnView (attention.js). A result element gets data-state="done" (or "error") when its answer is
 * drawn, which the browser tests wait for.
 */
(function () {
  "use strict";

  var info = null;

  function $(id) { return document.getElementById(id); }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  function headers() {
    var h = {"Content-Type": "application/json"};
    var key = $("api-key").value;
    if (key) h["Authorization"] = "Bearer " + key;
    return h;
  }

  function post(endpoint, body) {
    return fetch("/v1/" + endpoint, {method: "POST", headers: headers(), body: JSON.stringify(body)})
      .then(function (response) {
        return response.json().then(function (data) {
          if (!response.ok) throw new Error(data.message || ("HTTP " + response.status));
          return data;
        });
      });
  }

  function pct(x) { return (100 * x).toFixed(1) + "%"; }

  function scoreRow(label, score) {
    var row = el("div", "score-row");
    row.appendChild(el("span", "score-label", label));
    var bar = el("span", "score-bar");
    var fill = el("span", "score-fill");
    fill.style.width = Math.max(0, Math.min(1, score)) * 100 + "%";
    bar.appendChild(fill);
    row.appendChild(bar);
    row.appendChild(el("span", "score-value", pct(score)));
    return row;
  }

  // Text with character spans [start, end) marked: spans = [{start, end, cls, title, label}]
  function markedText(text, spans) {
    var box = el("p", "marked-text");
    var at = 0;
    spans.slice().sort(function (a, b) { return a.start - b.start; }).forEach(function (s) {
      if (s.start < at) return; // overlapping spans: keep the first
      box.appendChild(document.createTextNode(text.slice(at, s.start)));
      var mark = el("mark", s.cls, text.slice(s.start, s.end));
      if (s.title) mark.title = s.title;
      if (s.label) mark.setAttribute("data-label", s.label);
      box.appendChild(mark);
      at = s.end;
    });
    box.appendChild(document.createTextNode(text.slice(at)));
    return box;
  }

  function formBody(form) {
    var body = {};
    Array.prototype.forEach.call(form.elements, function (input) {
      if (!input.name) return;
      if (input.type === "checkbox") body[input.name] = input.checked;
      else if (input.type === "number") { if (input.value !== "") body[input.name] = Number(input.value); }
      else if (input.value !== "") body[input.name] = input.value;
    });
    return body;
  }

  // ------------------------------------------------------------------------------------------- renderers

  var render = {
    "fill-mask": function (out, data) {
      var groups = Array.isArray(data.predictions[0]) ? data.predictions : [data.predictions];
      groups.forEach(function (preds, i) {
        if (groups.length > 1) out.appendChild(el("h3", null, "mask " + (i + 1)));
        var list = el("ol", "predictions");
        preds.forEach(function (p) {
          var item = el("li", "prediction");
          item.appendChild(scoreRow(p.token_str || p.token, p.score));
          item.appendChild(el("div", "sequence", p.sequence));
          list.appendChild(item);
        });
        out.appendChild(list);
      });
    },
    "classify": function (out, data) {
      var preds = Array.isArray(data.predictions) ? data.predictions : [data.predictions];
      var list = el("div", "predictions");
      preds.forEach(function (p) {
        var row = p.label === "score" ? el("div", "prediction", "score: " + p.score.toFixed(4))
          : scoreRow(p.label, p.score);
        row.classList.add("prediction");
        list.appendChild(row);
      });
      out.appendChild(list);
    },
    "ner": function (out, data, body) {
      var ents = data.entities || [];
      out.appendChild(markedText(body.text, ents.map(function (e) {
        return {start: e.start, end: e.end, cls: "entity ent-" + e.entity_group, label: e.entity_group,
                title: e.entity_group + " " + pct(e.score)};
      })));
      var list = el("ul", "entity-list");
      ents.forEach(function (e) {
        list.appendChild(el("li", "prediction", e.entity_group + ": " + e.word + " (" + pct(e.score) + ")"));
      });
      if (!ents.length) list.appendChild(el("li", "muted", "no entities found"));
      out.appendChild(list);
    },
    "qa": function (out, data, body) {
      var answers = data.answers.filter(function (a) { return a.start >= 0; });
      var best = answers[0];
      out.appendChild(markedText(body.context, best ? [{start: best.start, end: best.end, cls: "answer",
                                                         title: pct(best.score)}] : []));
      var list = el("ol", "predictions");
      data.answers.forEach(function (a) {
        var item = el("li", "prediction");
        item.appendChild(scoreRow(a.answer || "(no answer)", a.score === null ? 0 : a.score));
        list.appendChild(item);
      });
      out.appendChild(list);
    },
    "translate": function (out, data) {
      out.appendChild(el("p", "translation prediction", data.translation));
    },
    "embed": function (out, data) {
      var v = data.embedding, norm = 0;
      v.forEach(function (x) { norm += x * x; });
      out.appendChild(el("p", "prediction", data.dim + " dimensions (" + data.pooling + " pooling), norm " +
        Math.sqrt(norm).toFixed(3)));
      out.appendChild(el("code", "vector", "[" + v.slice(0, 8).map(function (x) { return x.toFixed(3); })
        .join(", ") + (v.length > 8 ? ", …]" : "]")));
    },
  };

  // ---------------------------------------------------------------------------------------------- panels

  function setState(out, state) { out.setAttribute("data-state", state); }

  function showError(out, error) {
    clear(out);
    out.appendChild(el("p", "error", error.message || String(error)));
    setState(out, "error");
  }

  function simplePanel(name) {
    var form = $("form-" + name), out = $("result-" + name);
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var body = formBody(form);
      setState(out, "busy");
      post(name, body).then(function (data) {
        clear(out);
        render[name](out, data, body);
        setState(out, "done");
      }).catch(function (error) { showError(out, error); });
    });
  }

  function attentionPanel() {
    var form = $("form-attention"), out = $("result-attention");
    var headBox = $("attention-head-view"), modelBox = $("attention-model-view");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var body = formBody(form);
      setState(out, "busy");
      post("attention", body).then(function (data) {
        if (!window.AttnView) throw new Error("attention.js did not load");
        var view = window.AttnView.render(headBox, data, {layer: 0, head: 0});
        window.AttnView.renderModelView(modelBox, data, {
          onSelect: function (layer, head) { view.setSelection(layer, head); },
        });
        Array.prototype.forEach.call(out.querySelectorAll(".hint, h3"), function (n) { n.hidden = false; });
        out.setAttribute("data-tokens", String(data.tokens.length));
        setState(out, "done");
      }).catch(function (error) {
        clear(headBox); clear(modelBox);
        headBox.appendChild(el("p", "error", error.message));
        setState(out, "error");
      });
    });
  }

  // Server-sent events over fetch (EventSource cannot POST): "data:" lines carry {token, text} pieces,
  // "event: done" the whole answer, "event: error" a JSON error.
  function generatePanel() {
    var form = $("form-generate"), out = $("result-generate");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var body = formBody(form);
      if (!body.do_sample) { delete body.temperature; delete body.top_p; }
      body.stream = true;
      clear(out);
      var prompt = el("span", "prompt", body.text), text = el("span", "generated prediction");
      var para = el("p", "generation");
      para.appendChild(prompt); para.appendChild(text); out.appendChild(para);
      setState(out, "busy");
      fetch("/v1/generate", {method: "POST", headers: headers(), body: JSON.stringify(body)})
        .then(function (response) {
          if (!response.ok) {
            return response.json().then(function (d) { throw new Error(d.message || ("HTTP " + response.status)); });
          }
          var reader = response.body.getReader(), decoder = new TextDecoder(), buffer = "";
          function handle(block) {
            var kind = "message", data = "";
            block.split("\n").forEach(function (line) {
              if (line.indexOf("event:") === 0) kind = line.slice(6).trim();
              else if (line.indexOf("data:") === 0) data += line.slice(5).trim();
            });
            if (!data) return;
            var payload = JSON.parse(data);
            if (kind === "message") text.textContent += payload.text;
            else if (kind === "done") { text.textContent = payload.text; setState(out, "done"); }
            else if (kind === "error") throw new Error(payload.message);
          }
          function pump() {
            return reader.read().then(function (chunk) {
              if (chunk.done) { if (out.getAttribute("data-state") === "busy") setState(out, "done"); return; }
              buffer += decoder.decode(chunk.value, {stream: true});
              var blocks = buffer.split("\n\n");
              buffer = blocks.pop();
              blocks.forEach(handle);
              return pump();
            });
          }
          return pump();
        }).catch(function (error) { showError(out, error); });
    });
  }

  // ------------------------------------------------------------------------------------------------ start

  var EXAMPLES = {
    "fill-mask-text": function () { return "The capital of France is " + (info.mask_token || "[MASK]") + "."; },
    "classify-text": function () { return "A gripping, beautifully acted film."; },
    "ner-text": function () { return "Alan Turing was born in London and worked in Manchester."; },
    "qa-question": function () { return "Where was Alan Turing born?"; },
    "qa-context": function () { return "Alan Turing was born in London in 1912. He worked at Manchester."; },
    "generate-text": function () { return "Once upon a time"; },
    "translate-text": function () { return "A man is riding a bicycle."; },
    "embed-text": function () { return "The river bank was flooded."; },
    "attention-text": function () { return "The cat sat on the mat."; },
  };

  function start(data) {
    info = data;
    $("model-info").textContent = data.model + " · " + data.architecture + " · " + data.backend +
      " · up to " + data.max_tokens + " tokens";
    $("key-box").hidden = !data.auth_required;
    var links = $("panel-links");
    data.endpoints.forEach(function (path) {
      var name = path.replace("/v1/", "");
      var panel = $("panel-" + name);
      if (!panel) return;
      panel.hidden = false;
      var a = el("a", null, panel.querySelector("h2").textContent);
      a.href = "#panel-" + name;
      links.appendChild(a);
      if (name === "attention") attentionPanel();
      else if (name === "generate") generatePanel();
      else simplePanel(name);
    });
    Object.keys(EXAMPLES).forEach(function (id) { if ($(id) && !$(id).value) $(id).value = EXAMPLES[id](); });
    document.body.setAttribute("data-ready", "true");
  }

  fetch("/v1/info").then(function (r) { return r.json(); }).then(start).catch(function (error) {
    var p = $("page-error");
    p.textContent = "could not read /v1/info: " + error.message;
    p.hidden = false;
  });
})();
