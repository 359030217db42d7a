"""What `attnlab` with no arguments lists, and the example that ends each command's ``--help``.

The commands register themselves (`attnlab.cli` discovers their modules); this table only groups them by
what a user wants to do and gives each one runnable example. A command missing here is listed under
"other" and its help ends without an example; `tests/cli/test_cli_help.py` fails on either.
"""

from __future__ import annotations

GROUPS: dict[str, tuple[str, ...]] = {
    "train": (
        "pretrain",
        "finetune",
        "distill",
        "translate-train",
        "translate-average",
        "tokenizer",
        "ablate",
    ),
    "use": ("fill-mask", "predict", "generate", "translate", "embed", "evaluate", "perplexity", "bleu"),
    "serve": ("serve",),
    "convert": ("convert", "export"),
    "inspect": ("info", "attention", "verify", "demo"),
}

EXAMPLES: dict[str, str] = {
    "pretrain": "attnlab pretrain --recipe roberta --corpus books/ --format text --output runs/rb",
    "finetune": "attnlab finetune --task sst2 --data-dir glue/SST-2 --model runs/rb/model --output-dir ft",
    "distill": "attnlab distill --teacher runs/rb/model --corpus books/ --format text --output runs/distil",
    "translate-train": "attnlab translate-train --data-dir m30k --src-lang en --tgt-lang de --output-dir t",
    "translate-average": "attnlab translate-average runs/ende --last 5 --output runs/ende/averaged",
    "tokenizer": "attnlab tokenizer train --kind wordpiece --vocab-size 30000 --files corpus.txt --out tok/",
    "tokenizer train": "attnlab tokenizer train --kind wordpiece --vocab-size 8000 --files a.txt --out tok/",
    "tokenizer encode": 'attnlab tokenizer encode tok/ --text "Hello, world!" --json',
    "fill-mask": 'attnlab fill-mask runs/rb/model "The capital of France is <mask>."',
    "predict": 'attnlab predict classify runs/sst2/best --text "a gripping film"',
    "generate": 'attnlab generate runs/gpt/model --prompt "ROMEO:" --sample --top-k 40 --max-new-tokens 100',
    "translate": "attnlab translate runs/ende/model --input test.en --beam 4",
    "embed": 'attnlab embed --model runs/elmo/model --text "He sat on the bank of the river ."',
    "evaluate": "attnlab evaluate --task sst2 --data-dir glue/SST-2 --model runs/sst2/best",
    "perplexity": "attnlab perplexity runs/gpt/model --file valid.txt --stride 32",
    "bleu": "attnlab bleu hyp.de ref.de",
    "serve": "attnlab serve runs/sst2/best --port 8000",
    "convert": "attnlab convert runs/sst2/best runs/sst2-hf --to hf",
    "export": "attnlab export runs/sst2/best --onnx runs/sst2-onnx --int8",
    "info": "attnlab info bert-base-uncased",
    "attention": 'attnlab attention runs/sst2/best --text "the film was great" --png attention.png',
    "verify": "attnlab verify runs/sst2/best",
    "demo": "attnlab demo",
    "ablate": "attnlab ablate roberta-table1 --minutes 15 --output runs/ablations",
}
