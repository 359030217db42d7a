"""seqeval entity-level NER scores, by hand."""

import pytest

from attnlab.metrics.ner import ner_metrics


def test_entity_level_by_hand():
    y_true = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    y_pred = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "B-ORG"]]
    # gold entities: PER(0-1), LOC(3), ORG(0); predicted: PER(0-1), ORG(0), ORG(1) → 2 of 3 each way
    m = ner_metrics(y_true, y_pred)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert m["per_type"]["ORG"]["precision"] == pytest.approx(0.5) and m["per_type"]["ORG"]["recall"] == 1.0


def test_partial_span_is_wrong():
    # an entity counts only with exact boundaries and type
    m = ner_metrics([["B-LOC", "I-LOC", "I-LOC"]], [["B-LOC", "I-LOC", "O"]])
    assert m["f1"] == 0.0


def test_strict_mode_rejects_ill_formed_start():
    y_true, y_pred = [["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]]
    assert ner_metrics(y_true, y_pred)["f1"] == 1.0  # conlleval: I- after O starts an entity
    assert ner_metrics(y_true, y_pred, mode="strict")["f1"] == 0.0  # IOB2: no entity without B-


def test_bad_input():
    with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1"):
        ner_metrics([["O", "O"]], [["O"]])
    with pytest.raises(ValueError, match="'PER'"):
        ner_metrics([["PER"]], [["O"]])
    with pytest.raises(ValueError, match="mode"):
        ner_metrics([["O"]], [["O"]], mode="lenient")
