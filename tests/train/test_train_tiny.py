"""Tiny models and data shared by the trainer tests, and the training script the signal test runs.

Run as a script (``python tests/train/test_train_tiny.py OUTPUT_DIR MAX_STEPS [--resume] [--sleep S]``) it
trains `TinyLM` and writes the final weights to ``OUTPUT_DIR/final.safetensors``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the script form runs from anywhere
    sys.path.insert(0, str(ROOT))

from attnlab.train import ResumableLoader, Trainer, TrainerConfig, set_seed  # noqa: E402
from attnlab.train.checkpoint import save_model  # noqa: E402

VOCAB, HIDDEN, SEQ = 32, 16, 12


class TinyLM(nn.Module):
    """Embedding -> 1-layer causal TransformerEncoder (dropout 0.1) -> LayerNorm -> tied output projection."""

    def __init__(self, dropout: float = 0.1, sleep: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        layer = nn.TransformerEncoderLayer(HIDDEN, 2, 32, dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB)
        nn.init.normal_(self.embed.weight, std=0.1)
        self.head.weight = self.embed.weight  # tied: checkpoints must store this storage once
        self.sleep = sleep

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, labels=None
    ) -> dict:
        if self.sleep:
            time.sleep(self.sleep)  # lets the signal test catch the run mid-way
        T = input_ids.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=input_ids.device)
        h = self.norm(self.encoder(self.embed(input_ids), mask=causal, is_causal=True))  # (B, T, H)
        logits = self.head(h)  # (B, T, V)
        out = {"logits": logits}
        if labels is not None:
            loss = nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100
            )
            accuracy = (logits.argmax(-1) == labels)[labels != -100].float().mean()
            out.update(loss=loss, metrics={"accuracy": accuracy})
        return out


class TokenDataset(torch.utils.data.Dataset):
    """Random token sequences; labels are the next token (last position ignored)."""

    def __init__(self, n: int = 64, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        ids = self.ids[i]
        labels = torch.cat([ids[1:], ids.new_tensor([-100])])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


class TinyMLP(nn.Module):
    """Regression MLP without dropout (DDP parity): Linear -> LayerNorm -> tanh -> Linear, MSE loss."""

    def __init__(self, d_in: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        pred = self.fc2(torch.tanh(self.norm(self.fc1(x)))).squeeze(-1)  # (B,)
        return {"loss": nn.functional.mse_loss(pred, y)}


class RegressionDataset(torch.utils.data.Dataset):
    def __init__(self, n: int = 96, d_in: int = 8, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, d_in, generator=g)
        self.y = self.x.sum(-1).sin() + 0.1 * torch.randn(n, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict:
        return {"x": self.x[i], "y": self.y[i]}


def lm_config(output_dir: Path, max_steps: int, **overrides) -> TrainerConfig:
    base = dict(
        max_steps=max_steps,
        batch_size=4,
        grad_accum_steps=2,
        lr=3e-3,
        warmup=2,
        save_every=2,
        keep_last=2,
        log_every=1,
        output_dir=output_dir,
        seed=1,
        tensorboard=False,
        progress_bar=False,
        plot=False,
    )
    base.update(overrides)
    return TrainerConfig(**base)


def lm_trainer(output_dir: Path, max_steps: int, sleep: float = 0.0, **overrides) -> Trainer:
    set_seed(0)
    model = TinyLM(sleep=sleep)
    loader = ResumableLoader(TokenDataset(), batch_size=4, seed=3, shuffle=True, drop_last=True)
    return Trainer(model, lm_config(output_dir, max_steps, **overrides), loader)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("max_steps", type=int)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    trainer = lm_trainer(args.output_dir, args.max_steps, sleep=args.sleep)
    if args.resume:
        trainer.resume("latest")
    result = trainer.train()
    save_model(trainer.model, args.output_dir / "final.safetensors")
    print(f"done step={result.step} interrupted={result.interrupted}", flush=True)


# --------------------------------------------------------------------------- tests of the helpers


def test_tiny_lm_ties_and_loss() -> None:
    model = TinyLM()
    assert model.head.weight is model.embed.weight
    batch = torch.utils.data.default_collate([TokenDataset(4)[i] for i in range(4)])
    out = model(**batch)
    assert out["loss"].dim() == 0 and 2.0 < out["loss"].item() < 6.0  # ~ln(32) = 3.47 at initialisation


if __name__ == "__main__":
    main()
