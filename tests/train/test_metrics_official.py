"""Metrics agree with the benchmarks' own scorers (VQAv2 vqaEval.py, ChartQA relaxed correctness,
DocVQA/InfoVQA ANLS) on cases worked out by hand from the scorers' definitions."""

from __future__ import annotations

import math

import pytest

from mmtune.evaluate import metrics as M


# ---- VQAv2 ---------------------------------------------------------------------------------------
def test_vqa_accuracy_averages_the_ten_leave_one_out_subsets():
    # 2 of 10 annotators said "2": leaving out one of them leaves 1 match (1/3), leaving out any of the
    # other 8 leaves 2 matches (2/3) -> (2 * 1/3 + 8 * 2/3) / 10 = 0.6, not min(1, 2/3).
    refs = [["2", "2"] + ["3"] * 8]
    assert M.vqa_accuracy(["2"], refs) == pytest.approx(0.6)
    # 3 matches: (3 * 2/3 + 7 * 1) / 10 = 0.9; 4 or more: 1.0.
    assert M.vqa_accuracy(["2"], [["2"] * 3 + ["3"] * 7]) == pytest.approx(0.9)
    assert M.vqa_accuracy(["2"], [["2"] * 4 + ["3"] * 6]) == pytest.approx(1.0)
    assert M.vqa_accuracy(["4"], refs) == 0.0


def test_vqa_normalisation_number_words_articles_contractions_punctuation():
    assert M.vqa_normalize("Two") == "2"
    assert M.vqa_normalize("the dog") == "dog"
    assert M.vqa_normalize("An apple.") == "apple"
    assert M.vqa_normalize("dont") == "don't"
    assert M.vqa_normalize("yes!") == "yes"
    assert M.vqa_normalize("1,000") == "1000"  # the comma between digits goes, no space left
    assert M.vqa_normalize("red-white") == "red white"  # a hyphen inside a word becomes a space
    assert M.vqa_normalize("3.5") == "3.5"  # a decimal point stays
    assert M.vqa_accuracy(["Two dogs."], [["2 dogs"] * 10]) == 1.0


def test_vqa_accuracy_single_reference_is_normalised_exact_match():
    assert M.vqa_accuracy(["The Hobbit"], [["hobbit"]]) == 1.0
    assert M.vqa_accuracy(["Hobbit 2"], [["hobbit"]]) == 0.0


# ---- ChartQA -------------------------------------------------------------------------------------
def test_relaxed_correctness_whole_numbers_within_five_percent():
    assert M.relaxed_accuracy(["10.4", "cat"], [["10"], ["Cat"]]) == 1.0
    assert M.relaxed_accuracy(["10.6"], [["10"]]) == 0.0
    assert M.relaxed_accuracy(["45%"], [["0.45"]]) == 1.0  # a trailing % divides by 100
    # A number inside a sentence is not a number: no "first number anywhere".
    assert M.relaxed_accuracy(["45 million"], [["45"]]) == 0.0
    assert M.relaxed_accuracy(["about 45"], [["45"]]) == 0.0
    # A zero reference is compared as a string (the scorer's `if target_float:`).
    assert M.relaxed_accuracy(["0.0"], [["0"]]) == 0.0
    assert M.relaxed_accuracy(["0"], [["0"]]) == 1.0


# ---- ANLS ----------------------------------------------------------------------------------------
def test_anls_keeps_punctuation_and_thresholds_at_half():
    # "hello world" vs "hello world!": distance 1 over 12 characters -> 1 - 1/12.
    assert M.anls(["hello world"], [["hello world!"]]) == pytest.approx(1 - 1 / 12)
    assert M.anls(["  Hello   World "], [["hello world"]]) == pytest.approx(1 - 0 / 16)  # case and spaces only
    assert M.anls(["abc"], [["xyz"]]) == 0.0
    # Exactly 0.5 is kept (the scorer zeroes only scores below the threshold): "ab" vs "ax".
    assert M.anls(["ab"], [["ax"]]) == pytest.approx(0.5)
    assert M.anls(["abc"], [["axy"]]) == 0.0  # 1/3 < 0.5
    # The best of several answers counts.
    assert M.anls(["56%"], [["56 %", "56%"]]) == 1.0


# ---- counting ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [
    ("17", 17), ("COUNT: 17", 17), ("count: 1,234", 1234), ("seventeen", 17), ("twenty-one", 21),
    ("about 12", 12), ("There are one hundred and five birds.", 105), ("I see 3 apples", 3),
    ("12.5", 12.5), ("no idea", None), ("", None),
])
def test_parse_number(text, value):
    assert M.parse_number(text) == value


def test_mae_rmse_count_unparsable_as_zero_and_report_them():
    preds, refs = ["3", "there are 5", "no idea"], [["4"], ["5"], ["2"]]
    assert M.mae(preds, refs) == pytest.approx((1 + 0 + 2) / 3)
    assert M.rmse(preds, refs) == pytest.approx(math.sqrt((1 + 0 + 4) / 3))
    out = M.compute(["mae", "rmse"], preds, refs)
    assert out["unparsable"] == 1.0
    assert not M.greater_is_better("mae") and not M.greater_is_better("fsc147/rmse")
    with pytest.raises(ValueError, match="numeric references"):
        M.mae(["1"], [["many"]])
