"""K-BERT's knowledge layer (attnlab.knowledge): golden sentence trees from the paper, the visible matrix as
the encoder's attention mask, graph and data loaders, and fine-tuning with --kg on tiny data."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.knowledge import EntityLookup, KnowledgeGraph, build_sentence_tree, load_spo, split_units
from attnlab.knowledge.datasets import load_kbert_classification, load_kbert_ner
from attnlab.knowledge.features import KnowledgeInjector
from attnlab.knowledge.graph import find_wordnet, load_graph, load_wordnet
from attnlab.knowledge.visible import visible_matrix
from attnlab.models.config import EncoderConfig
from attnlab.models.encoder import Encoder
from attnlab.tasks.examples import DataFormatError, TokenExample
from attnlab.tasks.features import FeatureReport
from attnlab.tokenizers.factories import bert_wordpiece

FIGURE = [("Tim Cook", "CEO", "Apple"), ("Beijing", "capital", "China"), ("Beijing", "is_a", "City")]
SENTENCE = "Tim Cook is currently visiting Beijing now"


def figure_tree(sentence: str = SENTENCE, max_length: int = 64, max_triples: int = 2, sep: str | None = None):
    lookup = EntityLookup(KnowledgeGraph.from_triples(FIGURE), max_triples=max_triples)
    units = sentence.split()
    matches = lookup.find(units)
    branches = [[b.split() for b in m.branches] for m in matches]
    return build_sentence_tree([[u] for u in units], matches, branches, max_length, cls="[CLS]", sep=sep)


def test_paper_figure_soft_and_hard_positions():
    # Liu et al. 2020, Figure 2 (its sentence has no "currently"; the soft positions shift by one after it)
    tree = figure_tree("Tim Cook is visiting Beijing now")
    assert tree.tokens == [
        "[CLS]", "Tim", "Cook", "CEO", "Apple", "is", "visiting", "Beijing", "capital", "China", "is_a",
        "City", "now",
    ]  # fmt: skip
    assert tree.hard_positions == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert tree.soft_positions == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 6, 7, 6]
    assert tree.injected == [
        False,
        False,
        False,
        True,
        True,
        False,
        False,
        False,
        True,
        True,
        True,
        True,
        False,
    ]


def test_paper_figure_visible_matrix():
    tree = figure_tree("Tim Cook is visiting Beijing now")
    # rows/columns: [CLS] Tim Cook CEO Apple is visiting Beijing capital China is_a City now
    expected = [
        "1 1 1 0 0 1 1 1 0 0 0 0 1",  # [CLS]: the sentence only
        "1 1 1 1 1 1 1 1 0 0 0 0 1",  # Tim (entity "Tim Cook"): the sentence and its branch CEO Apple
        "1 1 1 1 1 1 1 1 0 0 0 0 1",  # Cook
        "0 1 1 1 1 0 0 0 0 0 0 0 0",  # CEO: its entity and its own branch
        "0 1 1 1 1 0 0 0 0 0 0 0 0",  # Apple
        "1 1 1 0 0 1 1 1 0 0 0 0 1",  # is
        "1 1 1 0 0 1 1 1 0 0 0 0 1",  # visiting
        "1 1 1 0 0 1 1 1 1 1 1 1 1",  # Beijing: the sentence and both its branches
        "0 0 0 0 0 0 0 1 1 1 0 0 0",  # capital: Beijing and capital China, not is_a City
        "0 0 0 0 0 0 0 1 1 1 0 0 0",  # China (the paper: row 4 "Apple" cannot see column 9 "China")
        "0 0 0 0 0 0 0 1 0 0 1 1 0",  # is_a
        "0 0 0 0 0 0 0 1 0 0 1 1 0",  # City
        "1 1 1 0 0 1 1 1 0 0 0 0 1",  # now
    ]
    got = [" ".join("1" if v else "0" for v in row) for row in tree.visible_matrix()]
    assert got == expected


def test_issue_sentence_and_entity_with_two_triples():
    tree = figure_tree(SENTENCE, sep="[SEP]")
    assert tree.tokens == [
        "[CLS]", "Tim", "Cook", "CEO", "Apple", "is", "currently", "visiting", "Beijing", "capital", "China",
        "is_a", "City", "now", "[SEP]",
    ]  # fmt: skip
    assert tree.soft_positions == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 8, 7, 8, 7, 8]
    # Beijing (entity 2) has two branches, numbered 2 and 3; each sees Beijing and itself only
    assert tree.branch_ids == [0, 0, 0, 1, 1, 0, 0, 0, 0, 2, 2, 3, 3, 0, 0]
    assert tree.entity_ids == [0, 1, 1, 1, 1, 0, 0, 0, 2, 2, 2, 2, 2, 0, 0]
    vis = tree.visible_matrix()
    capital, is_a, beijing = 9, 11, 8
    assert vis[capital][beijing] and vis[is_a][beijing] and vis[beijing][capital] and vis[beijing][is_a]
    assert not vis[capital][is_a] and not vis[is_a][capital]
    assert not any(vis[i][capital] for i in (0, 1, 5, 6, 7, 13, 14))  # other sentence tokens never see it


def test_cap_on_triples_per_entity():
    tree = figure_tree(max_triples=1)
    assert "is_a" not in tree.tokens and "capital" in tree.tokens  # the first triple in the graph's order


def test_longest_match_and_no_overlap():
    kg = KnowledgeGraph.from_triples(
        [("Tim", "is_a", "Name"), ("Tim Cook", "CEO", "Apple"), ("Cook", "is_a", "Job")]
    )
    matches = EntityLookup(kg).find("Tim Cook and Cook".split())
    assert [(m.start, m.end, m.subject) for m in matches] == [(0, 2, "Tim Cook"), (3, 4, "Cook")]
    chinese = KnowledgeGraph.from_triples([("头痛", "类别", "症状"), ("头", "类别", "部位")])
    assert chinese.joiner == ""
    found = EntityLookup(chinese, with_predicate=False).find(split_units("患者头痛，头部"))
    assert [(m.start, m.end, m.branches) for m in found] == [(2, 4, ("症状",)), (5, 6, ("部位",))]
    assert EntityLookup(chinese).branches("头痛") == ("类别症状",)


def test_split_units():
    assert split_units("Tim Cook visits 北京, 2024!") == [
        "Tim",
        "Cook",
        "visits",
        "北",
        "京",
        ",",
        "2024",
        "!",
    ]


def test_overflow_drops_branches_first_and_says_so():
    # sentence 7 words + [CLS] = 8; the branches need 6 more; max_length 11 keeps CEO Apple, capital China
    tree = figure_tree(max_length=12)
    assert tree.dropped_branches == 1 and tree.cut_units == 0
    assert tree.tokens[-3:] == ["capital", "China", "now"] and "is_a" not in tree.tokens
    tree = figure_tree(max_length=8)
    assert tree.dropped_branches == 3 and tree.cut_units == 0 and len(tree) == 8
    assert tree.tokens == ["[CLS]", *SENTENCE.split()]
    tree = figure_tree(max_length=5)  # only then is the sentence cut
    assert tree.cut_units == 3 and tree.dropped_branches == 3 and len(tree) == 5


def test_entity_longer_than_max_length_is_an_error():
    kg = KnowledgeGraph.from_triples([("a b c d e", "is", "long")])
    lookup = EntityLookup(kg)
    units = "x a b c d e".split()
    matches = lookup.find(units)
    with pytest.raises(ValueError, match=r"entity 'a b c d e' is 5 tokens long, more than max_length 5"):
        build_sentence_tree([[u] for u in units], matches, [[["is", "long"]]], 5, cls="[CLS]", sep="[SEP]")


def test_batched_visible_matrix_matches_the_tree_and_masks_padding():
    a, b = figure_tree(sep="[SEP]"), figure_tree("Beijing now", sep="[SEP]")
    n = len(a)
    pad = n - len(b)
    branch = torch.tensor([a.branch_ids, b.branch_ids + [-1] * pad])
    entity = torch.tensor([a.entity_ids, b.entity_ids + [0] * pad])
    mask = torch.tensor([[1] * n, [1] * len(b) + [0] * pad])
    vis = visible_matrix(branch, entity, mask)
    assert vis.shape == (2, n, n)
    assert vis[0].tolist() == a.visible_matrix()
    assert vis[1, : len(b), : len(b)].tolist() == b.visible_matrix()
    assert not vis[1, :, len(b) :].any()  # nobody sees padding


def test_attention_to_invisible_tokens_is_exactly_zero_in_every_layer():
    torch.manual_seed(0)
    config = EncoderConfig(
        vocab_size=40,
        hidden_size=16,
        num_layers=3,
        num_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    encoder = Encoder(config).eval()
    tree = figure_tree(sep="[SEP]")
    ids = torch.randint(5, 40, (1, len(tree)))
    vis = visible_matrix(torch.tensor([tree.branch_ids]), torch.tensor([tree.entity_ids]))
    out = encoder(
        ids, attention_mask=vis, position_ids=torch.tensor([tree.soft_positions]), output_attentions=True
    )
    assert len(out.attentions) == 3
    for probs in out.attentions:  # (B, N, T, T)
        assert torch.all(probs[:, :, ~vis[0]] == 0)
        assert torch.all(probs[:, :, vis[0]] > 0)
    # the fast (SDPA) path gives the same hidden states as the explicit one
    fast = encoder(ids, attention_mask=vis, position_ids=torch.tensor([tree.soft_positions]))
    torch.testing.assert_close(fast.last_hidden_state, out.last_hidden_state, rtol=1e-5, atol=1e-5)
    # one layer: sentence tokens outside an entity do not depend on any branch token
    one = Encoder(EncoderConfig(**{**config.__dict__, "num_layers": 1})).eval()
    changed = ids.clone()
    injected = torch.tensor(tree.injected)
    changed[0, injected] = (changed[0, injected] + 1) % 40
    pos = torch.tensor([tree.soft_positions])
    h0 = one(ids, attention_mask=vis, position_ids=pos).last_hidden_state
    h1 = one(changed, attention_mask=vis, position_ids=pos).last_hidden_state
    outside = torch.tensor([b == 0 and e == 0 for b, e in zip(tree.branch_ids, tree.entity_ids)])
    torch.testing.assert_close(h0[0, outside], h1[0, outside], rtol=0, atol=0)
    assert not torch.allclose(h0[0, ~outside], h1[0, ~outside])


def test_encoder_rejects_a_badly_shaped_3d_mask():
    encoder = Encoder(
        EncoderConfig(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16)
    )
    with pytest.raises(ValueError, match=r"3-D mask must be \(B, T, T\)"):
        encoder(torch.zeros(1, 4, dtype=torch.long), attention_mask=torch.ones(1, 4, 5, dtype=torch.bool))


# -- loaders --------------------------------------------------------------------------------------------


def test_spo_loader_and_malformed_line(tmp_path):
    path = tmp_path / "g.spo"
    path.write_text("头痛\t类别\t症状\n\n头痛\t类别\t症状\n发热\t类别\t症状\n", encoding="utf-8")
    kg = load_spo(path)
    assert (
        kg.get("头痛") == [("类别", "症状")] and len(kg) == 2 and kg.duplicates == 1 and kg.blank_lines == 1
    )
    bad = tmp_path / "bad.spo"
    bad.write_text("头痛\t类别\t症状\n发热\t类别\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.spo:2: expected 3 non-empty tab-separated fields"):
        load_spo(bad)
    with pytest.raises(FileNotFoundError, match="no such knowledge graph file"):
        load_graph(tmp_path / "missing.spo")


WORDNET_NOUN = (
    "  1 This software and database is being provided to you, the LICENSEE, by Princeton University\n"
    "00000001 05 n 02 dog 0 domestic_dog 0 001 @ 00000002 n 0000 | a member of the genus Canis\n"
    "00000002 05 n 01 canine 0 001 ~ 00000001 n 0000 | one of the Canidae\n"
)


def test_wordnet_loader_on_its_file_format(tmp_path):
    (tmp_path / "data.noun").write_text(WORDNET_NOUN, encoding="utf-8")
    for name in ("data.verb", "data.adj", "data.adv"):
        (tmp_path / name).write_text("", encoding="utf-8")
    kg = load_wordnet(tmp_path)
    assert kg.get("dog") == [("synonym", "domestic dog"), ("hypernym", "canine")]
    assert kg.get("domestic dog") == [("synonym", "dog"), ("hypernym", "canine")]
    assert kg.joiner == " " and kg.lowercase
    with pytest.raises(FileNotFoundError, match="WordNet 3.0 not found"):
        find_wordnet(tmp_path / "nowhere")


def _has_wordnet() -> bool:
    try:
        find_wordnet()
    except FileNotFoundError:
        return False
    return True


@pytest.mark.slow  # reads all of WordNet (about 6 s)
@pytest.mark.skipif(not _has_wordnet(), reason="WordNet 3.0 not installed (make wordnet)")
def test_real_wordnet_hypernyms_and_synonyms():
    kg = load_wordnet()
    assert ("hypernym", "canine") in kg.get("dog") and ("synonym", "peking") in kg.get("beijing")
    found = EntityLookup(kg).find(split_units("Tim Cook visited Beijing"))
    assert "beijing" in [m.subject for m in found]


def test_kbert_dataset_loaders(tmp_path):
    ner = tmp_path / "train.tsv"
    ner.write_text("text_a\tlabel\n头 痛 三 天\tB-Symptom I-Symptom O O\n", encoding="utf-8")
    (ex,) = load_kbert_ner(ner)
    assert ex.words == ("头", "痛", "三", "天") and ex.tags[:2] == ("B-Symptom", "I-Symptom")
    ner.write_text("text_a\tlabel\n头 痛 三 天\tB-Symptom O\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"train\.tsv:2: 4 characters but 2 tags"):
        load_kbert_ner(ner)
    cls = tmp_path / "dev.tsv"
    cls.write_text("label\ttext_a\n1\t很好\n0\t不好\textra\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"dev\.tsv:3: expected 2 tab-separated fields"):
        load_kbert_classification(cls)


# -- features and fine-tuning ---------------------------------------------------------------------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"患者头痛三天发热类别症状部位好不很", "tim", "cook"]


def tokenizer():
    return bert_wordpiece({t: i for i, t in enumerate(VOCAB)})


def test_ner_features_label_only_sentence_words():
    kg = KnowledgeGraph.from_triples([("头痛", "类别", "症状"), ("发热", "类别", "症状")])
    inj = KnowledgeInjector(EntityLookup(kg, with_predicate=False))
    ex = TokenExample(tuple("患者头痛"), ("O", "O", "B-S", "I-S"), guid="x")
    (f,) = inj.token_features(tokenizer(), [ex], {"O": 0, "B-S": 1, "I-S": 2}, 32, True, FeatureReport("t"))
    tokens = [VOCAB[i] for i in f.inputs["input_ids"]]
    assert tokens == ["[CLS]", "患", "者", "头", "痛", "症", "状", "[SEP]"]
    assert f.inputs["position_ids"] == [0, 1, 2, 3, 4, 5, 6, 5]
    assert f.inputs["labels"] == [-100, 0, 0, 1, 2, -100, -100, -100]
    assert f.word_ids == [None, 0, 1, 2, 3, None, None, None]
    batch = inj.collate([f, f], 0)
    assert batch["attention_mask"].shape == (2, 8, 8) and "branch_ids" not in batch
    no_vm = KnowledgeInjector(EntityLookup(kg, with_predicate=False), visible_matrix=False)
    (g,) = no_vm.token_features(tokenizer(), [ex], {"O": 0, "B-S": 1, "I-S": 2}, 32, True, FeatureReport("t"))
    assert g.inputs["input_ids"] == f.inputs["input_ids"]
    assert no_vm.collate([g], 0)["attention_mask"].shape == (
        1,
        8,
    )


def _write_ner(directory, rows):
    directory.mkdir()
    for split in ("train", "dev"):
        lines = ["text_a\tlabel"] + [f"{' '.join(w)}\t{' '.join(t)}" for w, t in rows]
        (directory / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_cli_finetune_with_kg(tmp_path, capsys):
    from attnlab.cli import main

    rows = [(list("患者头痛三天"), ["O", "O", "B-Symptom", "I-Symptom", "O", "O"]),
            (list("发热三天"), ["B-Symptom", "I-Symptom", "O", "O"])] * 4  # fmt: skip
    _write_ner(tmp_path / "ner", rows)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (tmp_path / "kg.spo").write_text("头痛\t类别\t症状\n发热\t类别\t症状\n", encoding="utf-8")
    out = tmp_path / "run"
    code = main([
        "finetune", "--task", "kbert_ner", "--data-dir", str(tmp_path / "ner"), "--model", "bert-tiny",
        "--tokenizer", str(tmp_path / "tok"), "--output-dir", str(out), "--epochs", "1", "--batch-size", "4",
        "--kg", str(tmp_path / "kg.spo"), "--no-kg-predicate", "--no-progress", "--max-length", "32",
    ])  # fmt: skip
    assert code == 0
    result = json.loads((out / "results.json").read_text())
    assert result["task"] == "kbert_ner" and 0.0 <= result["median"] <= 100.0
    capsys.readouterr()
    code = main([
        "evaluate", "--task", "kbert_ner", "--data-dir", str(tmp_path / "ner"), "--model", str(out / "best"),
        "--kg", str(tmp_path / "kg.spo"), "--no-kg-predicate", "--json", "--max-length", "32",
    ])  # fmt: skip
    assert code == 0
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scored["f1"] == pytest.approx(result["median"])  # the same features as the run's dev evaluation
    (tmp_path / "bad.spo").write_text("头痛\t类别\n", encoding="utf-8")
    code = main([
        "finetune", "--task", "kbert_ner", "--data-dir", str(tmp_path / "ner"), "--model", "bert-tiny",
        "--tokenizer", str(tmp_path / "tok"), "--output-dir", str(tmp_path / "run2"), "--kg",
        str(tmp_path / "bad.spo"), "--no-progress",
    ])  # fmt: skip
    assert code == 2
    assert "bad.spo:1: expected 3 non-empty tab-separated fields" in capsys.readouterr().err
