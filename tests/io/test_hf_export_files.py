"""What travels with a HF export besides the weights: the tokenizer (files and a ``tokenizer_config.json``
whose class makes ``AutoTokenizer`` rebuild the same pipeline), the data set's label names and a model card;
end to end through ``attnlab finetune`` and ``attnlab convert --to hf``."""

from __future__ import annotations

import json
import random
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

transformers = pytest.importorskip("transformers")

from attnlab.cli import main  # noqa: E402
from attnlab.io.hf_encoders import save_hf  # noqa: E402
from attnlab.io.hf_tokenizer import hf_tokenizer_config  # noqa: E402
from attnlab.io.model_card import card_text, finetune_record  # noqa: E402
from attnlab.models import EncoderConfig, EncoderForSequenceClassification  # noqa: E402
from attnlab.tasks.finetune import data_labels, get_task, model_labels  # noqa: E402
from attnlab.tokenizers import train_tokenizer  # noqa: E402

CORPUS = [
    "The Quick brown fox jumps over the lazy dog.",
    "Hello World, héllo again! Naïve café in Zürich.",
    "A film with a good plot and a bad actor; it's “quite” nice.",
] * 20
SAMPLES = ["The Quick café, Zürich!", "naïve FOX jumps: over 3 dogs", "  spaced   out  "]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _auto_tokenizer(directory: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoTokenizer.from_pretrained(str(directory))


TOKENIZERS = [
    ("wordpiece", True, "BertTokenizerFast"),
    ("wordpiece", False, "BertTokenizerFast"),
    ("byte_level_bpe", None, "RobertaTokenizerFast"),
    ("unigram", True, "AlbertTokenizerFast"),
    ("unigram", False, "AlbertTokenizerFast"),
    ("bpe", True, "PreTrainedTokenizerFast"),  # Sennrich BPE: no family class rebuilds it
]


@pytest.mark.parametrize("kind,lowercase,expected", TOKENIZERS)
def test_auto_tokenizer_rebuilds_the_exported_tokenizer(kind, lowercase, expected, tmp_path):
    """The declared class is the family's where it rebuilds the pipeline exactly (an ALBERT Unigram
    tokenizer is AlbertTokenizerFast, not BertTokenizerFast), and AutoTokenizer gives attnlab's ids,
    type ids and offsets, pairs included."""
    size = 320 if kind == "byte_level_bpe" else 150
    tok = train_tokenizer(kind, iter(CORPUS), size, lowercase=lowercase, show_progress=False)
    config = EncoderConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_layers=1, num_heads=4,
                           intermediate_size=37, max_position_embeddings=64)  # fmt: skip
    save_hf(EncoderForSequenceClassification.from_config(config, 2), tmp_path, family="bert", tokenizer=tok)
    saved = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == expected
    assert saved["model_max_length"] == 64
    hf = _auto_tokenizer(tmp_path)
    assert len(hf) == tok.get_vocab_size()  # never an empty vocabulary
    for a, b in [(s, None) for s in SAMPLES] + [(SAMPLES[0], SAMPLES[1])]:
        ours = tok.encode(a, b)
        theirs = hf(a, b, return_offsets_mapping=True)
        assert theirs["input_ids"] == ours.ids, (hf.convert_ids_to_tokens(theirs["input_ids"]), ours.tokens)
        assert [tuple(o) for o in theirs["offset_mapping"]] == [tuple(o) for o in ours.offsets]
        assert theirs["token_type_ids"] == ours.type_ids


def test_wordpiece_class_follows_the_family():
    tok = train_tokenizer("wordpiece", iter(CORPUS), 150, show_progress=False)
    assert hf_tokenizer_config(tok, "electra")["tokenizer_class"] == "ElectraTokenizerFast"
    assert hf_tokenizer_config(tok, "distilbert")["tokenizer_class"] == "DistilBertTokenizerFast"
    assert hf_tokenizer_config(tok, "bert")["tokenizer_class"] == "BertTokenizerFast"


