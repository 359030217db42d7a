"""Option values beyond what the loaded model (or the integer type they feed) can use are refused up front,
with the valid range: lengths beyond the model's positions, more candidates than its vocabulary holds,
seeds and counts that overflow 64 bits."""

from __future__ import annotations

import pytest
from serving_models import make

from attnlab.cli import main
from attnlab.generation import GenerationConfig
from attnlab.train.checkpoint import set_seed

HUGE = "99999999999999999999999"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    return {kind: make(kind, root) for kind in ("mlm", "cls", "gpt")}


def _error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["predict", "classify", "{cls}", "--text", "paris", "--max-length", "100000"],
         "max_length 100000: this model reads at most 32 tokens (its positions); choose 1 to 32"),
        (["predict", "fill-mask", "{mlm}", "--text", "a [MASK]", "--max-length", "33"], "choose 1 to 32"),
        (["predict", "fill-mask", "{mlm}", "--text", "a [MASK]", "--top-k", "27"],
         "top_k 27: the model has 26 tokens besides its special ones"),
        (["fill-mask", "{mlm}", "a [MASK]", "--top-k", "100000"], "--top-k 100000: the model has 26 tokens"),
        (["generate", "{gpt}", "--prompt", "paris", "--sample", "--top-k", "100000"],
         "top_k 100000: the model has 31 tokens in its vocabulary; choose 1 to 31"),
        (["generate", "{gpt}", "--prompt", "paris", "--beams", HUGE], "num_beams"),
        (["generate", "{gpt}", "--prompt", "paris", "--sample", "--seed", HUGE],
         "choose 0 to 18446744073709551615"),
        (["generate", "{gpt}", "--prompt", "paris", "--max-new-tokens", HUGE],
         "choose 1 to 9223372036854775807"),
    ],
)  # fmt: skip
def test_values_beyond_the_model_are_refused_with_the_range(dirs, capsys, argv, words) -> None:
    argv = [a.format(**{k: str(v) for k, v in dirs.items()}) for a in argv]
    err = _error(capsys, argv)
    assert words in err, err
    assert "paris" not in err.splitlines()[0].split("error:")[0]  # nothing was printed before the error


def test_values_at_the_limit_are_taken(dirs, capsys) -> None:
    assert main(["predict", "fill-mask", str(dirs["mlm"]), "--text", "a [MASK]", "--top-k", "26"]) == 0
    assert main(["predict", "classify", str(dirs["cls"]), "--text", "paris", "--max-length", "32"]) == 0
    capsys.readouterr()


def test_finetune_refuses_a_length_beyond_the_model_before_writing(dirs, tmp_path, capsys) -> None:
    data = tmp_path / "data"
    data.mkdir()
    rows = "".join(f"paris is a {w},{int(w == 'city')}\n" for w in ["city", "river"] * 4)
    for split in ("train", "dev"):
        (data / f"{split}.csv").write_text("sentence,label\n" + rows, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["finetune", "--task", "generic", "--data-dir", str(data), "--model", str(dirs["cls"]),
            "--output-dir", str(out), "--max-length", "100000", "--no-progress"]  # fmt: skip
    err = _error(capsys, argv)
    assert "--max-length 100000: the model reads at most 32 tokens (its positions); choose 1 to 32" in err
    assert not out.exists()


def test_the_server_answers_422_naming_the_field_and_range(dirs) -> None:
    pytest.importorskip("fastapi")
    from attnlab.serving import schemas
    from attnlab.serving.service import RequestError, load_service

    mlm = load_service(dirs["mlm"])
    with pytest.raises(RequestError, match=r"'top_k' 50: the model has 26 tokens .*choose 1 to 26") as e:
        mlm.prepare("fill-mask", schemas.FillMaskRequest(text="a [MASK]", top_k=50))
    assert e.value.field == "top_k" and e.value.status == 422
    gpt = load_service(dirs["gpt"])
    with pytest.raises(RequestError, match=r"'top_k' 1000: the model has 31 tokens; choose 1 to 31"):
        gpt.prepare("generate", schemas.GenerateRequest(text="paris", do_sample=True, top_k=1000))


def test_seeds_and_counts_that_overflow_64_bits() -> None:
    with pytest.raises(ValueError, match="seed 18446744073709551616: torch takes an unsigned 64-bit seed"):
        set_seed(2**64)
    set_seed(2**64 - 1)
    with pytest.raises(ValueError, match="seed -1: .*choose 0 to"):
        GenerationConfig(seed=-1)
    with pytest.raises(ValueError, match="max_new_tokens 9223372036854775808: token counts are 64-bit"):
        GenerationConfig(max_new_tokens=2**63)
