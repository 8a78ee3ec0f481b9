"""Speech and audio tools: speech-to-text, text-to-speech, pitch, voice activity, spectrogram.

Every tool synthesises its audio from a seed (see `signals.speechlike`), so its arguments stay
small; models are transformers architectures built from a config with seeded random weights.

>>> [t.name for t in tools("small")]  # doctest: +NORMALIZE_WHITESPACE
['transcribe_speech', 'synthesize_speech', 'estimate_pitch', 'detect_voice_activity',
 'audio_spectrogram']
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from langchain_core.tools import BaseTool, tool

from langgraph_devsched.device import InjectedDevice
from langgraph_devsched.models import ResidentModel
from langgraph_devsched.profiling.transfer import to_device
from langgraph_devsched.suite import signals
from langgraph_devsched.suite._common import (
    SuiteSize,
    check_size,
    checksum,
    finish,
    require_torch,
    require_transformers,
    suite_model,
    sync,
)

_WHISPER: dict[str, dict[str, Any]] = {
    "small": dict(
        vocab_size=1000, num_mel_bins=40, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_source_positions=100, max_target_positions=32,
    ),
    # whisper-tiny's real dimensions, 30 s window
    "full": dict(
        vocab_size=51865, num_mel_bins=80, d_model=384, encoder_layers=4, decoder_layers=4,
        encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
        decoder_ffn_dim=1536, max_source_positions=1500, max_target_positions=448,
    ),
}
_WHISPER_TOKENS = {"small": 4, "full": 12}

_VITS: dict[str, dict[str, Any]] = {
    "small": dict(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64,
        flow_size=32, spectrogram_bins=65, upsample_initial_channel=64, upsample_rates=[4, 4],
        upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3]], prior_encoder_num_flows=2,
        posterior_encoder_num_wavenet_layers=2, duration_predictor_num_flows=2,
        duration_predictor_filter_channels=32, depth_separable_num_layers=2,
        prior_encoder_num_wavenet_layers=2,
    ),
    "full": dict(vocab_size=64),  # VitsConfig defaults: the MMS-TTS architecture
}

WEIGHTS_MB: dict[str, dict[SuiteSize, float]] = {
    "whisper": {"small": 1, "full": 145},
    "vits": {"small": 1, "full": 139},
}
"""Declared weights per model and size: parameter and buffer bytes, rounded up to the MB."""

_SECONDS = {
    "pitch": {"small": 2.0, "full": 120.0},
    "vad": {"small": 4.0, "full": 300.0},
    "spectrogram": {"small": 4.0, "full": 300.0},
}


def _whisper(size: SuiteSize) -> Any:
    tf = require_transformers()
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    return tf.WhisperForConditionalGeneration(tf.WhisperConfig(**_WHISPER[size], **ids))


def whisper_model(size: SuiteSize) -> ResidentModel[Any]:
    """The speech-to-text model (`transcribe_speech`)."""
    return suite_model(f"whisper:{size}", lambda: _whisper(size), WEIGHTS_MB["whisper"][size])


def _vits(size: SuiteSize) -> Any:
    tf = require_transformers()
    return tf.VitsModel(tf.VitsConfig(**_VITS[size]))


def vits_model(size: SuiteSize) -> ResidentModel[Any]:
    """The text-to-speech model (`synthesize_speech`)."""
    return suite_model(f"vits:{size}", lambda: _vits(size), WEIGHTS_MB["vits"][size])


def transcribe(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """Log-mel features of a synthetic clip, Whisper encoder, greedy decoding of a few tokens."""
    torch = require_torch()
    model = whisper_model(size).get(device)
    cfg = _WHISPER[size]
    samples = 2 * cfg["max_source_positions"] * signals.HOP
    wave, _, _ = signals.speechlike(seed, samples / signals.SAMPLE_RATE)
    with torch.inference_mode():
        feats = signals.log_mel(to_device(wave, device), cfg["num_mel_bins"], device)[None]
        encoded = model.model.encoder(feats).last_hidden_state
        ids = torch.ones((1, 1), dtype=torch.long, device=device)
        for _ in range(_WHISPER_TOKENS[size]):
            hidden = model.model.decoder(
                input_ids=ids, encoder_hidden_states=encoded, use_cache=False
            ).last_hidden_state
            ids = torch.cat([ids, model.proj_out(hidden[:, -1:]).argmax(-1)], dim=1)
    tokens = ids[0, 1:].tolist()
    return {"frames": int(feats.shape[-1]), "tokens": tokens}


def synthesize(text: str, seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """VITS text-to-speech (characters as ids); the stochastic duration noise uses ``seed``."""
    torch = require_torch()
    model = vits_model(size).get(device)
    vocab = model.config.vocab_size
    ids = torch.tensor([[1 + ord(c) % (vocab - 1) for c in text[:200] or " "]])
    devices = [torch.device(device).index or 0] if device.startswith("cuda") else []
    with torch.inference_mode(), torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        wave = model(input_ids=to_device(ids, device)).waveform[0]
    rate = model.config.sampling_rate
    return {
        "samples": int(wave.shape[0]),
        "seconds": round(wave.shape[0] / rate, 3),
        "peak": round(float(wave.abs().max()), 4),
    }


def pitch(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """Median f0 of the voiced frames by FFT autocorrelation (60..400 Hz search)."""
    torch = require_torch()
    wave, _, _ = signals.speechlike(seed, _SECONDS["pitch"][size])
    sr, frame, hop = signals.SAMPLE_RATE, 1024, 256
    with torch.inference_mode():
        x = to_device(wave, device).unfold(0, frame, hop)
        x = x - x.mean(dim=1, keepdim=True)
        spec = torch.fft.rfft(x, n=2 * frame)
        acf = torch.fft.irfft(spec.real**2 + spec.imag**2)[:, :frame]
        lo, hi = sr // 400, sr // 60
        lag = acf[:, lo:hi].argmax(dim=1) + lo
        # parabolic interpolation around the peak
        rows = torch.arange(acf.shape[0], device=device)
        a, b, c = acf[rows, lag - 1], acf[rows, lag], acf[rows, lag + 1]
        shift = 0.5 * (a - c) / (a - 2 * b + c).clamp(max=-1e-9)
        f0 = sr / (lag.float() + shift)
        energy = x.pow(2).mean(dim=1)
        voiced = energy > 0.1 * energy.max()
        median = float(f0[voiced].median())
    return {
        "frames": int(x.shape[0]), "voiced_frames": int(voiced.sum()), "f0_hz": round(median, 1)
    }


def voice_activity(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """Energy VAD: 25 ms frames every 10 ms, 30 dB below the loudest, 50 ms hangover."""
    torch = require_torch()
    wave, _, _ = signals.speechlike(seed, _SECONDS["vad"][size])
    with torch.inference_mode():
        frames = to_device(wave, device).unfold(0, 400, 160)
        db = 10 * torch.log10(frames.pow(2).mean(dim=1) + 1e-12)
        speech = (db > db.max() - 30).float()
        speech = torch.nn.functional.max_pool1d(speech[None, None], 5, 1, 2)[0, 0] > 0
        starts = int((speech[1:] & ~speech[:-1]).sum()) + int(speech[0])
        fraction = float(speech.float().mean())
    return {
        "frames": int(speech.shape[0]), "speech_fraction": round(fraction, 3), "segments": starts
    }


def spectrogram(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """80-bin log-mel spectrogram; reports its shape, checksum and loudest mel bin."""
    torch = require_torch()
    wave, _, _ = signals.speechlike(seed, _SECONDS["spectrogram"][size])
    with torch.inference_mode():
        mels = signals.log_mel(to_device(wave, device), 80, device)
        loudest = int(mels.mean(dim=1).argmax())
        total = checksum(mels)
    return {"shape": list(mels.shape), "checksum": total, "loudest_mel_bin": loudest}


def tools(size: str = "small") -> list[BaseTool]:
    """The five speech/audio tools at ``size``."""
    sz = check_size(size)
    full = sz == "full"

    @tool
    def transcribe_speech(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Transcribe the synthetic speech clip number `seed`; returns the decoded token ids."""
        out = transcribe(seed, sz, device)
        sync(device)
        return json.dumps(out)

    @tool
    def synthesize_speech(
        text: str, seed: int = 0, device: Annotated[str, InjectedDevice] = "cpu"
    ) -> str:
        """Speak `text` aloud (text-to-speech); returns the clip's length and peak level."""
        return json.dumps(synthesize(text, seed, sz, device))

    @tool
    def estimate_pitch(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Estimate the pitch (f0, Hz) of the synthetic voice recording number `seed`."""
        return json.dumps(pitch(seed, sz, device))

    @tool
    def detect_voice_activity(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Find where speech is present in recording number `seed` (voice activity)."""
        return json.dumps(voice_activity(seed, sz, device))

    @tool
    def audio_spectrogram(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Compute the log-mel spectrogram of recording number `seed`; returns a summary."""
        return json.dumps(spectrogram(seed, sz, device))

    return [
        finish(transcribe_speech, example={"seed": 7}, model=whisper_model(sz),
               vram_mb=600 if full else 60, gpu_share=0.5 if full else 0.2),
        finish(synthesize_speech, example={"text": "the quick brown fox jumps", "seed": 1},
               model=vits_model(sz),
               vram_mb=900 if full else 60, gpu_share=0.5 if full else 0.2),
        finish(estimate_pitch, example={"seed": 3},
               vram_mb=400 if full else 40, gpu_share=0.3 if full else 0.1),
        finish(detect_voice_activity, example={"seed": 4},
               vram_mb=300 if full else 40, gpu_share=0.2 if full else 0.1),
        finish(audio_spectrogram, example={"seed": 5},
               vram_mb=900 if full else 50, gpu_share=0.4 if full else 0.1),
    ]
