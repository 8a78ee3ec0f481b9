"""Vision tools: detection, captioning, CLIP matching, classification, OCR, image generation.

Images are synthesised from a seed (`signals.image`); models are transformers architectures
built from a config (DETR, ViT+GPT-2, CLIP, ResNet) or small torch modules (a CRNN for OCR, a
UNet denoiser), all with seeded random weights: outputs are checkable for shape and range, not
for meaning.

>>> [t.name for t in tools("small")]  # doctest: +NORMALIZE_WHITESPACE
['detect_objects', 'caption_image', 'match_image_text', 'classify_image', 'read_text',
 'generate_image']
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
    generator,
    require_torch,
    require_transformers,
    suite_model,
)

_IMAGE = {"small": 64, "full": 224}
_DETR_IMAGE = {"small": 128, "full": 640}
_TINY_RESNET = dict(
    embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], layer_type="basic"
)
_TINY_VIT = dict(
    image_size=64, patch_size=16, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=128,
)
_CAPTION_TOKENS = {"small": 4, "full": 8}
_OCR = {"small": (32, 256, 16, 1), "full": (64, 1024, 64, 8)}  # height, width, channels, lines
_UNET = {"small": (32, 16, 4), "full": (128, 48, 12)}  # side, channels, steps
OCR_ALPHABET = "-0123456789abcdefghijklmnopqrstuvwxyz"  # index 0 is the CTC blank
WEIGHTS_MB: dict[str, dict[SuiteSize, float]] = {
    "detr": {"small": 2, "full": 159},
    "captioner": {"small": 2, "full": 913},
    "clip": {"small": 1, "full": 578},
    "resnet": {"small": 2, "full": 98},
    "crnn": {"small": 1, "full": 10},
    "unet": {"small": 1, "full": 2},
}
"""Declared weights per model and size: parameter and buffer bytes, rounded up to the MB."""


def vision_model(name: str, size: SuiteSize) -> ResidentModel[Any]:
    """The resident model ``name`` (a key of `WEIGHTS_MB`) of a vision tool at ``size``."""
    build = _BUILDERS[name]
    return suite_model(f"{name}:{size}", lambda: build(size), WEIGHTS_MB[name][size])


def _detr(size: SuiteSize) -> Any:
    tf = require_transformers()
    if size == "small":
        backbone = tf.ResNetConfig(**_TINY_RESNET, out_features=["stage4"])
        dims = dict(
            d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=10,
        )
    else:
        backbone = tf.ResNetConfig(out_features=["stage4"])  # ResNet-50
        dims = {}
    cfg = tf.DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone,
        num_labels=91, **dims,
    )
    return tf.DetrForObjectDetection(cfg)


def detect(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """DETR: class probabilities and boxes per query; reports the three most confident."""
    torch = require_torch()
    model = vision_model("detr", size).get(device)
    img = signals.image(seed, _DETR_IMAGE[size])
    with torch.inference_mode():
        out = model(pixel_values=to_device(img, device))
        probs = out.logits.softmax(-1)[0, :, :-1]  # drop "no object"
        score, label = probs.max(-1)
        best = score.argsort(descending=True)[:3]
        boxes = out.pred_boxes[0]
        top = [
            {"label": int(label[i]), "score": round(float(score[i]), 4),
             "box": [round(float(v), 3) for v in boxes[i]]}
            for i in best
        ]
        inside = bool(((boxes >= 0) & (boxes <= 1)).all())
    return {"queries": int(boxes.shape[0]), "boxes_in_unit_square": inside, "top": top}


def _captioner(size: SuiteSize) -> Any:
    tf = require_transformers()
    ids = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if size == "small":
        vit = tf.ViTConfig(**_TINY_VIT)
        gpt = tf.GPT2Config(
            vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=2, **ids
        )
    else:
        vit, gpt = tf.ViTConfig(), tf.GPT2Config(**ids)  # ViT-base/16 + GPT-2 small
    cfg = tf.VisionEncoderDecoderConfig.from_encoder_decoder_configs(vit, gpt)
    return tf.VisionEncoderDecoderModel(config=cfg)


def caption(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """ViT encoder + GPT-2 decoder, greedy decoding of a few tokens."""
    torch = require_torch()
    model = vision_model("captioner", size).get(device)
    img = signals.image(seed, _IMAGE[size])
    with torch.inference_mode():
        encoded = model.encoder(pixel_values=to_device(img, device)).last_hidden_state
        ids = torch.ones((1, 1), dtype=torch.long, device=device)
        for _ in range(_CAPTION_TOKENS[size]):
            logits = model.decoder(
                input_ids=ids, encoder_hidden_states=encoded, use_cache=False
            ).logits
            ids = torch.cat([ids, logits[:, -1:].argmax(-1)], dim=1)
    return {"tokens": ids[0, 1:].tolist()}


def _clip(size: SuiteSize) -> Any:
    tf = require_transformers()
    if size == "full":
        return tf.CLIPModel(tf.CLIPConfig())  # ViT-B/32 dimensions
    text = dict(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=32, bos_token_id=998, eos_token_id=999,
        pad_token_id=0,
    )
    return tf.CLIPModel(tf.CLIPConfig(text_config=text, vision_config=_TINY_VIT, projection_dim=32))


def clip_match(seed: int, labels: list[str], size: SuiteSize, device: str) -> dict[str, Any]:
    """Zero-shot CLIP: softmax over the labels for the synthetic image."""
    torch = require_torch()
    model = vision_model("clip", size).get(device)
    vocab = model.config.text_config.vocab_size
    labels = labels or [""]
    bos, eos = model.config.text_config.bos_token_id, model.config.text_config.eos_token_id
    # CLIP pools the text at the first end-of-text token
    ids = torch.tensor([[bos, *signals.hash_ids(x, vocab - 3, 14, first=3), eos] for x in labels])
    img = signals.image(seed, model.config.vision_config.image_size)
    with torch.inference_mode():
        out = model(input_ids=to_device(ids, device), pixel_values=to_device(img, device))
        probs = out.logits_per_image.softmax(-1)[0]
    best = int(probs.argmax())
    return {"best": labels[best], "probs": [round(float(p), 4) for p in probs]}


def _resnet(size: SuiteSize) -> Any:
    tf = require_transformers()
    cfg = tf.ResNetConfig(num_labels=1000) if size == "full" else tf.ResNetConfig(
        **_TINY_RESNET, num_labels=10
    )
    return tf.ResNetForImageClassification(cfg)


def classify(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """ResNet image classification (ResNet-50 at full size): the five best classes."""
    torch = require_torch()
    model = vision_model("resnet", size).get(device)
    img = signals.image(seed, _IMAGE[size])
    with torch.inference_mode():
        probs = model(pixel_values=to_device(img, device)).logits.softmax(-1)[0]
        top = probs.topk(5)
    return {
        "classes": int(probs.shape[0]),
        "top5": top.indices.tolist(),
        "top5_probs": [round(float(p), 4) for p in top.values],
    }


def _crnn(size: SuiteSize) -> Any:
    torch = require_torch()
    nn = torch.nn
    height, _, ch, _ = _OCR[size]

    class CRNN(nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(1, ch, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(ch, 2 * ch, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(2 * ch, 2 * ch, 3, padding=1), nn.ReLU(),
            )
            self.rnn = nn.LSTM(2 * ch * (height // 4), 2 * ch, bidirectional=True, batch_first=True)
            self.head = nn.Linear(4 * ch, len(OCR_ALPHABET))

        def forward(self, x: Any) -> Any:
            f = self.conv(x)  # [B, C, H/4, W/4]
            f = f.permute(0, 3, 1, 2).flatten(2)  # [B, W/4, C*H/4]
            return self.head(self.rnn(f)[0])  # [B, W/4, classes]

    return CRNN()


def ocr(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """CRNN (conv + BiLSTM) with greedy CTC decoding of synthetic text-line images."""
    torch = require_torch()
    height, width, _, lines = _OCR[size]
    model = vision_model("crnn", size).get(device)
    gen = generator(seed)
    # glyph-like strokes: random vertical bars on a light background
    bars = (torch.rand(lines, 1, 1, width // 4, generator=gen) > 0.6).float()
    img = 1.0 - 0.8 * bars.repeat_interleave(4, dim=-1).expand(lines, 1, height, width)
    with torch.inference_mode():
        best = model(to_device(img.contiguous(), device)).argmax(-1).cpu()  # [lines, steps]
    texts = []
    for row in best.tolist():
        chars = [c for i, c in enumerate(row) if c != 0 and (i == 0 or c != row[i - 1])]
        texts.append("".join(OCR_ALPHABET[c] for c in chars))
    return {"lines": lines, "steps": int(best.shape[1]), "text": texts[0][:40]}


def _unet(size: SuiteSize) -> Any:
    torch = require_torch()
    nn = torch.nn
    _, ch, _ = _UNET[size]

    def block(cin: int, cout: int) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.SiLU(),
            nn.Conv2d(cout, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.SiLU(),
        )

    class UNet(nn.Module):  # type: ignore[name-defined]
        """A two-level UNet predicting the noise, conditioned on the step by an embedding."""

        def __init__(self) -> None:
            super().__init__()
            self.time = nn.Sequential(nn.Linear(1, ch), nn.SiLU(), nn.Linear(ch, ch))
            self.inp = nn.Conv2d(3, ch, 3, padding=1)
            self.down1, self.down2 = block(ch, ch), block(ch, 2 * ch)
            self.mid = block(2 * ch, 2 * ch)
            self.up2, self.up1 = block(4 * ch, ch), block(2 * ch, ch)
            self.out = nn.Conv2d(ch, 3, 3, padding=1)
            self.pool, self.upsample = nn.AvgPool2d(2), nn.Upsample(scale_factor=2)

        def forward(self, x: Any, t: Any) -> Any:
            h0 = self.inp(x) + self.time(t.view(1, 1))[:, :, None, None]
            h1 = self.down1(h0)
            h2 = self.down2(self.pool(h1))
            m = self.mid(self.pool(h2))
            u2 = self.up2(torch.cat([self.upsample(m), h2], 1))
            u1 = self.up1(torch.cat([self.upsample(u2), h1], 1))
            return self.out(u1) * 0.1

    return UNet()


def generate(seed: int, size: SuiteSize, device: str) -> dict[str, Any]:
    """DDIM-style sampling: start from seeded noise, subtract the predicted noise each step."""
    torch = require_torch()
    side, _, steps = _UNET[size]
    model = vision_model("unet", size).get(device)
    x = torch.randn(1, 3, side, side, generator=generator(seed))
    with torch.inference_mode():
        x = to_device(x, device)
        for i in range(steps, 0, -1):
            t = torch.tensor([i / steps], device=device)
            alpha = 1.0 - 0.5 * i / steps
            x = (x - (1 - alpha) * model(x, t)) / alpha**0.5
        img = ((x.clamp(-1, 1) + 1) / 2).cpu()
    return {
        "shape": list(img.shape[1:]),
        "steps": steps,
        "mean": round(float(img.mean()), 4),
        "checksum": checksum(img),
    }


_BUILDERS = {
    "detr": _detr, "captioner": _captioner, "clip": _clip, "resnet": _resnet, "crnn": _crnn,
    "unet": _unet,
}


def tools(size: str = "small") -> list[BaseTool]:
    """The six vision tools at ``size``."""
    sz = check_size(size)
    full = sz == "full"

    @tool
    def detect_objects(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Detect objects in camera frame number `seed`; returns the three best detections."""
        return json.dumps(detect(seed, sz, device))

    @tool
    def caption_image(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Caption image number `seed`; returns the generated token ids."""
        return json.dumps(caption(seed, sz, device))

    @tool
    def match_image_text(
        seed: int, labels: list[str], device: Annotated[str, InjectedDevice] = "cpu"
    ) -> str:
        """Say which label best describes image number `seed` (CLIP zero-shot)."""
        return json.dumps(clip_match(seed, labels, sz, device))

    @tool
    def classify_image(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Classify image number `seed`; returns the five most likely class ids."""
        return json.dumps(classify(seed, sz, device))

    @tool
    def read_text(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Read the text in scanned line image number `seed` (OCR)."""
        return json.dumps(ocr(seed, sz, device))

    @tool
    def generate_image(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Generate an image from noise seed `seed` with a diffusion denoiser."""
        return json.dumps(generate(seed, sz, device))

    labels = ["a dog", "a cat", "a car", "a tree"]
    return [
        finish(detect_objects, example={"seed": 11}, model=vision_model("detr", sz),
               vram_mb=1500 if full else 60, gpu_share=0.7 if full else 0.2),
        finish(caption_image, example={"seed": 12}, model=vision_model("captioner", sz),
               vram_mb=1400 if full else 50, gpu_share=0.6 if full else 0.2),
        finish(match_image_text, example={"seed": 13, "labels": labels},
               model=vision_model("clip", sz),
               vram_mb=1000 if full else 50, gpu_share=0.4 if full else 0.1),
        finish(classify_image, example={"seed": 14}, model=vision_model("resnet", sz),
               vram_mb=500 if full else 40, gpu_share=0.4 if full else 0.1),
        finish(read_text, example={"seed": 15}, model=vision_model("crnn", sz),
               vram_mb=600 if full else 40, gpu_share=0.4 if full else 0.1),
        finish(generate_image, example={"seed": 16}, model=vision_model("unet", sz),
               vram_mb=1200 if full else 50, gpu_share=0.8 if full else 0.2),
    ]