def test_glue_tasks_store_the_data_sets_label_names():
    assert model_labels(get_task("sst2"), ["0", "1"]) == ["negative", "positive"]
    assert model_labels(get_task("cola"), ["0", "1"]) == ["unacceptable", "acceptable"]
    assert model_labels(get_task("mrpc"), ["0", "1"]) == ["not_equivalent", "equivalent"]
    assert model_labels(get_task("mnli"), ["contradiction", "entailment", "neutral"]) == [
        "contradiction",
        "entailment",
        "neutral",
    ]
    assert model_labels(get_task("conll2003"), ["O", "B-PER"]) == ["O", "B-PER"]
    # and back to the files' codes, for scoring a model on the data set (HF checkpoints: NEGATIVE/POSITIVE)
    assert data_labels(get_task("sst2"), ["negative", "positive"]) == ["0", "1"]
    assert data_labels(get_task("sst2"), ["NEGATIVE", "POSITIVE"]) == ["0", "1"]
    assert data_labels(get_task("sst2"), ["positive", "negative"]) == ["positive", "negative"]
    assert data_labels(get_task("mnli"), ["contradiction", "entailment", "neutral"])[0] == "contradiction"


def test_model_card_front_matter_is_yaml_with_the_measured_metrics():
    metrics = {"eval_accuracy": 0.875, "eval_loss": 0.3, "step": 12, "eval_f1": float("nan")}
    record = finetune_record(
        "sst2",
        "runs/bert: mini",
        metrics,
        learning_rate=3e-5,
        command='attnlab finetune --task sst2 --note "a: b"',
    )
    hf_config = {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
                 "id2label": {"0": "negative", "1": "positive"}}  # fmt: skip
    text = card_text(hf_config, record)
    assert text.startswith("---\n")
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["pipeline_tag"] == "text-classification"
    assert meta["base_model"] == "runs/bert: mini"
    assert meta["datasets"] == ["nyu-mll/glue"]
    assert meta["metrics"] == ["accuracy", "loss"]  # NaN and the step are not metrics
    result = meta["model-index"][0]["results"][0]
    assert result["dataset"]["config"] == "sst2"
    assert {m["type"]: m["value"] for m in result["metrics"]} == {"accuracy": 0.875, "loss": 0.3}
    assert 'attnlab finetune --task sst2 --note "a: b"' in text
    assert "`negative`" in text


