"""A standalone attention page: the web demo's view (``attnlab/serving/static/attention.js``) with the
script, its stylesheet and the data inlined, so the file opens offline, from disk, with no server.

The page holds the head view (layer and head selectors, hover a token to isolate it) and the model view
(every head as a small heat map; clicking one shows it in the head view).
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

from attnlab.atomic import atomic_write

SCRIPT = Path(__file__).resolve().parent.parent / "serving" / "static" / "attention.js"

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body{{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222}}
h1{{font-size:18px}} h2{{font-size:15px;margin-top:28px}} .attn-text{{color:#555}}
</style>
</head>
<body>
<h1>{title}</h1>
<p class="attn-text">{text}</p>
<h2>Head view</h2>
<p class="attn-text">Lines join each token (left) to the tokens it attends to (right), darker for more
attention. Hover a token to isolate it; pick a layer and a head (or all heads).</p>
<div id="attn-head-view"></div>
<h2>Model view</h2>
<p class="attn-text">Every layer (rows) and head (columns); click one to show it above.</p>
<div id="attn-model-view"></div>
<script type="application/json" id="attn-data">{data}</script>
<script>
{script}
</script>
<script>
(function () {{
  var data = JSON.parse(document.getElementById("attn-data").textContent);
  var head = AttnView.render(document.getElementById("attn-head-view"), data, {{layer: 0, head: 0}});
  AttnView.renderModelView(document.getElementById("attn-model-view"), data, {{
    onSelect: function (layer, h) {{ head.setSelection(layer, h); }}
  }});
}})();
</script>
</body>
</html>
"""


def _json_for_script(data: dict[str, Any]) -> str:
    """JSON that cannot end the <script> element it sits in (``<``, ``>``, ``&`` escaped)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def attention_page(data: dict[str, Any], title: str = "attnlab attention", text: str = "") -> str:
    """The page as a string."""
    script = SCRIPT.read_text(encoding="utf-8")
    if "</script" in script.lower():
        raise ValueError(f"{SCRIPT}: contains '</script', which would end the inlined script early")
    return _PAGE.format(
        title=html.escape(title), text=html.escape(text), data=_json_for_script(data), script=script
    )


def write_attention_page(data: dict[str, Any], path: str | os.PathLike, title: str = "attnlab attention",
                         text: str = "") -> None:  # fmt: skip
    """Write `attention_page` to ``path`` atomically."""
    page = attention_page(data, title, text)
    with atomic_write(path) as f:
        f.write(page)
