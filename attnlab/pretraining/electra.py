"""ELECTRA's pre-trainer (Clark et al. 2020): a small masked-LM generator and a discriminator, composed.

The generator (an `EncoderForPreTraining` without pair head) fills the masked positions with tokens sampled
from its own softmax; the discriminator (a `ReplacedTokenDetection`) tells, for every token, whether it is
the original or a replacement (section 2)::

    L = L_MLM(x, theta_G) + lambda * L_Disc(x, theta_D),   lambda = 50   (section 2, Table 6)

- Embeddings are shared (section 3.2, "Weight sharing"): the generator's token, position and segment
  embeddings, and the LayerNorm over their sum, are the discriminator's modules (assigned, not copied:
  ``generator.encoder.embeddings.word is discriminator.encoder.embeddings.word``). The generator is smaller:
  its own ``embeddings.project`` maps E to its hidden size H_G, and its MLM head maps H_G back to E before
  the tied decoder. (Sharing the LayerNorm follows the released code, which builds the whole embedding
  block in one shared scope; the paper says "token and positional embeddings".)
- Sampling takes no gradient (the generator is trained by maximum likelihood, not adversarially);
  a sampled token equal to the original counts as original (section 2: "if the generator happens to
  generate the correct token, that token is considered real instead of fake").
- After pre-training the generator is thrown away: `discriminator_only()`.

Shapes: B batch, T sequence, M masked positions in the batch, V vocabulary, E embedding size,
H_G / H_D generator / discriminator hidden sizes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.models import EncoderConfig, EncoderForPreTraining, ReplacedTokenDetection
from attnlab.models.pretraining import IGNORE_INDEX

SHARED_EMBEDDINGS = ("word", "position", "token_type", "norm")


def generator_config(discriminator: EncoderConfig, fraction: float = 0.25) -> EncoderConfig:
    """The generator of a discriminator config: hidden size, FFN size and heads multiplied by ``fraction``
    (Clark et al. 2020, Table 6 "Generator Size": 1/4 for Small, 1/3 for Base and Large), the same depth,
    vocabulary and embedding size E (the embeddings are shared), no pooler.

    The hidden size is rounded to a multiple of the resulting head count (at least one head).
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"generator fraction: expected a number in (0, 1], got {fraction!r}")
    heads = max(1, round(discriminator.num_heads * fraction))
    hidden = max(heads, round(discriminator.hidden_size * fraction / heads) * heads)
    return dataclasses.replace(
        discriminator,
        embedding_size=discriminator.embedding_dim,
        hidden_size=hidden,
        num_heads=heads,
        intermediate_size=max(1, round(discriminator.intermediate_size * fraction)),
        add_pooler=False,
    )


@dataclass
class ElectraOutput:
    loss: Tensor | None  # mlm_loss + rtd_weight * rtd_loss
    mlm_loss: Tensor | None  # generator cross-entropy over the masked positions
    rtd_loss: Tensor | None  # discriminator binary cross-entropy over real tokens
    mlm_logits: Tensor  # (M, V) generator logits at the masked positions, in row-major (b, t) order
    mlm_labels: Tensor  # (M,) original ids at those positions
    rtd_logits: Tensor  # (B, T) discriminator logits, > 0 = replaced
    corrupted_ids: Tensor  # (B, T) the discriminator's input
    replaced: Tensor  # (B, T) bool, the discriminator's targets (sampled != original)
    metrics: dict[str, Tensor] = dataclasses.field(default_factory=dict)  # logged by the Trainer