def _sst2_files(directory: Path) -> None:
    rng = random.Random(0)
    directory.mkdir()
    for split, n in (("train", 48), ("dev", 16)):
        lines = ["sentence\tlabel"]
        for _ in range(n):
            y = rng.randint(0, 1)
            words = [rng.choice(["a", "film", "plot", "the", "actor"]) for _ in range(4)]
            words.insert(rng.randint(0, 4), "good" if y else "bad")
            lines.append(f"{' '.join(words)}\t{y}")
        (directory / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_finetune_then_convert_exports_labels_tokenizer_and_card(tmp_path, capsys, monkeypatch):
    data = tmp_path / "SST-2"
    _sst2_files(data)
    tok = train_tokenizer("wordpiece", iter(["a film plot the actor good bad"] * 5), 40, show_progress=False)
    tok.save(tmp_path / "tok")
    run = tmp_path / "run"
    argv = ["finetune", "--task", "sst2", "--data-dir", str(data), "--model", "bert-tiny", "--tokenizer",
            str(tmp_path / "tok"), "--output-dir", str(run), "--epochs", "1", "--batch-size", "16",
            "--max-length", "16"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["/venv/bin/attnlab", *argv])  # the process `attnlab finetune ...`
    assert main(argv) == 0
    best = run / "best"
    saved = json.loads((best / "config.json").read_text())
    assert saved["options"]["labels"] == ["negative", "positive"]  # was ["0", "1"]
    # evaluation maps the names back to the files' 0/1
    assert main(["evaluate", "--task", "sst2", "--data-dir", str(data), "--model", str(best), "--json"]) == 0
    assert 0.0 <= json.loads(capsys.readouterr().out.splitlines()[-1])["accuracy"] <= 100.0  # percent

    assert main(["convert", str(best), str(tmp_path / "hf"), "--to", "hf"]) == 0
    hf = tmp_path / "hf"
    hf_config = json.loads((hf / "config.json").read_text())
    assert hf_config["architectures"] == ["BertForSequenceClassification"]
    assert hf_config["id2label"] == {"0": "negative", "1": "positive"}
    assert json.loads((hf / "tokenizer_config.json").read_text())["tokenizer_class"] == "BertTokenizerFast"
    assert (hf / "vocab.txt").is_file() and (hf / "tokenizer.json").is_file()
    meta = yaml.safe_load((hf / "README.md").read_text().split("---\n")[1])
    results = json.loads((run / "results.json").read_text())
    best_run = max(results["runs"], key=lambda r: r["best"]["accuracy"])
    value = meta["model-index"][0]["results"][0]["metrics"]
    assert {m["type"]: m["value"] for m in value}["accuracy"] == pytest.approx(best_run["best"]["accuracy"])
    assert "base_model" not in meta and meta["datasets"] == ["nyu-mll/glue"]  # a preset's random weights
    assert "from bert-tiny (random init)" in (hf / "README.md").read_text()
    assert "attnlab finetune --task sst2 --data-dir" in (hf / "README.md").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = transformers.pipeline("text-classification", model=str(hf), device="cpu")
    assert pipe("a good film")[0]["label"] in ("negative", "positive")
    # a run from before training_run.json: the card still reports the run's dev metrics (results.json)
    (best / "training_run.json").unlink()
    assert main(["convert", str(best), str(tmp_path / "hf2"), "--to", "hf"]) == 0
    meta2 = yaml.safe_load((tmp_path / "hf2" / "README.md").read_text().split("---\n")[1])
    assert meta2["model-index"][0]["results"][0]["metrics"] == value


def test_convert_refuses_an_inexact_head_in_one_line(tmp_path, capsys):
    config = EncoderConfig(vocab_size=150, hidden_size=32, num_layers=1, num_heads=4, intermediate_size=37,
                           embedding_size=16, max_position_embeddings=64)  # fmt: skip
    tok = train_tokenizer("wordpiece", iter(CORPUS), 150, show_progress=False)
    model = EncoderForSequenceClassification.from_config(config, 2)
    from attnlab.tasks.finetune import save_model_dir

    save_model_dir(model, tok, tmp_path / "m")
    assert main(["convert", str(tmp_path / "m"), str(tmp_path / "hf"), "--family", "electra"]) == 1
    err = capsys.readouterr().err
    assert "gelu" in err and "no exact attnlab counterpart" in err and "Traceback" not in err
    assert "exports exactly as: albert (--family albert)" in err


def test_convert_warns_when_the_source_has_no_tokenizer(tmp_path, capsys):
    from attnlab.io import save

    config = EncoderConfig(vocab_size=50, hidden_size=32, num_layers=1, num_heads=4, intermediate_size=37,
                           max_position_embeddings=64)  # fmt: skip
    save(EncoderForSequenceClassification.from_config(config, 2), tmp_path / "m")
    assert main(["convert", str(tmp_path / "m"), str(tmp_path / "hf")]) == 0
    assert "no tokenizer files" in capsys.readouterr().err
    assert (tmp_path / "hf" / "README.md").is_file() and not (tmp_path / "hf" / "tokenizer.json").exists()


def test_convert_reads_a_hf_task_export_back_with_its_head_and_tokenizer(tmp_path, capsys):
    from attnlab.io import load as load_model
    from attnlab.tokenizers import load_tokenizer

    tok = train_tokenizer("byte_level_bpe", iter(CORPUS), 320, show_progress=False)
    config = EncoderConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_layers=1, num_heads=4,
                           intermediate_size=37, max_position_embeddings=66, type_vocab_size=1,
                           pad_token_id=1, position_offset=2, layer_norm_eps=1e-5)  # fmt: skip
    torch.manual_seed(0)
    model = EncoderForSequenceClassification.from_config(
        config, 3, ["a", "b", "c"], classifier_dropout=0.2
    ).eval()
    save_hf(model, tmp_path / "hf", tokenizer=tok)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [
        "RobertaForSequenceClassification"
    ]
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "back")]) == 0
    assert "RobertaForSequenceClassification" not in capsys.readouterr().err
    back = load_model(tmp_path / "back")
    assert back.options["labels"] == ["a", "b", "c"] and back.options["classifier_dropout"] == 0.2
    ids = torch.tensor([load_tokenizer(tmp_path / "back").encode(SAMPLES[0]).ids])
    with torch.no_grad():
        torch.testing.assert_close(back(ids).logits, model(ids).logits, atol=1e-6, rtol=0)
