"""The "bank" example: after pre-training, ELMo's contextual vectors put two uses of one sense of "bank"
closer than uses of the two senses (Peters et al. 2018, Table 4's nearest neighbours of "play").

The first test trains a small biLM for a minute on a generated two-domain corpus (finance, river) and
checks held-out sentences whose wording it never saw; it also checks that the untrained network (the same
architecture at its initialisation) does not separate them as well, so the result comes from training.
The second uses the model experiments/elmo_conll.py pre-trains on the books, when it is there."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch

from attnlab.models.elmo import ElmoBiLM, embed_sentences, get_preset
from attnlab.pretraining.elmo import ElmoRecipe, pretrain_elmo, split_words

# held out from the generated corpus (never written to it); "bank" in the middle, with the sense on both sides
FINANCE = [
    "the farmer borrowed from the bank for a loan .",
    "my aunt paid into the bank with her cash .",
]
RIVER = [
    "the farmer rested by the bank near the willows .",
    "my aunt waded along the bank under the reeds .",
]


def separation(model, finance, river, layers=(1, 2)):
    """mean cosine of "bank" within a sense minus across senses, on the mean of the LSTM layers."""
    sentences = [split_words(s) for s in finance + river]
    vectors = []
    for words, h in zip(sentences, embed_sentences(model, sentences)):
        v = h[list(layers)].mean(0)[words.index("bank")]
        vectors.append(v / v.norm())
    sims = torch.stack(vectors) @ torch.stack(vectors).T
    n = len(finance)
    same = [sims[i, j] for i in range(len(vectors)) for j in range(i + 1, len(vectors)) if (i < n) == (j < n)]
    cross = [sims[i, j] for i in range(n) for j in range(n, len(vectors))]
    return float(torch.stack(same).mean() - torch.stack(cross).mean()), float(torch.stack(cross).max()), sims


HELD_OUT = set(FINANCE + RIVER)


def generated_corpus(path: Path, documents: int = 60, seed: int = 0) -> None:
    """Documents about money or about rivers: "PERSON VERB PREP the bank TAIL ." and sentences without
    "bank" that use the same words."""
    rng = random.Random(seed)
    people = ["she", "he", "they", "the farmer", "my aunt", "the old man", "a child", "the clerk"]
    finance = {
        "verb": ["paid", "borrowed", "saved", "lent", "owed", "transferred", "invested", "counted"],
        "prep": ["into", "from", "at", "with"],
        "tail": ["for a loan", "with her cash", "for the mortgage", "with the cheque", "for interest",
                 "with his savings"],
        "thing": ["money", "the loan", "cash", "the cheque", "interest", "the mortgage", "coins", "the debt"],
    }  # fmt: skip
    river = {
        "verb": ["walked", "rested", "fished", "camped", "sat", "waded", "slept", "played"],
        "prep": ["along", "by", "on", "near"],
        "tail": ["near the willows", "under the reeds", "by the water", "in the mud", "near the ducks",
                 "under the trees"],
        "thing": ["the reeds", "the willows", "the water", "the fish", "the ducks", "the mud", "the stones"],
    }  # fmt: skip
    with open(path, "w", encoding="utf-8") as f:
        for d in range(documents):
            domain = finance if d % 2 == 0 else river
            for _ in range(40):
                person, verb = rng.choice(people), rng.choice(domain["verb"])
                if rng.random() < 0.6:
                    prep, tail = rng.choice(domain["prep"]), rng.choice(domain["tail"])
                    line = f"{person} {verb} {prep} the bank {tail} ."
                else:
                    line = f"{person} {verb} {rng.choice(domain['thing'])} {rng.choice(domain['tail'])} ."
                if line not in HELD_OUT:
                    f.write(line + "\n")
            f.write("\n")


@pytest.mark.slow
def test_bank_senses_separate_after_training(tmp_path):
    generated_corpus(tmp_path / "corpus.txt")
    torch.manual_seed(0)
    model = {"cell_size": 96, "projection_dim": 32, "dropout": 0.1}
    recipe = ElmoRecipe(preset="elmo-tiny", max_steps=400, batch_size=16, lr=3e-3, min_count=1, model=model)
    untrained = ElmoBiLM(dataclasses.replace(get_preset("elmo-tiny"), **model))  # seed 0, as training starts
    result = pretrain_elmo(recipe, [tmp_path / "corpus.txt"], "sentences", tmp_path / "run", progress=False,
                           log=lambda m: None)  # fmt: skip
    trained_sep, trained_cross, sims = separation(result.model, FINANCE, RIVER)
    untrained_sep, _, _ = separation(untrained, FINANCE, RIVER)
    assert trained_sep > 0.01, sims
    # measured: 0.039 trained, 0.0025 untrained (whose same-sense pairs are not all above its cross pairs)
    assert trained_sep > 5 * max(untrained_sep, 1e-3), (trained_sep, untrained_sep)
    # every same-sense pair is closer than the closest cross-sense pair
    n, m = len(FINANCE), len(FINANCE) + len(RIVER)
    same_min = min(float(sims[i, j]) for i in range(m) for j in range(i + 1, m) if (i < n) == (j < n))
    assert same_min > trained_cross, sims


@pytest.mark.slow
@pytest.mark.data
def test_bank_senses_with_the_books_model():
    from attnlab.io.families.elmo import load_elmo

    path = Path(__file__).resolve().parents[2] / "runs" / "elmo_conll" / "elmo" / "model"
    if not (path / "config.json").is_file():
        pytest.skip(f"{path}: run experiments/elmo_conll.py first")
    model, _ = load_elmo(path)
    finance = ["He went to the bank to borrow money .", "The bank lent him a thousand pounds ."]
    river = ["They sat on the bank of the river .", "The boat drifted towards the bank of the stream ."]
    sep, _, sims = separation(model, finance, river)
    assert sep > 0.0, sims
