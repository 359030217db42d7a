"""The lab's statistics on synthetic numbers: Welch's standard error and the three verdicts."""

import math

import pytest

from attnlab.ablation.stats import (
    AGREES,
    DISAGREES,
    NOT_MEASURED,
    NOT_SEPARATED,
    Summary,
    agreement,
    difference_se,
    order,
)


def test_summary_mean_and_sample_std():
    s = Summary((1.0, 2.0, 3.0))
    assert s.mean == 2.0
    assert s.std == pytest.approx(1.0)  # n - 1 in the denominator
    assert math.isnan(Summary((5.0,)).std)


def test_welch_standard_error():
    a, b = Summary((1.0, 2.0, 3.0)), Summary((2.0, 4.0, 6.0, 8.0))
    expected = math.sqrt(1.0 / 3 + (20 / 3) / 4)
    assert difference_se(a, b) == pytest.approx(expected)


def test_separated_in_the_papers_direction_agrees():
    better, worse = Summary((80.0, 80.5, 79.5)), Summary((70.0, 70.5, 69.5))
    o = order("p", "col", "A", "B", 1.0, better, worse)
    assert o.verdict == AGREES and o.counts
    assert o.measured_diff == pytest.approx(10.0)


def test_separated_against_the_paper_disagrees():
    o = order("p", "col", "A", "B", 1.0, Summary((70.0, 70.5, 69.5)), Summary((80.0, 80.5, 79.5)))
    assert o.verdict == DISAGREES and o.counts


def test_difference_within_twice_its_standard_error_is_not_separated():
    # diff 1.0, each std 1.0 over 3 seeds: SE = sqrt(2/3) = 0.82, 2 SE = 1.63 > 1.0
    o = order("p", "col", "A", "B", 1.0, Summary((80.0, 81.0, 82.0)), Summary((79.0, 80.0, 81.0)))
    assert o.verdict == NOT_SEPARATED and not o.counts
    # the same difference with a tenth of the spread is separated
    o = order("p", "col", "A", "B", 1.0, Summary((80.9, 81.0, 81.1)), Summary((79.9, 80.0, 80.1)))
    assert o.verdict == AGREES


def test_one_seed_cannot_separate_and_no_seed_is_not_measured():
    assert order("p", "c", "A", "B", 1.0, Summary((90.0,)), Summary((10.0,))).verdict == NOT_SEPARATED
    assert order("p", "c", "A", "B", 1.0, Summary(()), Summary((10.0, 11.0))).verdict == NOT_MEASURED


def test_lower_is_better_flips_the_measured_direction():
    lower = Summary((10.0, 10.1, 9.9))  # a perplexity: the paper's better row measures lower
    higher = Summary((20.0, 20.1, 19.9))
    assert order("ppl", "c", "A", "B", 1.0, lower, higher, higher_is_better=False).verdict == AGREES


def test_agreement_counts_only_separated_orderings():
    a, b, c = Summary((1.0, 1.1, 0.9)), Summary((5.0, 5.1, 4.9)), Summary((1.0, 3.0, 5.0))
    orderings = [
        order("p", "c", "X", "Y", 1, b, a),  # agrees
        order("p", "c", "X", "Y", 1, a, b),  # disagrees
        order("p", "c", "X", "Y", 1, c, a),  # not separated
        order("p", "c", "X", "Y", 1, b, a),  # agrees
    ]
    result = agreement(orderings)
    assert (result.total, result.counted, result.agreed) == (4, 3, 2)
    assert result.agreement == pytest.approx(2 / 3)
    assert result.coverage == pytest.approx(3 / 4)
