"""The papers' pre-training recipes as named presets: data format, masking, objective, optimiser, lengths.

Each recipe is a frozen `Recipe`; they derive from each other with `dataclasses.replace`, and
`Recipe.scaled_down` / `Recipe.override` make per-run versions for small machines. Sources:

- ``bert``: Devlin et al. 2019, section 3.1 and appendix A.2: SEGMENT-PAIR + NSP, 15% of the tokens
  predicted with 80/10/10, static masks duplicated 10 times (the released ``create_pretraining_data.py``),
  Adam lr 1e-4, beta (0.9, 0.999), L2 weight decay 0.01 (not on biases and LayerNorm), 10k warm-up steps then
  linear decay, dropout 0.1, batch 256 for 1M steps, length 128 for 90% of the steps and 512 for the rest
  (at most 20 and 80 predictions per sequence), uncased WordPiece of 30522 tokens.
- ``roberta``: Liu et al. 2019, sections 4.1-4.2 and Table 9: FULL-SENTENCES without NSP, dynamic masking,
  byte-level BPE of 50K units, Adam beta (0.9, 0.98), eps 1e-6, lr 6e-4 with 24k warm-up for the base model,
  batch 8K, 500K steps, always 512 tokens.
- ``albert``: Lan et al. 2020, section 4.1: SOP, n-gram masking (n <= 3, p(n) ~ 1/n), LAMB with lr 0.00176,
  batch 4096, 125K steps (3125 warm-up steps, as released), 512 tokens with 10% shorter inputs,
  SentencePiece (Unigram) vocabulary of 30K, no dropout.
- ``spanbert``: Joshi et al. 2020, sections 3 and 4.1: span masking (Geo(0.2) clipped at 10 words, 80/10/10
  per span) plus the span-boundary objective, single segments of up to 512 tokens without NSP, AdamW lr 1e-4,
  eps 1e-8, 10K warm-up steps, linear decay, batch 256, 2.4M steps, cased WordPiece.
- ``mlm``: ``bert`` without NSP over FULL-SENTENCES with dynamic masking (RoBERTa's data findings, Liu et al.
  2019, 4.1-4.2, on BERT's tokenizer and optimiser); ``attnlab pretrain``'s default.
- ``electra``: Clark et al. 2020, section 3 and Table 6 (ELECTRA-Small): replaced-token detection with a
  generator 1/4 the discriminator's size (1/3 for Base/Large), loss weight 50, 15% masked (85% [MASK], 15%
  kept, as released), Adam lr 5e-4, eps 1e-6, weight decay 0.01, 10K warm-up, batch 128, 1M steps, length
  128, dropout 0.1.
- ``gpt``: a causal LM (objective ``clm``, attnlab.pretraining.causal_lm): GPT-2's architecture and data
  (Radford et al. 2019, sections 2.2-2.3: byte-level BPE of 50,257 tokens, 1024-token context, batch 512,
  documents joined by ``<|endoftext|>``) with GPT's optimisation, which the GPT-2 paper does not restate
  (Radford et al. 2018, section 4.1: Adam, lr 2.5e-4 warmed up over 2000 updates, weight decay 0.01 off biases
  and gains, dropout 0.1). Deviation: the schedule decays linearly rather than by a cosine (the trainer's
  re-planning of time-budgeted runs moves a linear schedule's end; on Tiny Shakespeare the two ended
  0.004 nats apart, experiments/gpt_tinyshakespeare.py). ``Recipe.tokenizer = "char"`` trains a character
  vocabulary instead (attnlab.tokenizers.char).
- ``transfo-xl``: Transformer-XL (Dai et al. 2019): GPT's objective and tokenizer with segment recurrence
  (section 3.2: parallel streams read segment after segment, each layer attending to its states of the
  previous segment as memory, no gradient through it; attnlab.pretraining.transfo_xl) on a Transformer-XL
  preset. The optimisation is the released code's enwik8 base run (``run_enwik8_base.sh``, Table 2): Adam
  lr 2.5e-4, no weight decay, no warm-up, cosine decay to 0 over 400K steps, gradient clipping 0.25 (its
  ``train.py`` default), batch 22, segments of 512 with a memory of 512, dropout 0.1, no attention dropout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from attnlab.data import INSTANCE_FORMATS, MaskingConfig
from attnlab.train import TrainerConfig

# masked LM (+ NSP/SOP when the format has pairs), + SBO, ELECTRA; causal (left-to-right) LM
OBJECTIVES = ("mlm", "sbo", "electra", "clm")
TOKENIZER_KINDS = (
    "wordpiece",
    "bpe",
    "byte_level_bpe",
    "unigram",
    "char",
)  # attnlab.tokenizers.train_tokenizer kinds, and attnlab.tokenizers.char
PAIR_FORMATS = ("segment_pair", "sentence_pair", "sop")


@dataclass(frozen=True)
class LengthStage:
    """One phase of the sequence-length schedule: ``max_length`` tokens for ``fraction`` of the steps."""

    max_length: int
    fraction: float = 1.0
    max_predictions: int | None = None  # BERT's max_predictions_per_seq for this length

    def __post_init__(self) -> None:
        if self.max_length < 8:
            raise ValueError(f"LengthStage.max_length: expected >= 8, got {self.max_length}")
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"LengthStage.fraction: expected a number in (0, 1], got {self.fraction}")


@dataclass(frozen=True)
class Recipe:
    """Everything a pre-training run takes from a paper, except the corpus and the model size."""

    name: str
    # --- data
    instance_format: str = "segment_pair"  # attnlab.data.INSTANCE_FORMATS; the pair formats add NSP/SOP
    template: str = "bert"  # "[CLS] A [SEP] B [SEP]" or RoBERTa's "<s> A </s></s> B </s>"
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    static_masking: bool = False  # BERT: masks drawn once per (dupe) copy; otherwise new masks each epoch
    dupe_factor: int = 1  # BERT: 10 differently masked copies of the static data
    short_seq_prob: float | None = None  # None: the instance format's default (0.1 for segment_pair, sop)
    stages: tuple[LengthStage, ...] = (LengthStage(512),)  # fractions sum to 1
    # what a longer length stage's new positions start as: "keep" (BERT: as initialised, decayed) or "copy"
    # (the previous stage's trained positions repeated, Longformer's start for its longer table)
    stage_positions: str = "keep"
    # --- tokenizer trained when none is given
    tokenizer: str = "wordpiece"
    vocab_size: int = 30522
    lowercase: bool | None = True  # None: the tokenizer kind's default
    # --- objective and model
    objective: str = "mlm"
    preset: str = "bert-base-uncased"  # the (discriminator's) encoder when the CLI names none
    # The architecture the paper's idea is, applied to whatever preset is trained (ALBERT: cross-layer
    # sharing and factorised embeddings of E = embedding_size, or H/2 for a model narrower than 2E).
    sharing: str | None = None  # an EncoderConfig.sharing pattern
    embedding_size: int | None = None  # E < H
    dropout: float = 0.1  # hidden and attention dropout
    generator_fraction: float = 0.25  # ELECTRA: generator hidden/FFN/heads as a fraction of the discriminator
    rtd_weight: float = 50.0  # ELECTRA's lambda
    sbo_max_positions: int = 64  # SpanBERT: rows of the relative position table
    # Transformer-XL (objective "clm"): stream-ordered segments with the previous segment's states as memory
    # (attnlab.data.streams, attnlab.pretraining.transfo_xl); the model is a Transformer-XL preset
    segment_recurrence: bool = False
    # --- optimisation (attnlab.train.TrainerConfig fields)
    optimizer: str = "adamw"
    lr: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    weight_decay: float = 0.01
    warmup: int | float = 10_000  # steps, or a fraction of max_steps when a float < 1
    schedule: str = "linear"
    clip_norm: float | None = 1.0
    max_steps: int = 1_000_000
    batch_size: int = 256

    def __post_init__(self) -> None:
        def fail(name: str, expected: str) -> None:
            raise ValueError(
                f"Recipe {self.name!r}: {name}: expected {expected}, got {getattr(self, name)!r}"
            )

        if self.instance_format not in INSTANCE_FORMATS:
            fail("instance_format", f"one of {', '.join(INSTANCE_FORMATS)}")
        if self.template not in ("bert", "roberta"):
            fail("template", "'bert' or 'roberta'")
        if self.objective not in OBJECTIVES:
            fail("objective", f"one of {', '.join(OBJECTIVES)}")
        if self.tokenizer not in TOKENIZER_KINDS:
            fail("tokenizer", f"one of {', '.join(TOKENIZER_KINDS)}")
        if not isinstance(self.masking, MaskingConfig):
            fail("masking", "a MaskingConfig")
        if self.objective == "sbo" and self.masking.strategy != "span":
            fail("masking", "strategy='span' for the span-boundary objective")
        if self.objective == "clm" and self.tokenizer not in ("byte_level_bpe", "char"):
            fail("tokenizer", "'byte_level_bpe' or 'char' for a causal LM (text decoded back as written)")
        if self.segment_recurrence and self.objective != "clm":
            fail("segment_recurrence", "False unless objective is 'clm' (a causal LM)")
        if self.objective in ("sbo", "electra", "clm") and self.instance_format in PAIR_FORMATS:
            fail("instance_format", f"a single-segment format for objective {self.objective!r} (no NSP/SOP)")
        if not self.stages or abs(sum(s.fraction for s in self.stages) - 1.0) > 1e-6:
            fail("stages", "length stages whose fractions sum to 1")
        if self.stage_positions not in ("keep", "copy"):
            fail("stage_positions", "'keep' or 'copy'")
        for name in ("dupe_factor", "max_steps", "batch_size", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(name, "a positive int")
        if not 0.0 < self.generator_fraction <= 1.0:
            fail("generator_fraction", "a number in (0, 1]")
        if not 0.0 <= self.dropout < 1.0:
            fail("dropout", "a probability in [0, 1)")
        self.trainer_config(output_dir=".")  # validates the optimiser fields where they are set

    @property
    def has_pair_head(self) -> bool:
        """NSP (segment_pair, sentence_pair) or SOP (sop)."""
        return self.objective == "mlm" and self.instance_format in PAIR_FORMATS

    def stage_ends(self, max_steps: int | None = None) -> list[int]:
        """Each length stage's last step (cumulative, 1-based) in a run of ``max_steps`` steps (default: the
        recipe's): the fractions' running sums rounded, each stage at least one step."""
        total = self.max_steps if max_steps is None else max_steps
        n = len(self.stages)
        if total < n:
            raise ValueError(f"Recipe {self.name!r}: max_steps={total} < {n} stages")
        ends, end, running = [], 0, 0.0
        for i, stage in enumerate(self.stages):
            running += stage.fraction
            # at least one step after the previous stage, and one left for each later stage
            end = min(max(round(total * running), end + 1), total - (n - 1 - i))
            ends.append(end)
        return ends

    def stage_steps(self) -> list[int]:
        """Steps per length stage, summing to ``max_steps`` (a stage gets at least one step)."""
        ends = self.stage_ends()
        return [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]

    def trainer_config(self, **overrides: Any) -> TrainerConfig:
        """The `TrainerConfig` of this recipe; ``overrides`` set any other TrainerConfig field."""
        fields = dict(
            max_steps=self.max_steps,
            batch_size=self.batch_size,
            optimizer=self.optimizer,
            lr=self.lr,
            betas=self.betas,
            eps=self.eps,
            weight_decay=self.weight_decay,
            warmup=self.warmup,
            schedule=self.schedule,
            clip_norm=self.clip_norm,
            lm_perplexity=False,  # the loss may hold NSP/SOP/SBO/RTD terms; MaskedLMMetric has the MLM one
        )
        fields.update(overrides)
        return TrainerConfig(**fields)

    def scaled_down(
        self,
        max_steps: int = 1000,
        batch_size: int = 32,
        max_length: int = 128,
        *,
        keep_stages: bool = False,
    ) -> Recipe:
        """A version for a small machine: ``max_steps`` of ``batch_size``, warm-up kept as the paper's
        *fraction* of the run, and one length stage of ``max_length`` (or, with ``keep_stages``, the paper's
        stages with lengths scaled so that the longest is ``max_length``). ``max_predictions`` scales with
        the length."""
        warmup = self.warmup
        if isinstance(warmup, int) or (isinstance(warmup, float) and warmup >= 1):
            warmup = min(float(warmup) / self.max_steps, 0.5)
        longest = max(s.max_length for s in self.stages)
        if keep_stages:
            stages = tuple(
                dataclasses.replace(
                    s,
                    max_length=max(8, s.max_length * max_length // longest),
                    max_predictions=None
                    if s.max_predictions is None
                    else max(1, s.max_predictions * max_length // longest),
                )
                for s in self.stages
            )
        else:
            last = self.stages[-1]
            per_token = None if last.max_predictions is None else last.max_predictions / last.max_length
            stages = (
                LengthStage(
                    max_length, 1.0, None if per_token is None else max(1, round(per_token * max_length))
                ),
            )
        return dataclasses.replace(
            self, max_steps=max_steps, batch_size=batch_size, warmup=float(warmup), stages=stages
        )

    def override(self, **values: Any) -> Recipe:
        """A copy with fields replaced; ``masking`` may be a dict of MaskingConfig fields, ``stages`` a list
        of dicts or ``max_length`` integers. Unknown names raise an error listing the valid ones."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"Recipe: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            )
        values = dict(values)
        for name, value in values.items():  # a number where the paper has one (--set lr=abc names the field)
            current = getattr(self, name)
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if isinstance(current, (int, float)) and not isinstance(current, bool) and not is_number:
                raise ValueError(f"Recipe field {name!r}: expected a number, got {value!r}")
        if isinstance(values.get("masking"), dict):
            values["masking"] = _replace_checked(self.masking, values["masking"], "masking")
        if "stages" in values and not isinstance(values["stages"], (list, tuple)):
            raise ValueError(f"Recipe field 'stages': expected a list of lengths, got {values['stages']!r}")
        if "stages" in values and not all(isinstance(s, LengthStage) for s in values["stages"]):
            values["stages"] = tuple(
                LengthStage(**s) if isinstance(s, dict) else LengthStage(int(s), 1.0 / len(values["stages"]))
                for s in values["stages"]
            )
        if "betas" in values:
            values["betas"] = tuple(float(b) for b in values["betas"])
        return dataclasses.replace(self, **values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _replace_checked(obj: Any, values: dict[str, Any], what: str) -> Any:
    known = {f.name for f in dataclasses.fields(obj)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{what}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
    return dataclasses.replace(obj, **values)


# -- the papers ------------------------------------------------------------------------------------
BERT = Recipe(
    name="bert",
    instance_format="segment_pair",
    masking=MaskingConfig(rate=0.15, mask_prob=0.8, random_prob=0.1, strategy="token"),
    static_masking=True,
    dupe_factor=10,
    stages=(LengthStage(128, 0.9, 20), LengthStage(512, 0.1, 80)),
    tokenizer="wordpiece",
    vocab_size=30522,
    preset="bert-base-uncased",
    lr=1e-4,
    betas=(0.9, 0.999),
    eps=1e-6,
    weight_decay=0.01,
    warmup=10_000,
    max_steps=1_000_000,
    batch_size=256,
)

ROBERTA = dataclasses.replace(
    BERT,
    name="roberta",
    instance_format="full_sentences",
    template="roberta",
    static_masking=False,
    dupe_factor=1,
    stages=(LengthStage(512),),
    tokenizer="byte_level_bpe",
    vocab_size=50265,
    lowercase=None,
    preset="roberta-base",
    lr=6e-4,
    betas=(0.9, 0.98),
    eps=1e-6,
    warmup=24_000,
    max_steps=500_000,
    batch_size=8192,
)

ALBERT = dataclasses.replace(
    BERT,
    name="albert",
    instance_format="sop",
    masking=MaskingConfig(rate=0.15, mask_prob=0.8, random_prob=0.1, strategy="ngram", max_ngram=3),
    static_masking=False,
    dupe_factor=1,
    short_seq_prob=0.1,
    stages=(LengthStage(512, 1.0, 20),),  # ALBERT's released config: max_predictions_per_seq 20
    tokenizer="unigram",
    vocab_size=30000,
    preset="albert-base",
    sharing="all",
    embedding_size=128,
    dropout=0.0,
    optimizer="lamb",
    lr=0.00176,
    warmup=3125,
    max_steps=125_000,
    batch_size=4096,
)

SPANBERT = dataclasses.replace(
    BERT,
    name="spanbert",
    instance_format="doc_sentences",
    masking=MaskingConfig(
        rate=0.15, mask_prob=0.8, random_prob=0.1, strategy="span", span_p=0.2, span_max=10
    ),
    objective="sbo",
    static_masking=False,
    dupe_factor=1,
    stages=(LengthStage(512),),
    vocab_size=28996,
    lowercase=False,
    preset="bert-base-cased",
    eps=1e-8,
    warmup=10_000,
    max_steps=2_400_000,
    batch_size=256,
)

ELECTRA = dataclasses.replace(
    BERT,
    name="electra",
    instance_format="full_sentences",
    masking=MaskingConfig(rate=0.15, mask_prob=0.85, random_prob=0.0, strategy="token"),
    objective="electra",
    static_masking=False,
    dupe_factor=1,
    stages=(LengthStage(128),),
    preset="electra-small",
    generator_fraction=0.25,
    rtd_weight=50.0,
    lr=5e-4,
    eps=1e-6,
    warmup=10_000,
    max_steps=1_000_000,
    batch_size=128,
)

# BERT's masked LM alone over packed full sentences: RoBERTa's finding (Liu et al. 2019, section 4.2 and
# Table 2) that dropping NSP for FULL-SENTENCES matches or beats SEGMENT-PAIR + NSP, with BERT's uncased
# WordPiece, optimiser and lengths; dynamic masking (section 4.1). The default of `attnlab pretrain`: in
# minutes on a CPU it learns twice as much as BERT's NSP recipe (experiments/pretrain_budget.py).
MLM = dataclasses.replace(
    BERT,
    name="mlm",
    instance_format="full_sentences",
    static_masking=False,
    dupe_factor=1,
)

# A causal LM: GPT-2's architecture, tokenizer, context and batch with GPT's optimisation (module docstring).
# The data fields a masked LM reads (instance format, masking) are unused: the stream is cut into blocks.
GPT = dataclasses.replace(
    BERT,
    name="gpt",
    instance_format="full_sentences",
    objective="clm",
    static_masking=False,
    dupe_factor=1,
    stages=(LengthStage(1024),),
    tokenizer="byte_level_bpe",
    vocab_size=50257,
    lowercase=None,
    preset="gpt2",
    dropout=0.1,
    lr=2.5e-4,
    betas=(0.9, 0.999),
    eps=1e-8,
    weight_decay=0.01,
    warmup=2000,
    max_steps=100_000,
    batch_size=512,
)

# Transformer-XL: GPT's objective, data and tokenizer with segment recurrence, the enwik8 base model and its
# released optimisation (module docstring). The segment length is the stage's; the memory is as long
# (attnlab.pretraining.transfo_xl.transfo_xl_config; --mem-len or model.mem_len to change it).
TRANSFO_XL = dataclasses.replace(
    GPT,
    name="transfo-xl",
    segment_recurrence=True,
    stages=(LengthStage(512),),  # tgt_len 512
    preset="transfo-xl-enwik8-12l",
    dropout=0.1,
    optimizer="adamw",  # with weight_decay 0: Adam (torch.optim.Adam and AdamW then take the same steps)
    lr=2.5e-4,
    betas=(0.9, 0.999),  # torch.optim.Adam's defaults, which train.py keeps
    eps=1e-8,
    weight_decay=0.0,
    warmup=0,
    schedule="cosine",
    clip_norm=0.25,
    max_steps=400_000,
    batch_size=22,
)

RECIPES: dict[str, Recipe] = {
    r.name: r for r in (MLM, BERT, ROBERTA, ALBERT, SPANBERT, ELECTRA, GPT, TRANSFO_XL)
}


def get_recipe(name: str, **overrides: Any) -> Recipe:
    """The named recipe, with optional field overrides (see `Recipe.override`)."""
    try:
        recipe = RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown recipe {name!r}; valid: {', '.join(RECIPES)}") from None
    return recipe.override(**overrides) if overrides else recipe
