"""Every bad input to every command ends in one clear error.

Each row of `CASES` writes a few small files into ``tmp_path``, runs the command in-process through
`attnlab.cli.main` and checks that it

- exits with a non-zero code (argparse's 2 included),
- names on standard error the file, line, field or option at fault (the row's expected fragments),
- prints no Python traceback (``--debug`` is what shows one), and
- writes nothing into the output directory it was given (``{tmp}/out`` does not appear).

Rows use ``{tmp}`` for the row's own directory and ``{s}`` for the shared fixtures built once per module:
``{s}/tok`` (a WordPiece tokenizer), ``{s}/pre`` (a pre-trained bert-tiny-shaped model), ``{s}/ft/best`` (a
model fine-tuned on mrpc; ``{s}/ft`` is its run directory), ``{s}/ckpt/checkpoints/step-000002`` (a
training checkpoint), ``{s}/bigtok`` (a tokenizer larger than the models' embedding), ``{s}/s2s/model``
(a tiny translation model), ``{s}/broken`` (the same with a truncated model.safetensors), ``{s}/sst2``
(a valid SST-2 directory).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.manifest import add_to_manifest

BAD_UTF8 = b"a good film\n\xff\xfe broken \xc3\x28 bytes\n"
FILLER = "the a film plot was is very quite story actor scene it good bad".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *FILLER]
EN = ["a dog runs .", "the cat sleeps .", "two men play .", "a woman sings ."]
DE = ["ein hund rennt .", "die katze schläft .", "zwei männer spielen .", "eine frau singt ."]


def _lines(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _sst2(rows: list[tuple[str, str]]) -> str:
    return _lines(["sentence\tlabel", *(f"{t}\t{y}" for t, y in rows)])


GOOD_SST2 = _sst2([("a good film", "1"), ("a bad film", "0")] * 4)


def _squad(answer: dict, context: str = "the actor was very good") -> str:
    qa = {"id": "q1", "question": "who was good ?", "answers": [answer]}
    return json.dumps(
        {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]}
    )


GOOD_SQUAD = _squad({"text": "the actor", "answer_start": 0})


def squad_files(answer: dict) -> dict[str, str]:
    return {"q/train.json": _squad(answer), "q/dev.json": GOOD_SQUAD}


DOCS = "\n\n".join(f"doc {i} has words .\nthe cat {i} runs ." for i in range(12)) + "\n"  # 12 documents
CONLL_GOOD = "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n"


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """The model, tokenizer and data directories the rows point at (built once, a few seconds)."""
    from attnlab.io import save
    from attnlab.models import ARCHITECTURES, get_preset
    from attnlab.tasks.finetune import save_model_dir
    from attnlab.tokenizers import bert_wordpiece
    from attnlab.translation.config import preset
    from attnlab.translation.data import special_ids, train_joint_bpe
    from attnlab.translation.model import build_model

    torch.manual_seed(0)
    s = tmp_path_factory.mktemp("shared")
    tok = bert_wordpiece({t: i for i, t in enumerate(VOCAB)})
    tok.save(s / "tok")
    config = get_preset("bert-tiny", vocab_size=len(VOCAB), max_position_embeddings=32)
    save_model_dir(ARCHITECTURES["EncoderForPreTraining"].from_config(config), tok, s / "pre")
    classifier = ARCHITECTURES["EncoderForSequenceClassification"].from_config(
        config, num_labels=2, labels=["0", "1"]
    )
    save_model_dir(classifier, tok, s / "ft" / "best")
    (s / "ft" / "results.json").write_text(json.dumps({"task": "mrpc"}), encoding="utf-8")
    step = s / "ckpt" / "checkpoints" / "step-000002"
    step.mkdir(parents=True)
    shutil.copy(s / "ft" / "best" / "model.safetensors", step / "model.safetensors")
    (step / "trainer_state.json").write_text("{}", encoding="utf-8")
    shutil.copytree(s / "ft" / "best", s / "ckpt" / "model")
    big = bert_wordpiece({t: i for i, t in enumerate([*VOCAB, *(f"extra{i}" for i in range(40))])})
    big.save(s / "bigtok")
    shutil.copytree(s / "ft" / "best", s / "mismatch")
    big.save(s / "mismatch")  # a model directory whose tokenizer.json outgrew its embedding
    add_to_manifest(s / "mismatch", ["tokenizer.json"])  # on purpose (verify --update): no damage to report

    bpe = train_joint_bpe(EN + DE, 300)
    ids = special_ids(bpe)
    s2s = preset(
        "transformer-tiny", num_layers=1, d_model=16, d_ff=32, num_heads=2, vocab_size=bpe.vocab_size,
        pad_token_id=ids["pad"], bos_token_id=ids["bos"], eos_token_id=ids["eos"],
    )  # fmt: skip
    save(build_model(s2s), s / "s2s" / "model", tokenizer=bpe)
    shutil.copytree(s / "s2s" / "model", s / "broken")
    weights = s / "broken" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    shutil.copytree(s / "broken", s / "broken-unlisted")  # the same, without a manifest to check it against
    (s / "broken-unlisted" / "manifest.json").unlink(missing_ok=True)

    (s / "sst2").mkdir()
    (s / "sst2" / "train.tsv").write_text(GOOD_SST2, encoding="utf-8")
    (s / "sst2" / "dev.tsv").write_text(GOOD_SST2, encoding="utf-8")
    return s


# fmt: off
TT = ["translate-train", "--output-dir", "{tmp}/out",
      "--src-train", "{tmp}/a.en", "--tgt-train", "{tmp}/a.de"]
TT_FILES = {"a.en": _lines(EN), "a.de": _lines(DE)}
TOK_TRAIN = ["tokenizer", "train", "--kind", "wordpiece", "--vocab-size", "100", "--out", "{tmp}/out",
             "--no-progress", "--processes", "1", "--files"]
PT = ["pretrain", "--output", "{tmp}/out", "--corpus", "{tmp}/c.txt"]


def task(name: str, data: str, model: str = "{s}/ft/best") -> list[str]:
    return ["finetune", "--task", name, "--data-dir", data, "--model", model, "--output-dir", "{tmp}/out"]


def with_data(argv: list[str], data: str) -> list[str]:
    return [*argv[:4], data, *argv[5:]]


def with_model(argv: list[str], model: str) -> list[str]:
    return [*argv[:6], model, *argv[7:]]


FT = task("sst2", "{s}/sst2")
EV = ["evaluate", *FT[1:]]
SQ = task("squad", "{tmp}/q")
CO = task("conll2003", "{tmp}/c")
G = with_data(FT, "{tmp}/g")

# (id, files written into {tmp}, argv, fragments that must appear on standard error)
CASES: list[tuple[str, dict[str, str | bytes], list[str], list[str]]] = [
    # --- numeric options: zero, negative, not a number (were taken as "unset" or crashed later)
    ("ft-batch-0", {}, [*FT, "--batch-size", "0"], ["--batch-size", "positive integer", "'0'"]),
    ("ft-batch-neg", {}, [*FT, "--batch-size", "-1"], ["--batch-size", "'-1'"]),
    ("ft-batch-text", {}, [*FT, "--batch-size", "many"], ["--batch-size", "'many'"]),
    ("ft-epochs-0", {}, [*FT, "--epochs", "0"], ["--epochs", "positive number"]),
    ("ft-lr-0", {}, [*FT, "--lr", "0"], ["--lr", "'0'"]),
    ("ft-lr-nan", {}, [*FT, "--lr", "nan"], ["--lr", "'nan'"]),
    ("ft-warmup-1.5", {}, [*FT, "--warmup", "1.5"], ["--warmup", "[0, 1)"]),
    ("ft-dropout-1", {}, [*FT, "--dropout", "1"], ["--dropout", "probability"]),
    ("ft-max-length-0", {}, [*FT, "--max-length", "0"], ["--max-length"]),
    ("ft-max-train-0", {}, [*FT, "--max-train-examples", "0"], ["--max-train-examples"]),
    ("ft-minutes-0", {}, [*FT, "--minutes", "0"], ["--minutes"]),
    ("ft-seed-neg", {}, [*FT, "--seeds", "-3"], ["--seeds", "'-3'"]),
    ("ft-weight-decay-neg", {}, [*FT, "--weight-decay", "-0.1"], ["--weight-decay"]),
    ("ev-batch-0", {}, [*EV, "--batch-size", "0"], ["--batch-size"]),
    ("predict-top-k-0", {}, ["predict", "classify", "{s}/ft/best", "--text", "x", "--top-k", "0"],
     ["--top-k"]),
    ("tt-max-steps-0", TT_FILES, [*TT, "--max-steps", "0"], ["--max-steps", "'0'"]),
    ("tt-warmup-neg", TT_FILES, [*TT, "--warmup", "-1"], ["--warmup", ">= 0"]),
    ("tt-vocab-0", TT_FILES, [*TT, "--vocab-size", "0"], ["--vocab-size"]),
    ("tt-max-tokens-0", TT_FILES, [*TT, "--max-tokens", "0"], ["--max-tokens"]),
    ("tt-smoothing-1", TT_FILES, [*TT, "--label-smoothing", "1.0"], ["--label-smoothing"]),
    ("tt-minutes-neg", TT_FILES, [*TT, "--minutes", "-5"], ["--minutes"]),
    ("tt-save-every-0", TT_FILES, [*TT, "--save-every", "0"], ["--save-every"]),
    ("tr-beam-0", {}, ["translate", "{s}/s2s/model", "--beam", "0"], ["--beam"]),
    ("tr-batch-0", {}, ["translate", "{s}/s2s/model", "--batch-size", "0"], ["--batch-size"]),
    ("avg-last-0", {}, ["translate-average", "{s}/s2s", "--last", "0", "--output-dir", "{tmp}/out"],
     ["--last"]),
    ("tok-vocab-0", {"c.txt": "a b\n"}, [*TOK_TRAIN, "{tmp}/c.txt", "--vocab-size", "0"], ["--vocab-size"]),
    ("tok-min-freq-neg", {"c.txt": "a\n"}, [*TOK_TRAIN, "{tmp}/c.txt", "--min-frequency", "-1"],
     ["--min-frequency"]),
    ("enc-batch-0", {}, ["tokenizer", "encode", "{s}/tok", "--text", "x", "--batch-size", "0"],
     ["--batch-size"]),
    ("demo-batch-0", {}, ["demo", "--batch-size", "0"], ["--batch-size"]),
    ("unknown-command", {}, ["pre-train"], ["invalid choice", "pre-train"]),
    # --- tokenizer training and encoding
    ("tok-missing-file", {}, [*TOK_TRAIN, "{tmp}/nope.txt"], ["{tmp}/nope.txt"]),
    ("tok-file-is-dir", {"d/x.txt": "a\n"}, [*TOK_TRAIN, "{tmp}/d"], ["{tmp}/d", "directory"]),
    ("tok-bad-utf8", {"c.txt": BAD_UTF8}, [*TOK_TRAIN, "{tmp}/c.txt"], ["{tmp}/c.txt:2", "UTF-8"]),
    ("tok-empty-corpus", {"c.txt": "\n\n"}, [*TOK_TRAIN, "{tmp}/c.txt"], ["{tmp}/c.txt"]),
    ("enc-missing-dir", {}, ["tokenizer", "encode", "{tmp}/nope", "--text", "x"], ["{tmp}/nope"]),
    ("enc-missing-file", {}, ["tokenizer", "encode", "{s}/tok", "--file", "{tmp}/no.txt"], ["{tmp}/no.txt"]),
    ("enc-bad-utf8", {"c.txt": BAD_UTF8}, ["tokenizer", "encode", "{s}/tok", "--file", "{tmp}/c.txt"],
     ["{tmp}/c.txt:2", "UTF-8"]),
    ("enc-bad-json", {"t/tokenizer.json": "{not json"}, ["tokenizer", "encode", "{tmp}/t", "--text", "x"],
     ["{tmp}/t", "tokenizer.json"]),
    ("enc-empty-vocab", {"t/vocab.txt": ""}, ["tokenizer", "encode", "{tmp}/t", "--text", "x"],
     ["vocab.txt"]),
    ("enc-dup-vocab", {"t/vocab.txt": "[PAD]\n[UNK]\na\na\n"},
     ["tokenizer", "encode", "{tmp}/t", "--text", "x"],
     ["vocab.txt", "'a'"]),
    # --- pre-training corpora and overrides
    ("pt-missing-corpus", {}, PT, ["{tmp}/c.txt"]),
    ("pt-missing-config", {"c.txt": "a b\n"}, [*PT, "--config", "{tmp}/x.yaml"], ["{tmp}/x.yaml"]),
    ("pt-bad-yaml", {"c.txt": "a\n", "x.yaml": "lr: [1,\n"}, [*PT, "--config", "{tmp}/x.yaml"],
     ["{tmp}/x.yaml"]),
    ("pt-yaml-list", {"c.txt": "a\n", "x.yaml": "- 1\n"}, [*PT, "--config", "{tmp}/x.yaml"],
     ["{tmp}/x.yaml"]),
    ("pt-set-no-value", {"c.txt": "a\n"}, [*PT, "--set", "lr"], ["--set", "KEY=VALUE"]),
    ("pt-set-bad-section", {"c.txt": "a\n"}, [*PT, "--set", "optim.lr=1"], ["'optim'"]),
    ("pt-unknown-field", {"c.txt": "a\n"}, [*PT, "--set", "learning_rate=1"], ["learning_rate"]),
    ("pt-set-not-a-number", {"c.txt": "a\n"}, [*PT, "--set", "lr=abc"], ["lr", "'abc'"]),
    ("pt-set-model-field", {"c.txt": DOCS}, [*PT, "--set", "model.num_layers=0"], ["num_layers", "0"]),
    ("pt-set-trainer-field", {"c.txt": DOCS}, [*PT, "--set", "trainer.log_every=-1"], ["log_every", "-1"]),
    ("pt-paper-with-steps", {"c.txt": "a\n"}, [*PT, "--paper", "--max-steps", "5"],
     ["--paper", "--max-steps"]),
    # --- GLUE
    ("glue-missing-dir", {}, with_data(FT, "{tmp}/nope"), ["{tmp}/nope"]),
    ("glue-no-train", {"g/dev.tsv": GOOD_SST2}, G, ["{tmp}/g", "train"]),
    ("glue-bad-header", {"g/train.tsv": "text\tlabel\ngood\t1\n", "g/dev.tsv": GOOD_SST2}, G,
     ["{tmp}/g/train.tsv", "sentence"]),
    ("glue-bad-label", {"g/train.tsv": _sst2([("good", "1"), ("bad", "7")]), "g/dev.tsv": GOOD_SST2}, G,
     ["{tmp}/g/train.tsv:3", "'7'"]),
    ("glue-short-row", {"g/train.tsv": "sentence\tlabel\ngood\n", "g/dev.tsv": GOOD_SST2}, G,
     ["{tmp}/g/train.tsv:2"]),
    ("glue-bad-utf8", {"g/train.tsv": b"sentence\tlabel\ngood \xff\t1\n", "g/dev.tsv": GOOD_SST2}, G,
     ["{tmp}/g/train.tsv:2", "UTF-8"]),
    ("stsb-bad-score", {"g/train.tsv": "sentence1\tsentence2\tscore\na\tb\thigh\n", "g/dev.tsv": ""},
     task("stsb", "{tmp}/g"), ["{tmp}/g/train.tsv:2", "'high'"]),
    ("glue-header-only", {"g/train.tsv": "sentence\tlabel\n", "g/dev.tsv": GOOD_SST2}, G,
     ["{tmp}/g/train.tsv", "no examples"]),
    ("glue-empty-file", {"g/train.tsv": "", "g/dev.tsv": GOOD_SST2}, G, ["{tmp}/g/train.tsv", "empty"]),
    ("ev-bad-dev", {"g/dev.tsv": _sst2([("good", "yes")])}, with_data(EV, "{tmp}/g"),
     ["{tmp}/g/dev.tsv:2", "'yes'"]),
    ("ev-no-split", {"g/dev.tsv": GOOD_SST2}, [*with_data(EV, "{tmp}/g"), "--split", "valid"], ["'valid'"]),
    # --- SQuAD
    ("squad-not-json", {"q/train.json": "{", "q/dev.json": GOOD_SQUAD}, SQ, ["{tmp}/q/train.json:1", "JSON"]),
    ("squad-no-data", {"q/train.json": "{}", "q/dev.json": GOOD_SQUAD}, SQ, ["{tmp}/q/train.json", "'data'"]),
    ("squad-offset", squad_files({"text": "the actor", "answer_start": 3}),
     SQ, ["{tmp}/q/train.json", "qas[0].answers[0]", "character 3"]),
    ("squad-empty-answer", squad_files({"text": "", "answer_start": 0}),
     SQ, ["{tmp}/q/train.json", "answers[0].text", "empty answer"]),
    ("squad-start-text", squad_files({"text": "the", "answer_start": "0"}),
     SQ, ["{tmp}/q/train.json", "answer_start"]),
    ("squad-bad-utf8", {"q/train.json": b'{"data": "\xff"}', "q/dev.json": GOOD_SQUAD}, SQ,
     ["{tmp}/q/train.json:1", "UTF-8"]),
    # --- CoNLL, SWAG, generic tables
    ("conll-bad-tag", {"c/train.txt": "EU NNP B-NP X-ORG\n", "c/valid.txt": CONLL_GOOD}, CO,
     ["{tmp}/c/train.txt:1", "X-ORG"]),
    ("conll-one-column", {"c/train.txt": "EU\n", "c/valid.txt": CONLL_GOOD}, CO, ["{tmp}/c/train.txt:1"]),
    ("conll-empty", {"c/train.txt": "\n\n", "c/valid.txt": CONLL_GOOD}, CO,
     ["{tmp}/c/train.txt", "no examples"]),
    ("squad-no-questions", {"q/train.json": '{"data": []}', "q/dev.json": GOOD_SQUAD}, SQ,
     ["{tmp}/q/train.json", "no examples"]),
    ("conll-bad-utf8", {"c/train.txt": b"EU NNP B-NP \xffB-ORG\n", "c/valid.txt": CONLL_GOOD}, CO,
     ["{tmp}/c/train.txt:1", "UTF-8"]),
    ("swag-bad-label", {"w/train.csv": "startphrase,sent1,sent2,ending0,ending1,ending2,ending3,label\n"
                                       "x,a,b,c,d,e,f,9\n", "w/val.csv": ""},
     task("swag", "{tmp}/w"), ["{tmp}/w/train.csv:2", "label"]),
    ("generic-bad-jsonl", {"j/train.jsonl": '{"sentence": "a", "label": 1}\n{oops\n', "j/dev.jsonl": ""},
     task("generic", "{tmp}/j"), ["{tmp}/j/train.jsonl:2"]),
    ("generic-no-label-column", {"j/train.csv": "sentence,y\na,1\n", "j/dev.csv": "sentence,y\na,1\n"},
     task("generic", "{tmp}/j"), ["{tmp}/j/train.csv", "'label'"]),
    # --- model directories
    ("ft-run-dir", {}, with_model(FT, "{s}/ft"), ["{s}/ft", "run directory", "{s}/ft/best"]),
    ("ft-checkpoint-dir", {}, with_model(FT, "{s}/ckpt/checkpoints/step-000002"),
     ["training checkpoint", "{s}/ckpt/model"]),
    ("ft-model-missing", {}, with_model(FT, "{tmp}/nope/model"), ["{tmp}/nope/model"]),
    ("ft-model-unknown", {}, with_model(FT, "bert-huge"), ["'bert-huge'", "preset"]),
    ("ft-preset-no-tok", {}, with_model(FT, "bert-tiny"), ["--tokenizer"]),
    ("ft-tokenizer-too-big", {}, [*FT, "--tokenizer", "{s}/bigtok"],
     ["{s}/bigtok/tokenizer.json", "{s}/ft/best/config.json", "vocab_size"]),
    ("ft-tokenizer-missing", {}, [*FT, "--tokenizer", "{tmp}/nope"], ["{tmp}/nope"]),
    ("ev-pretrained", {}, with_model(EV, "{s}/pre"), ["{s}/pre/config.json", "pre-trained", "sst2"]),
    ("ev-mismatch", {}, with_model(EV, "{s}/mismatch"), ["{s}/mismatch/tokenizer.json", "vocab_size"]),
    ("ev-model-missing", {}, with_model(EV, "{tmp}/nope"), ["{tmp}/nope"]),
    ("ev-run-dir", {}, with_model(EV, "{s}/ft"), ["{s}/ft/best"]),
    ("predict-missing-file", {}, ["predict", "classify", "{s}/ft/best", "--file", "{tmp}/no.txt"],
     ["{tmp}/no.txt"]),
    ("predict-bad-utf8", {"c.txt": BAD_UTF8}, ["predict", "classify", "{s}/ft/best", "--file", "{tmp}/c.txt"],
     ["{tmp}/c.txt:2", "UTF-8"]),
    ("predict-mismatch", {}, ["predict", "classify", "{s}/mismatch", "--text", "x"],
     ["{s}/mismatch/tokenizer.json"]),
    ("predict-run-dir", {}, ["predict", "classify", "{s}/ft", "--text", "x"], ["{s}/ft/best"]),
    ("fill-mask-missing", {}, ["fill-mask", "{tmp}/nope", "a [MASK] film"], ["{tmp}/nope"]),
    ("info-missing", {}, ["info", "{tmp}/nope/x"], ["nope"]),
    ("convert-missing", {}, ["convert", "{tmp}/nope", "{tmp}/out"], ["{tmp}/nope"]),
    # --- Multi30k / parallel corpora for translate-train
    ("tt-missing-src", {"a.de": _lines(DE)}, TT, ["{tmp}/a.en"]),
    ("tt-unequal", {"a.en": _lines(EN), "a.de": _lines(DE[:3])}, TT, ["{tmp}/a.en", "{tmp}/a.de", "4", "3"]),
    ("tt-all-empty", {"a.en": "\n\n\n", "a.de": "x\ny\nz\n"}, TT, ["{tmp}/a.en", "empty"]),
    ("tt-empty-files", {"a.en": "", "a.de": ""}, TT, ["{tmp}/a.en", "empty"]),
    ("tt-bad-utf8", {"a.en": BAD_UTF8, "a.de": _lines(DE[:2])}, TT, ["{tmp}/a.en:2", "UTF-8"]),
    ("tt-src-is-dir", {"a.en/x": "x", "a.de": _lines(DE)}, TT, ["{tmp}/a.en", "directory"]),
    ("tt-data-dir-missing", {}, ["translate-train", "--output-dir", "{tmp}/out", "--data-dir", "{tmp}/m30k"],
     ["{tmp}/m30k"]),
    ("tt-data-dir-empty", {"m30k/readme": "x"},
     ["translate-train", "--output-dir", "{tmp}/out", "--data-dir", "{tmp}/m30k"],
     ["{tmp}/m30k", "train.en"]),
    ("tt-one-valid-side", TT_FILES, [*TT, "--src-valid", "{tmp}/a.en"], ["--src-valid", "--tgt-valid"]),
    ("tt-valid-unequal", {**TT_FILES, "v.en": _lines(EN), "v.de": _lines(DE[:1])},
     [*TT, "--src-valid", "{tmp}/v.en", "--tgt-valid", "{tmp}/v.de"], ["{tmp}/v.en", "{tmp}/v.de"]),
    ("tt-bad-preset", TT_FILES, [*TT, "--preset", "transformer-huge"], ["transformer-huge"]),
    ("tt-heads-not-dividing", TT_FILES, [*TT, "--d-model", "30", "--heads", "4"], ["d_model", "30"]),
    # --- translate, bleu, translate-average
    ("tr-input-missing", {}, ["translate", "{s}/s2s/model", "--input", "{tmp}/no.en"], ["{tmp}/no.en"]),
    ("tr-input-bad-utf8", {"i.en": BAD_UTF8}, ["translate", "{s}/s2s/model", "--input", "{tmp}/i.en"],
     ["{tmp}/i.en:2", "UTF-8"]),
    ("tr-not-seq2seq", {}, ["translate", "{s}/ft/best"], ["{s}/ft/best", "translation"]),
    ("tr-run-dir", {}, ["translate", "{s}/s2s"], ["{s}/s2s/model"]),
    ("tr-model-missing", {}, ["translate", "{tmp}/nope"], ["{tmp}/nope"]),
    ("tr-damaged-weights", {"i.en": "a dog\n"}, ["translate", "{s}/broken", "--input", "{tmp}/i.en"],
     ["{s}/broken/model.safetensors"]),
    ("tr-damaged-unlisted", {"i.en": "x\n"}, ["translate", "{s}/broken-unlisted", "--input", "{tmp}/i.en"],
     ["{s}/broken-unlisted/model.safetensors"]),
    ("bleu-missing-hyp", {"r.de": "a\n"}, ["bleu", "{tmp}/no.de", "{tmp}/r.de"], ["{tmp}/no.de"]),
    ("bleu-missing-ref", {"h.de": "a\n"}, ["bleu", "{tmp}/h.de", "{tmp}/no.de"], ["{tmp}/no.de"]),
    ("bleu-unequal", {"h.de": "a\nb\n", "r.de": "a\n"}, ["bleu", "{tmp}/h.de", "{tmp}/r.de"],
     ["{tmp}/h.de", "{tmp}/r.de"]),
    ("bleu-bad-utf8", {"h.de": BAD_UTF8, "r.de": "a\nb\n"}, ["bleu", "{tmp}/h.de", "{tmp}/r.de"],
     ["{tmp}/h.de:2"]),
    ("avg-run-missing", {}, ["translate-average", "{tmp}/nope", "--output-dir", "{tmp}/out"], ["{tmp}/nope"]),
    ("avg-no-checkpoints", {}, ["translate-average", "{s}/s2s", "--output-dir", "{tmp}/out"],
     ["{s}/s2s", "checkpoints"]),
]
# fmt: on


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def test_the_table_is_large_and_its_ids_unique() -> None:
    ids = [row[0] for row in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 60


def _row(row):
    name, *values = row
    return pytest.param(*values, id=name)


@pytest.mark.parametrize(("files", "argv", "expected"), [_row(row) for row in CASES])
def test_bad_input_is_one_clear_error(files, argv, expected, shared, tmp_path, capsys) -> None:
    _write(tmp_path, files)
    fill = {"tmp": str(tmp_path), "s": str(shared)}
    before = sorted(p.relative_to(shared) for p in shared.rglob("*"))
    extra = ""
    try:
        code = main([a.format(**fill) for a in argv])
    except SystemExit as e:  # argparse errors exit with 2 after printing usage and the message
        # SystemExit("message") is printed by the interpreter on the way out, with exit code 1
        code, extra = (e.code, "") if isinstance(e.code, int) else (1, str(e.code))
    err = capsys.readouterr().err + extra
    assert code not in (0, None), f"exit code {code}; stderr: {err}"
    assert "Traceback" not in err
    for fragment in expected:
        assert fragment.format(**fill) in err, f"{fragment!r} not in: {err}"
    assert not (tmp_path / "out").exists(), f"{tmp_path / 'out'} was written"
    assert sorted(p.relative_to(shared) for p in shared.rglob("*")) == before  # nothing written beside


def test_pairs_all_longer_than_max_length_name_the_files(tmp_path) -> None:
    """Not in the table: translate-train learns its BPE before it can tell, inside the run directory."""
    from attnlab.translation.data import encode_pairs, read_parallel, train_joint_bpe

    (tmp_path / "a.en").write_text(_lines(EN), encoding="utf-8")
    (tmp_path / "a.de").write_text(_lines(DE), encoding="utf-8")
    data = read_parallel(tmp_path / "a.en", tmp_path / "a.de")
    with pytest.raises(ValueError, match=r"a\.en / .*a\.de: all 4 pairs .* max_length=2"):
        encode_pairs(train_joint_bpe(EN + DE, 300), data, max_length=2)


def test_evaluate_on_another_task_warns_naming_both(shared, capsys) -> None:
    """A model fine-tuned on mrpc (its run's results.json says so) scored on sst2: it runs, with a warning."""
    argv = [
        "evaluate",
        "--task",
        "sst2",
        "--data-dir",
        str(shared / "sst2"),
        "--model",
        str(shared / "ft" / "best"),
    ]
    assert main([*argv, "--json"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "mrpc" in err and "sst2" in err and str(shared / "ft" / "best") in err
