"""A small text-conditioned diffusion transformer (DiT) for [4, 32, 32] VAE latents and [L, C] T5 hidden states:
patchify (4x4 -> 64 tokens), adaLN-zero blocks modulated by the noise level and the pooled caption, self-attention
over the latent tokens, cross-attention to the caption tokens, an MLP; predicts the noise (epsilon)."""
import math

import torch
from torch import nn


def level_embedding(a, dim):
    """Sinusoidal features of the noise level a in (0, 1) (scaled as a diffusion timestep)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    t = a[:, None] * 1000.0 * freqs[None, :]
    return torch.cat([torch.cos(t), torch.sin(t)], dim=1)


class Block(nn.Module):
    def __init__(self, d, heads, cond):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d, eps=1e-6)
        self.cross = nn.MultiheadAttention(d, heads, kdim=cond, vdim=cond, batch_first=True)
        self.norm3 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, x, c, text):
        s1, g1, b1, s2, g2, b2 = self.ada(c).unsqueeze(1).chunk(6, dim=2)
        h = self.norm1(x) * (1 + s1) + b1
        x = x + g1 * self.attn(h, h, h, need_weights=False)[0]
        x = x + self.cross(self.norm2(x), text, text, need_weights=False)[0]
        h = self.norm3(x) * (1 + s2) + b2
        return x + g2 * self.mlp(h)


class DiT(nn.Module):
    def __init__(self, channels=4, size=32, patch=4, cond_dim=64, d=128, depth=3, heads=4):
        super().__init__()
        self.channels, self.size, self.patch = channels, size, patch
        n = (size // patch) ** 2
        self.embed = nn.Linear(channels * patch * patch, d)
        self.pos = nn.Parameter(torch.randn(1, n, d) * 0.02)
        self.level = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.text_proj = nn.Linear(cond_dim, d)
        self.blocks = nn.ModuleList(Block(d, heads, cond_dim) for _ in range(depth))
        self.norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.out = nn.Linear(d, channels * patch * patch)
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)
        self.d = d

    def patchify(self, z):
        b, c, h, w = z.shape
        p = self.patch
        return z.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)

    def unpatchify(self, x):
        b = x.shape[0]
        p, c, g = self.patch, self.channels, self.size // self.patch
        return x.reshape(b, g, g, c, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, c, g * p, g * p)

    def forward(self, z, a, text):
        """z: noisy latents [B, 4, 32, 32]; a: noise level [B]; text: caption hidden states [B, L, C]."""
        x = self.embed(self.patchify(z)) + self.pos
        c = self.level(level_embedding(a, self.d)) + self.text_proj(text.mean(dim=1))
        for blk in self.blocks:
            x = blk(x, c, text)
        s, b = self.ada(c).unsqueeze(1).chunk(2, dim=2)
        return self.unpatchify(self.out(self.norm(x) * (1 + s) + b))
