"""The lab's statistics: a row's mean and spread over seeds, and whether two rows are ordered beyond noise.

A measured difference between two rows counts as an ordering only where it exceeds twice its standard
error (Welch's, from each row's sample variance over its seeds); otherwise the pair is "not separated".
A counted ordering agrees with the paper when both point the same way. Pure Python: no torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

AGREES, DISAGREES, NOT_SEPARATED, NOT_MEASURED = "agrees", "disagrees", "not separated", "not measured"
SEPARATION = 2.0  # standard errors a difference must exceed to count


@dataclass(frozen=True)
class Summary:
    """A row's values of one probe over its seeds."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1); nan below two values."""
        return statistics.stdev(self.values) if self.n >= 2 else math.nan

    @property
    def sem(self) -> float:
        return self.std / math.sqrt(self.n) if self.n >= 2 else math.nan

    def to_dict(self) -> dict[str, object]:
        return {"values": list(self.values), "n": self.n, "mean": _num(self.mean), "std": _num(self.std)}


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def difference_se(a: Summary, b: Summary) -> float:
    """Welch's standard error of mean(a) - mean(b): sqrt(s_a^2 / n_a + s_b^2 / n_b); nan below 2 seeds."""
    if a.n < 2 or b.n < 2:
        return math.nan
    return math.sqrt(a.std**2 / a.n + b.std**2 / b.n)


@dataclass(frozen=True)
class Ordering:
    """One pair of rows on one probe: the paper's direction, the measured one, and the verdict."""

    probe: str
    column: str  # the paper's column the probe stands in for
    better: str  # the row the paper ranks higher
    worse: str
    paper_diff: float  # paper[better] - paper[worse]: > 0, or < 0 where lower is better
    measured_diff: float  # mean[better] - mean[worse] (nan when not measured)
    se: float
    verdict: str  # AGREES | DISAGREES | NOT_SEPARATED | NOT_MEASURED

    @property
    def counts(self) -> bool:
        return self.verdict in (AGREES, DISAGREES)

    def to_dict(self) -> dict[str, object]:
        return {
            "probe": self.probe, "column": self.column, "better": self.better, "worse": self.worse,
            "paper_diff": self.paper_diff, "measured_diff": _num(self.measured_diff), "se": _num(self.se),
            "verdict": self.verdict,
        }  # fmt: skip


def order(
    probe: str,
    column: str,
    better: str,
    worse: str,
    paper_diff: float,
    a: Summary | None,
    b: Summary | None,
    *,
    higher_is_better: bool = True,
) -> Ordering:
    """The verdict on the paper's ``better`` > ``worse`` from their measured summaries ``a`` and ``b``
    (``higher_is_better`` False: a perplexity, where the better row measures lower)."""
    if a is None or b is None or a.n == 0 or b.n == 0:
        return Ordering(probe, column, better, worse, paper_diff, math.nan, math.nan, NOT_MEASURED)
    diff = a.mean - b.mean
    se = difference_se(a, b)
    if math.isnan(se) or not abs(diff) > SEPARATION * se:
        verdict = NOT_SEPARATED
    else:
        verdict = AGREES if (diff > 0) == higher_is_better else DISAGREES
    return Ordering(probe, column, better, worse, paper_diff, diff, se, verdict)


@dataclass(frozen=True)
class Agreement:
    """Over a set of orderings: how many count (separated beyond noise) and how many of those agree."""

    total: int
    counted: int
    agreed: int

    @property
    def agreement(self) -> float:
        """Share of counted orderings in the paper's direction (nan when none counts)."""
        return self.agreed / self.counted if self.counted else math.nan

    @property
    def coverage(self) -> float:
        """Share of all orderings that count."""
        return self.counted / self.total if self.total else math.nan

    def to_dict(self) -> dict[str, object]:
        return {"total": self.total, "counted": self.counted, "agreed": self.agreed,
                "agreement": _num(self.agreement), "coverage": _num(self.coverage)}  # fmt: skip


def agreement(orderings: Sequence[Ordering]) -> Agreement:
    counted = [o for o in orderings if o.counts]
    return Agreement(len(orderings), len(counted), sum(o.verdict == AGREES for o in counted))
