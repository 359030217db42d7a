"""Server metrics in the Prometheus text format (version 0.0.4), served at ``/metrics``.

- ``attnlab_requests_total{endpoint,status}``: requests answered, by path and HTTP status;
- ``attnlab_request_duration_seconds{endpoint}``: latency histogram, from the request's first byte to its
  response's last (streams included);
- ``attnlab_batch_size{endpoint}`` and ``attnlab_batch_tokens{endpoint}``: histograms of the dynamic batches
  (requests, and padded tokens = size x longest);
- ``attnlab_batch_duration_seconds{endpoint}``: time on the model thread per batch;
- ``attnlab_time_to_first_token_seconds{endpoint}`` and ``attnlab_generated_tokens_per_second{endpoint}``:
  histograms of generation requests (from arrival to the first new text; new tokens over the whole time);
- ``attnlab_queue_depth``: requests waiting for a batch now; ``attnlab_in_flight``: requests being handled.

Written here rather than with prometheus_client: a few counters and histograms are all the server needs.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536)
RATE_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last: +Inf only
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, running = [], 0
        sep = "," if labels else ""
        for bound, n in zip((*self.buckets, float("inf")), self.counts):
            running += n
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            out.append(f'{name}_bucket{{{labels}{sep}le="{le}"}} {running}')
        braces = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{braces} {self.sum!r}", f"{name}_count{braces} {self.count}"]
        return out


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Thread-safe counters, gauges and histograms; `render` gives the exposition text."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.latency: dict[str, Histogram] = {}
        self.batch_sizes: dict[str, Histogram] = {}
        self.batch_tokens: dict[str, Histogram] = {}
        self.batch_seconds: dict[str, Histogram] = {}
        self.first_token: dict[str, Histogram] = {}
        self.token_rate: dict[str, Histogram] = {}
        self.depth = 0
        self.in_flight = 0

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        with self.lock:
            self.requests[(endpoint, status)] += 1
            self.latency.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def batch(self, endpoint: str, size: int, tokens: int, seconds: float) -> None:
        with self.lock:
            self.batch_sizes.setdefault(endpoint, Histogram(SIZE_BUCKETS)).observe(size)
            self.batch_tokens.setdefault(endpoint, Histogram(TOKEN_BUCKETS)).observe(tokens)
            self.batch_seconds.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def generation(self, endpoint: str, first_token_s: float, tokens: int, seconds: float) -> None:
        with self.lock:
            self.first_token.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(first_token_s)
            rate = tokens / seconds if seconds > 0 else 0.0
            self.token_rate.setdefault(endpoint, Histogram(RATE_BUCKETS)).observe(rate)

    def queue_depth(self, depth: int) -> None:
        self.depth = depth

    def render(self) -> str:
        with self.lock:
            lines = [
                "# HELP attnlab_requests_total Requests answered, by endpoint and HTTP status.",
                "# TYPE attnlab_requests_total counter",
            ]
            for (endpoint, status), n in sorted(self.requests.items()):
                lines.append(f'attnlab_requests_total{{endpoint="{_label(endpoint)}",status="{status}"}} {n}')
            families = (
                ("attnlab_request_duration_seconds", "Request latency in seconds.", self.latency),
                ("attnlab_batch_size", "Requests per model batch.", self.batch_sizes),
                ("attnlab_batch_tokens", "Padded tokens per model batch.", self.batch_tokens),
                ("attnlab_batch_duration_seconds", "Model time per batch in seconds.", self.batch_seconds),
                (
                    "attnlab_time_to_first_token_seconds",
                    "Seconds to the first generated text.",
                    self.first_token,
                ),
                ("attnlab_generated_tokens_per_second", "Generated tokens per second.", self.token_rate),
            )
            for name, help_text, hists in families:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
                for endpoint, hist in sorted(hists.items()):
                    lines += hist.lines(name, f'endpoint="{_label(endpoint)}"')
            lines += [
                "# HELP attnlab_queue_depth Requests waiting for a batch.",
                "# TYPE attnlab_queue_depth gauge",
                f"attnlab_queue_depth {self.depth}",
                "# HELP attnlab_in_flight Requests being handled.",
                "# TYPE attnlab_in_flight gauge",
                f"attnlab_in_flight {self.in_flight}",
            ]
        return "\n".join(lines) + "\n"
