"""Example user models for the Srifty profiling agent.

A user model is any ``package.module:factory`` whose factory returns an ``nn.Module``. The
agent passes ``num_classes=`` and ``input_shape=`` (the per-sample shape from
``--input-shape``) when the factory's signature accepts them::

    python -m profiler.agent compute --model examples.tiny_model:build \
        --input-shape 3,32,32 --batch-sizes 8,32 --device cpu --out tiny.json
    python -m profiler.agent compute --model examples.tiny_model:build_transformer \
        --input-shape 32,64 --batch-sizes 8,32 --device cpu --out tiny_tf.json

Both are small enough to profile on a laptop CPU in seconds, yet have more than 1 MiB of
parameters, so they produce more than one DDP bucket (the first bucket is capped at 1 MiB).
"""

from __future__ import annotations

import torch
from torch import nn


def _conv_block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
    )


class TinyCNN(nn.Module):
    """Four conv blocks (32-64-128-256 channels) and a linear head: about 0.4 M parameters (1.6 MB)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _conv_block(in_channels, 32),
            _conv_block(32, 64),
            _conv_block(64, 128),
            _conv_block(128, 256),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(256, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


def build(num_classes: int = 10, input_shape: tuple[int, ...] = (3, 32, 32)) -> nn.Module:
    """A small CNN for image input shaped (channels, height, width), e.g. ``--input-shape 3,32,32``."""
    if len(input_shape) != 3:
        raise ValueError(f"TinyCNN expects --input-shape C,H,W, got {input_shape}")
    return TinyCNN(num_classes=num_classes, in_channels=input_shape[0])


class TinyTransformer(nn.Module):
    """A pre-norm transformer encoder over float features, mean-pooled into a classifier.

    Input is already-embedded tokens shaped (batch, seq, in_dim) - float, so that the agent's
    synthetic ``torch.randn`` batches work without an embedding table of token ids. A linear
    layer projects ``in_dim`` to the model width. About 0.4 M parameters (1.6 MB) at the defaults.
    """

    def __init__(
        self,
        num_classes: int = 10,
        in_dim: int = 64,
        width: int = 128,
        depth: int = 2,
        heads: int = 4,
        seq_len: int = 32,
    ) -> None:
        super().__init__()
        self.proj = nn.Linear(in_dim, width)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, width))
        layer = nn.TransformerEncoderLayer(
            d_model=width,
            nhead=heads,
            dim_feedforward=4 * width,
            dropout=0.0,
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.proj(x) + self.pos[:, : x.shape[1]])
        return self.head(self.norm(h).mean(dim=1))


def build_transformer(num_classes: int = 10, input_shape: tuple[int, ...] = (32, 64)) -> nn.Module:
    """A 2-layer transformer classifier for input shaped (seq, features), e.g. ``--input-shape 32,64``."""
    if len(input_shape) != 2:
        raise ValueError(f"TinyTransformer expects --input-shape SEQ,FEATURES, got {input_shape}")
    seq_len, in_dim = input_shape
    return TinyTransformer(num_classes=num_classes, in_dim=in_dim, seq_len=seq_len)
