"""DistilBERT (Sanh et al. 2019): a student with half the teacher's layers, distilled during pre-training.

What makes DistilBERT what it is, as small pieces over the project's masked-LM pre-training:

- **the student** (`student_config`): the teacher's shape with every other layer (section 2: "the number
  of layers is reduced by a factor of 2"), no token-type embeddings and no pooler (they are removed), a
  ReLU ``pre_classifier`` when a classifier is added later (HF's DistilBertForSequenceClassification);
- **its initialisation** (`init_student_from_teacher`): "taking one layer out of two" of the teacher (layers
  0, 2, 4, ...; `teacher_layers`), its embeddings and masked-LM head. The teacher's token-type row 0 is
  folded into the student's position table, so that for single-segment text the student's embeddings
  compute exactly the teacher's (HF's ``extract_distilbert.py`` drops it; a named deviation that costs
  nothing and makes the initial student a true subset of the teacher). HF's script takes layers
  0, 2, 4, 7, 9, 11 of BERT-base; ``layers=`` picks any;
- **the triple loss** (`DistillationPreTrainer`, section 2): ``alpha_ce * L_ce + alpha_mlm * L_mlm +
  alpha_cos * L_cos`` with L_ce the soft-target cross-entropy against the teacher's masked-LM distribution
  at temperature T = 2 (`attnlab.nn.distillation.soft_target_loss`, scaled by T^2), L_mlm the masked-LM
  loss, L_cos the cosine between the student's and the teacher's last hidden states; weights 5 / 2 / 1 as
  released (``train.py``: ``alpha_ce 5.0, alpha_mlm 2.0, alpha_cos 1.0``). The soft targets are taken at the
  masked positions (where L_mlm is: the teacher's head runs only there, as `MaskedLMPreTrainer` gathers
  them); the released code can also take them at every token (``restrict_ce_to_mask`` off);
- **the data** (`DISTILBERT`): RoBERTa's findings, as the paper says (section 3): dynamic masking, large
  batches, no NSP.

The teacher is frozen and is not a registered sub-module: checkpoints, the optimizer and DDP see the
student only, so the pre-training machinery (`attnlab.pretraining.run.pretrain`: the Trainer, checkpoints,
exact resume, DDP, held-out evaluation) runs a `DistillationPreTrainer` as it runs a `MaskedLMPreTrainer`,
and the saved model is the student. Shapes: B batch, T sequence, M predicted positions, H hidden, V vocab.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.data import MaskingConfig
from attnlab.io import infer_family
from attnlab.models import EncoderConfig, EncoderForPreTraining, get_preset
from attnlab.models.pretraining import IGNORE_INDEX
from attnlab.nn.distillation import cosine_alignment_loss, soft_target_loss
from attnlab.pretraining.fill_mask import load_masked_lm
from attnlab.pretraining.masked_lm import MaskedLMOutput, gathered_mlm_loss
from attnlab.pretraining.recipes import MLM, LengthStage
from attnlab.tokenizers.vocab_diff import vocabulary_of

# The released distiller (HF ``examples/research_projects/distillation/train.py``) and the paper (section 3):
# 15% masking with 80/10/10, dynamic, no NSP, Adam lr 5e-4 (eps 1e-6, no weight decay), 5% warm-up,
# gradient clipping at 5, batches of about 4K sequences of up to 512 tokens. The paper gives 3 epochs over
# BERT's corpus, not steps: 3.3B words x 3 at 4K sequences of 512 tokens is about 6K steps (an estimate).
# Not reproduced: the released masking samples positions with probability ~ frequency^-0.7
# (``mlm_smoothing``); here positions are uniform, as in BERT.
DISTILBERT = dataclasses.replace(
    MLM,
    name="distilbert",
    instance_format="full_sentences",
    masking=MaskingConfig(rate=0.15, mask_prob=0.8, random_prob=0.1, strategy="token"),
    static_masking=False,
    dupe_factor=1,
    stages=(LengthStage(512),),
    preset="distilbert-base",
    lr=5e-4,
    eps=1e-6,
    weight_decay=0.0,
    warmup=0.05,
    clip_norm=5.0,
    max_steps=6_000,
    batch_size=4096,
)

PRESET_ALIASES = {"distilbert": "distilbert-base"}  # `attnlab distill --preset distilbert`


@dataclass(frozen=True)
class DistillationConfig:
    """The triple loss's settings (Sanh et al. 2019, section 2; the released defaults)."""

    temperature: float = 2.0  # T of the soft targets (softmax(z / T)); the loss is scaled by T^2
    alpha_ce: float = 5.0  # weight of the soft-target cross-entropy L_ce
    alpha_mlm: float = 2.0  # weight of the masked-LM loss L_mlm
    alpha_cos: float = 1.0  # weight of the cosine loss L_cos on the last hidden states

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise ValueError(
                f"DistillationConfig.temperature: expected a number > 0, got {self.temperature!r}"
            )
        for name in ("alpha_ce", "alpha_mlm", "alpha_cos"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0):
                raise ValueError(f"DistillationConfig.{name}: expected a number >= 0, got {value!r}")
        if self.alpha_ce == self.alpha_mlm == self.alpha_cos == 0:
            raise ValueError(
                "DistillationConfig: alpha_ce, alpha_mlm and alpha_cos are all 0: nothing to learn"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------- student


def teacher_layers(teacher_num_layers: int, student_num_layers: int) -> list[int]:
    """The teacher layers the student's layers start from: one out of every ``L / L_s``, from layer 0
    (12 -> 6: 0, 2, 4, 6, 8, 10; 4 -> 2: 0, 2)."""
    if not 1 <= student_num_layers <= teacher_num_layers:
        raise ValueError(
            f"student layers: expected 1 to the teacher's {teacher_num_layers}, got {student_num_layers}"
        )
    return [i * teacher_num_layers // student_num_layers for i in range(student_num_layers)]


def student_config(
    teacher: EncoderConfig,
    num_layers: int | None = None,
    *,
    preset: str | None = None,
    dropout: float | None = None,
) -> EncoderConfig:
    """The student's config: the teacher's (or ``preset``'s shape with the teacher's vocabulary and
    positions) with ``num_layers`` (default half the teacher's), no token types, no pooler, and ``dropout``
    (default the teacher's). A later classifier gets the head of the HF class the student exports as:
    DistilBERT's ReLU ``pre_classifier`` where the student is DistilBERT's shape, else the teacher's pooler
    activation (a pre-LN student is RoBERTa-PreLayerNorm's, whose head is tanh)."""
    base = teacher
    if preset is not None:
        base = dataclasses.replace(
            get_preset(PRESET_ALIASES.get(preset, preset)),
            vocab_size=teacher.vocab_size,
            pad_token_id=teacher.pad_token_id,
            max_position_embeddings=teacher.max_position_embeddings,
            position_offset=teacher.position_offset,
            norm_first=teacher.norm_first,
        )
        if num_layers is None:
            num_layers = base.num_layers
    layers = num_layers if num_layers is not None else max(1, teacher.num_layers // 2)
    drop = {} if dropout is None else {"hidden_dropout": dropout, "attention_dropout": dropout}
    student = dataclasses.replace(
        base, num_layers=layers, type_vocab_size=0, add_pooler=False, sharing="none", **drop
    )
    if infer_family(student, "base") == "distilbert":
        student = dataclasses.replace(student, pooler_activation="relu")
    return student


# The fields in which a student initialised from the teacher's layers must equal its teacher.
_SAME_SHAPE = (
    "vocab_size",
    "hidden_size",
    "num_heads",
    "intermediate_size",
    "embedding_dim",
    "activation",
    "norm_first",
    "position_embedding",
    "max_position_embeddings",
    "position_offset",
)


def _check_same_shape(student: EncoderConfig, teacher: EncoderConfig) -> None:
    for name in _SAME_SHAPE:
        s, t = getattr(student, name), getattr(teacher, name)
        if s != t:
            raise ValueError(
                f"the student's {name} is {s!r} and the teacher's {t!r}: a student initialised from the "
                "teacher's layers keeps the teacher's shape (give another --preset, or --random-init)"
            )
    if teacher.sharing != "none":
        raise ValueError(
            f"the teacher shares its layers (sharing={teacher.sharing!r}): it has no separate layers to take "
            "one of two from (--random-init trains a student from scratch)"
        )


@torch.no_grad()
def init_student_from_teacher(
    student: EncoderForPreTraining, teacher: EncoderForPreTraining, layers: Sequence[int] | None = None
) -> list[int]:
    """Copy into ``student`` the teacher's embeddings, its layers ``layers`` (default `teacher_layers`), its
    final LayerNorm (pre-LN) and masked-LM head; returns the layers taken. The teacher's token-type row 0 is
    added to the student's position table when the student has no token types (see the module docstring)."""
    s, t = student.encoder, teacher.encoder
    _check_same_shape(s.config, t.config)
    if layers is None:
        layers = teacher_layers(t.config.num_layers, s.config.num_layers)
    layers = [int(i) for i in layers]
    if len(layers) != s.config.num_layers:
        raise ValueError(
            f"layers: expected {s.config.num_layers} teacher layers (one per student layer), got {layers}"
        )
    if any(not 0 <= i < t.config.num_layers for i in layers):
        raise ValueError(f"layers: expected indices in [0, {t.config.num_layers}), got {layers}")
    se, te = s.embeddings, t.embeddings
    se.word.weight.copy_(te.word.weight)
    se.norm.load_state_dict(te.norm.state_dict())
    if te.project is not None:
        se.project.load_state_dict(te.project.state_dict())
    if isinstance(te.position, nn.Embedding):
        se.position.weight.copy_(te.position.weight)
        if se.token_type is None and te.token_type is not None:
            se.position.weight.add_(te.token_type.weight[0])  # (P, E) + (E,): segment A folded in
    elif se.token_type is None and te.token_type is not None:
        raise ValueError(
            "the teacher has sinusoidal positions and token types: the student without token types cannot "
            "hold the teacher's segment embedding (keep type_vocab_size, or --random-init)"
        )
    if se.token_type is not None and te.token_type is not None:
        se.token_type.weight.copy_(te.token_type.weight[: se.token_type.num_embeddings])
    for k, i in enumerate(layers):
        a, f = t.layer_plan[i]
        s.attention[k].load_state_dict(t.attention[a].state_dict())
        s.feed_forward[k].load_state_dict(t.feed_forward[f].state_dict())
    if t.final_norm is not None:
        s.final_norm.load_state_dict(t.final_norm.state_dict())
    student.mlm_head.load_state_dict(teacher.mlm_head.state_dict())  # the tied decoder is the word table
    return layers


def build_student(
    teacher: EncoderForPreTraining,
    config: EncoderConfig,
    *,
    layers: Sequence[int] | None = None,
    random_init: bool = False,
) -> tuple[EncoderForPreTraining, list[int]]:
    """The student masked LM of ``config`` (seed before calling), initialised from ``teacher``'s layers
    unless ``random_init`` (BERT's initialisation: Table 4's "random weights initialization")."""
    student = EncoderForPreTraining.from_config(config)
    if random_init:
        return student, []
    return student, init_student_from_teacher(student, teacher, layers)


# ---------------------------------------------------------------------------------------------- teacher


def load_teacher(directory: str | os.PathLike) -> tuple[EncoderForPreTraining, Any]:
    """``(masked LM, tokenizer)`` of a teacher directory (attnlab or HF), frozen, in eval mode."""
    model, tokenizer = load_masked_lm(directory)
    model.eval().requires_grad_(False)
    if model.config.vocab_size < len(vocabulary_of(tokenizer)):
        raise ValueError(
            f"{directory}: the model has {model.config.vocab_size} vocabulary rows but its tokenizer "
            f"{len(vocabulary_of(tokenizer))} tokens"
        )
    return model, tokenizer


# ---------------------------------------------------------------------------------------------- the loss


class DistillationPreTrainer(nn.Module):
    """The student masked LM (``model``, what is saved) trained against a frozen ``teacher`` with the triple
    loss; takes the batches of `MaskedLMPreTrainer` and returns its output type (student logits at the
    predicted positions), so held-out MLM evaluation and the Trainer work unchanged."""

    def __init__(
        self,
        student: EncoderForPreTraining,
        teacher: EncoderForPreTraining,
        config: DistillationConfig | None = None,
    ) -> None:
        super().__init__()
        for name, m in (("student", student), ("teacher", teacher)):
            if not isinstance(m, EncoderForPreTraining):
                raise TypeError(f"{name}: expected an EncoderForPreTraining, got {type(m).__name__}")
        self.distillation = config or DistillationConfig()
        if student.config.vocab_size != teacher.config.vocab_size:
            raise ValueError(
                f"the teacher's vocabulary has {teacher.config.vocab_size} entries and the student's "
                f"{student.config.vocab_size}: the soft targets compare them entry by entry"
            )
        if self.distillation.alpha_cos > 0 and student.config.hidden_size != teacher.config.hidden_size:
            raise ValueError(
                f"the cosine loss compares hidden states: the student's hidden size "
                f"{student.config.hidden_size} differs from the teacher's {teacher.config.hidden_size} "
                "(alpha_cos=0 drops the loss)"
            )
        self.config = student.config
        self.model = student
        teacher.eval().requires_grad_(False)
        self._teacher = (teacher,)  # a tuple: not a sub-module, so not in state_dict, optimizer or DDP

    @property
    def teacher(self) -> EncoderForPreTraining:
        return self._teacher[0]

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> DistillationPreTrainer:
        # .to(device) / .half() move the teacher with the student (it is not a registered sub-module)
        self.teacher._apply(fn, recurse)
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True) -> DistillationPreTrainer:
        super().train(mode)
        self.teacher.eval()  # no dropout in the targets, ever
        return self

    def forward(
        self,
        input_ids: Tensor,
        labels: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> MaskedLMOutput:
        """``labels`` (B, T): original ids where predicted, -100 elsewhere. ``token_type_ids`` go to the
        teacher only (the student has none; absent, the teacher takes segment A)."""
        if labels.shape != input_ids.shape:
            raise ValueError(
                f"labels: expected the shape of input_ids {tuple(input_ids.shape)}, got {tuple(labels.shape)}"
            )
        d = self.distillation
        student, teacher = self.model, self.teacher
        student_types = token_type_ids if student.config.type_vocab_size > 0 else None
        s = student.encoder(
            input_ids, attention_mask, student_types, position_ids
        ).last_hidden_state  # (B,T,H)
        selected = labels != IGNORE_INDEX  # (B, T)
        mlm_labels = labels[selected]  # (M,)
        s_logits = student.mlm_head(s[selected])  # (M, V)
        mlm_loss = gathered_mlm_loss(s_logits, mlm_labels)
        loss = d.alpha_mlm * mlm_loss
        metrics = {"mlm_loss": mlm_loss.detach()}
        if d.alpha_ce > 0 or d.alpha_cos > 0:
            with torch.no_grad():
                t = teacher.encoder(input_ids, attention_mask, token_type_ids, position_ids).last_hidden_state
            if d.alpha_ce > 0:
                with torch.no_grad():
                    t_logits = teacher.mlm_head(t[selected])  # (M, V)
                ce = soft_target_loss(s_logits, t_logits, d.temperature)
                loss = loss + d.alpha_ce * ce
                metrics["soft_target_loss"] = ce.detach()
            if d.alpha_cos > 0:
                cos = cosine_alignment_loss(s, t, attention_mask)
                loss = loss + d.alpha_cos * cos
                metrics["cosine_loss"] = cos.detach()
        return MaskedLMOutput(
            loss=loss, mlm_logits=s_logits, mlm_labels=mlm_labels, mlm_loss=mlm_loss, metrics=metrics
        )
