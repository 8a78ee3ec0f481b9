"""Deterministic synthetic inputs (audio, images, text) and the DSP helpers the tools share.

Inputs are synthesised on the host from a seed, like data a tool would load, then moved to
the tool's device with `to_device` (so the profiler sees the copy).

>>> wave, f0, voiced = speechlike(seed=3, seconds=0.8)
>>> tuple(wave.shape), f0, round(float(voiced.float().mean()), 2)
((12800,), 211.0, 0.62)
"""

from __future__ import annotations

import functools
import math
from typing import Any

from langgraph_devsched.suite._common import generator, require_torch

SAMPLE_RATE = 16_000
HOP = 160
N_FFT = 400


def pitch_for(seed: int) -> float:
    """The fundamental frequency (Hz) `speechlike` uses for ``seed``: 100..247 Hz."""
    return float(100 + (seed * 37) % 148)


@functools.lru_cache(maxsize=8)
def speechlike(seed: int, seconds: float, sample_rate: int = SAMPLE_RATE) -> tuple[Any, float, Any]:
    """A voiced/silent alternation of harmonic tones at `pitch_for(seed)` with faint noise.

    Returns (waveform float32 [n], f0 in Hz, per-sample voiced mask bool [n]). Cached, like a
    file a tool has already loaded: callers must not modify the tensors in place.
    """
    torch = require_torch()
    gen = generator(seed)
    n = int(seconds * sample_rate)
    f0 = pitch_for(seed)
    t = torch.arange(n, dtype=torch.float64) / sample_rate
    tone = sum(
        (0.6 / k) * torch.sin(2 * math.pi * f0 * k * t + float(k)) for k in range(1, 5)
    )
    # voiced for 5 of every 8 blocks of 100 ms
    block = (torch.arange(n) * 10 // sample_rate) % 8
    voiced = block < 5
    noise = 0.01 * torch.randn(n, generator=gen, dtype=torch.float64)
    wave = torch.where(voiced, tone, torch.zeros_like(tone)) + noise
    return wave.float(), f0, voiced


@functools.lru_cache(maxsize=8)
def image(seed: int, size: int, channels: int = 3) -> Any:
    """A smooth random image in [0, 1] with a few bright rectangles: float32 [1, C, H, W].

    Cached like `speechlike`: callers must not modify it in place.
    """
    torch = require_torch()
    gen = generator(seed)
    base = torch.rand(1, channels, max(2, size // 16), max(2, size // 16), generator=gen)
    img = torch.nn.functional.interpolate(base, size=(size, size), mode="bilinear")
    for _ in range(3):
        x0, y0 = (int(v) for v in torch.randint(0, size * 3 // 4, (2,), generator=gen))
        side = max(2, size // 6)
        img[:, :, y0 : y0 + side, x0 : x0 + side] = 1.0
    return img.float()


def hash_ids(text: str, vocab_size: int, length: int, *, first: int = 1) -> list[int]:
    """Token ids for models built from a config: stable word hashes, padded with 0."""
    import zlib

    words = text.lower().split() or [""]
    ids = [first + zlib.crc32(w.encode()) % (vocab_size - first) for w in words][:length]
    return ids + [0] * (length - len(ids))


def mel_filterbank(n_mels: int, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE) -> Any:
    """Triangular mel filters, float32 [n_mels, n_fft // 2 + 1] (HTK mel scale)."""
    torch = require_torch()

    def mel(f: Any) -> Any:
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    def hz(m: Any) -> Any:
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    edges = hz(torch.linspace(0.0, float(mel(torch.tensor(sample_rate / 2))), n_mels + 2))
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs[None] - lo) / (mid - lo)
    down = (hi - freqs[None]) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0).float()


def log_mel(wave: Any, n_mels: int, device: str) -> Any:
    """Whisper-style log-mel features on ``device``: float32 [n_mels, frames]."""
    torch = require_torch()
    window = torch.hann_window(N_FFT, device=device)
    spec = torch.stft(wave, N_FFT, HOP, window=window, return_complex=True)
    power = spec[..., :-1].abs() ** 2
    mels = mel_filterbank(n_mels).to(device) @ power
    logs = torch.clamp(mels, min=1e-10).log10()
    logs = torch.maximum(logs, logs.max() - 8.0)
    return (logs + 4.0) / 4.0