class ElectraPreTrainer(nn.Module):
    """``generator`` (MLM) + ``discriminator`` (replaced-token detection), embeddings tied by assignment.

    Args:
        generator: an `EncoderForPreTraining` (no pair head) whose E equals the discriminator's.
        discriminator: a `ReplacedTokenDetection`.
        rtd_weight: lambda, the discriminator loss weight (50 in the paper).
        temperature: sampling temperature of the generator's softmax (1 in the paper).
        tie_embeddings: share the embedding modules (the paper's choice); False keeps them separate.
    """

    def __init__(
        self,
        generator: EncoderForPreTraining,
        discriminator: ReplacedTokenDetection,
        *,
        rtd_weight: float = 50.0,
        temperature: float = 1.0,
        tie_embeddings: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(generator, EncoderForPreTraining):
            raise TypeError(f"generator: expected an EncoderForPreTraining, got {type(generator).__name__}")
        if not isinstance(discriminator, ReplacedTokenDetection):
            raise TypeError(
                f"discriminator: expected a ReplacedTokenDetection, got {type(discriminator).__name__}"
            )
        if generator.pair_head is not None:
            raise ValueError(
                "generator: ELECTRA's generator is a plain masked LM; build it without pair_head"
            )
        g, d = generator.config, discriminator.config
        if g.vocab_size != d.vocab_size:
            raise ValueError(
                f"generator vocab_size {g.vocab_size} != discriminator vocab_size {d.vocab_size}"
            )
        if not rtd_weight >= 0 or not temperature > 0:
            raise ValueError(f"need rtd_weight >= 0 and temperature > 0, got {rtd_weight}, {temperature}")
        self.config = d  # the model that is kept
        self.generator = generator
        self.discriminator = discriminator
        self.rtd_weight = float(rtd_weight)
        self.temperature = float(temperature)
        if tie_embeddings:
            self._tie(g, d)

    def _tie(self, g: EncoderConfig, d: EncoderConfig) -> None:
        for field in ("embedding_dim", "max_position_embeddings", "type_vocab_size", "position_embedding"):
            if getattr(g, field) != getattr(d, field):
                raise ValueError(
                    f"cannot share embeddings: generator {field}={getattr(g, field)!r}, "
                    f"discriminator {field}={getattr(d, field)!r} (the generator keeps the discriminator's "
                    "embedding size E and projects E -> its own hidden size)"
                )
        gen_emb = self.generator.encoder.embeddings
        disc_emb = self.discriminator.encoder.embeddings
        for name in SHARED_EMBEDDINGS:
            module = getattr(disc_emb, name)
            if isinstance(module, nn.Module):  # a sinusoidal position table is a buffer: nothing to share
                setattr(gen_emb, name, module)
        self.generator.mlm_head.tie_to(disc_emb.word)  # the generator's decoder is the shared table too

    def discriminator_only(self) -> ReplacedTokenDetection:
        """The discriminator, to save and fine-tune; the generator is thrown away (section 2)."""
        return self.discriminator

    def forward(
        self,
        input_ids: Tensor,
        labels: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> ElectraOutput:
        """``input_ids`` (B, T) masked by the data pipeline, ``labels`` (B, T): the original id where a
        position was selected for prediction, -100 elsewhere."""
        if labels.shape != input_ids.shape:
            raise ValueError(
                f"labels: expected the shape of input_ids {tuple(input_ids.shape)}, got {tuple(labels.shape)}"
            )
        selected = labels != IGNORE_INDEX  # (B, T) positions the generator fills
        gen = self.generator
        hidden = gen.encoder(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids
        ).last_hidden_state  # (B, T, H_G)
        mlm_labels = labels[selected]  # (M,)
        # The MLM head runs only where there is something to predict (M ~ 0.15 B T rows instead of B T).
        mlm_logits = gen.mlm_head(hidden[selected])  # (M, V)
        if mlm_labels.numel():
            mlm_loss = F.cross_entropy(mlm_logits.float(), mlm_labels)
        else:
            mlm_loss = mlm_logits.sum() * 0.0  # keeps a gradient path on batches without targets

        with torch.no_grad():  # sampling is not differentiated (maximum likelihood, not a GAN)
            probs = torch.softmax(mlm_logits.detach().float() / self.temperature, dim=-1)  # (M, V)
            sampled = (
                torch.multinomial(probs, 1).squeeze(-1) if mlm_labels.numel() else mlm_labels.clone()
            )  # (M,)
            original = torch.where(selected, labels, input_ids)  # (B, T) the uncorrupted text
            corrupted = original.clone()
            corrupted[selected] = sampled
            replaced = corrupted != original  # a sample equal to the original counts as original
            rtd_labels = replaced.long()
            if attention_mask is not None:
                rtd_labels = rtd_labels.masked_fill(attention_mask == 0, IGNORE_INDEX)

        disc = self.discriminator(
            corrupted,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            labels=rtd_labels,
            position_ids=position_ids,
        )
        rtd_loss = disc.loss
        loss = mlm_loss + self.rtd_weight * rtd_loss
        with torch.no_grad():
            real = rtd_labels != IGNORE_INDEX
            n_real = real.sum().clamp(min=1)
            rtd_correct = ((disc.logits > 0) == replaced) & real
            metrics = {
                "mlm_loss": mlm_loss.detach(),
                "rtd_loss": rtd_loss.detach(),
                "rtd_accuracy": rtd_correct.sum() / n_real,
                "replaced_fraction": (replaced & real).sum() / n_real,
            }
            if mlm_labels.numel():
                metrics["mlm_accuracy"] = (mlm_logits.argmax(-1) == mlm_labels).float().mean()
        return ElectraOutput(
            loss=loss,
            mlm_loss=mlm_loss,
            rtd_loss=rtd_loss,
            mlm_logits=mlm_logits,
            mlm_labels=mlm_labels,
            rtd_logits=disc.logits,
            corrupted_ids=corrupted,
            replaced=replaced,
            metrics=metrics,
        )
