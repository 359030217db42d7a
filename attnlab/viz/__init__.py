"""Pictures of what models compute, on top of the pipelines (like `attnlab.cli`).

- `attention_png.draw_attention_png`: every layer's and head's attention as a grid of heat maps (matplotlib).
- `attention_html.attention_page`: a standalone, offline HTML page with the web demo's interactive attention
  view (``attnlab/serving/static/attention.js`` inlined).

Both take the dict `attnlab.tasks.attention.attention_weights` returns.
"""
