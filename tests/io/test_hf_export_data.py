"""On real data and real tokenizer files (``../shared/data``): a tiny model fine-tuned by attnlab's recipe
on SST-2 and CoNLL-2003 for a few steps, exported with `save_hf`, gives through ``transformers.pipeline``
the data set's label names (negative/positive, CoNLL's tags) and attnlab's predictions and scores."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from shared_data import DATA, require  # noqa: E402

from attnlab.io import load  # noqa: E402
from attnlab.io.hf_encoders import save_hf  # noqa: E402
from attnlab.models import EncoderConfig  # noqa: E402
from attnlab.tasks.finetune import FinetuneConfig, ModelSource, finetune_examples, get_task, load_split  # noqa: E402
from attnlab.tasks.pipelines import pipeline  # noqa: E402
from attnlab.tokenizers import load_tokenizer  # noqa: E402

pytestmark = [pytest.mark.data, pytest.mark.slow]  # ~9 s each: out of the default run


def _fine_tune_and_export(
    task: str, data_dir: Path, tokenizer_dir: Path, tmp_path: Path
) -> tuple[Path, Path]:
    require(data_dir, tokenizer_dir)
    torch.manual_seed(0)
    tok = load_tokenizer(tokenizer_dir)
    config = EncoderConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_layers=2, num_heads=4,
                           intermediate_size=37, max_position_embeddings=64)  # fmt: skip
    spec = get_task(task)
    train = load_split(spec, data_dir, "train" if task == "sst2" else "dev")[:64]
    dev = load_split(spec, data_dir, "dev")[:32]
    cfg = FinetuneConfig(output_dir=tmp_path / "run", epochs=1, learning_rates=(1e-3,), seeds=(0,),
                         batch_size=16, max_length=48, progress_bar=False)  # fmt: skip
    result = finetune_examples(spec, ModelSource(config=config, tokenizer=tok), train, dev, cfg)
    best = Path(result.best_dir)
    save_hf(load(best), tmp_path / "hf", tokenizer=tok)
    return best, tmp_path / "hf"


def _hf_pipeline(task: str, directory: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.pipeline(task, model=str(directory), device="cpu")


def test_sst2_export_predicts_negative_positive_like_attnlab(tmp_path):
    best, hf = _fine_tune_and_export(
        "sst2", DATA / "glue" / "SST-2", DATA / "tokenizers" / "bert-base-uncased", tmp_path
    )
    texts = [ex.text_a for ex in load_split(get_task("sst2"), DATA / "glue" / "SST-2", "dev")[:16]]
    mine = pipeline("text-classification", best)(texts)
    theirs = _hf_pipeline("text-classification", hf)(texts, top_k=None)
    for a, b in zip(mine, theirs):
        assert [x["label"] for x in a] == [x["label"] for x in b]
        assert {x["label"] for x in a} == {"negative", "positive"}
        assert all(abs(x["score"] - y["score"]) <= 1e-4 for x, y in zip(a, b))


def test_conll_export_predicts_conll_tags_like_attnlab(tmp_path):
    best, hf = _fine_tune_and_export(
        "conll2003", DATA / "conll2003", DATA / "tokenizers" / "bert-base-uncased", tmp_path
    )
    examples = load_split(get_task("conll2003"), DATA / "conll2003", "dev")[:8]
    texts = [" ".join(ex.words) for ex in examples]
    tags = {t for ex in load_split(get_task("conll2003"), DATA / "conll2003", "dev")[:64] for t in ex.tags}
    mine = pipeline("ner", best)(texts, aggregation="none")
    theirs = _hf_pipeline("token-classification", hf)(texts, ignore_labels=[], aggregation_strategy="none")
    for words, tokens in zip(mine, theirs):
        first = {t["start"]: t for t in tokens}
        for w in words:
            assert w["label"] in tags and first[w["start"]]["entity"] == w["label"]
            assert abs(float(first[w["start"]]["score"]) - w["score"]) <= 1e-4
