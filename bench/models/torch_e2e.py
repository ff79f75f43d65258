"""The networks of bench/models/generated.txt in PyTorch on the same GPU, for the latency that
Bolt's artifacts are compared with (run.sh calls it after the Bolt runs):

    python3 torch_e2e.py --models resnet50:32:f16,bert_base:32:f16,resnet50:32:tf32 --out torch_e2e.json
                         [--compile-modes default,max-autotune] [--deadline-s 150]

Each network at batch 1 and at the given batch: eager (f16: .half(), convolutional nets in
channels_last; tf32: f32 with TF32 matmuls and convs allowed), then torch.compile in each mode
while the deadline allows (the compile's seconds are recorded; later steps are marked skipped,
not dropped). Timing: CUDA events around each call after warm-up, median and spread of the
repeats. The weights are random (PyTorch's own init): latency does not depend on their values.

The networks: torchvision's resnet50 and mobilenet_v2 (the architectures tests/python/
make_models.py writes as ONNX), and BERT-base's encoder (12 layers, 768 hidden, 12 heads,
3072 intermediate, additive attention mask on hidden states: what make_models.py's bert_base
computes) written with nn.Linear, scaled_dot_product_attention, LayerNorm and GELU. The result
file is written after every measurement, so a run stopped by its timeout keeps what it did."""
import argparse
import json
import statistics
import time


def build(name, batch, precision, torch):
    nn, F = torch.nn, torch.nn.functional
    dtype = torch.float16 if precision == "f16" else torch.float32
    if name in ("resnet50", "mobilenet_v2"):
        import torchvision
        m = getattr(torchvision.models, name)(weights=None).cuda().to(dtype).eval()
        m = m.to(memory_format=torch.channels_last)
        x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
        return m, (x,)
    if name == "bert_base":
        class Layer(nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv, self.out = nn.Linear(768, 3 * 768), nn.Linear(768, 768)
                self.ffn1, self.ffn2 = nn.Linear(768, 3072), nn.Linear(3072, 768)
                self.ln1, self.ln2 = nn.LayerNorm(768), nn.LayerNorm(768)

            def forward(self, x, mask):
                b, s, _ = x.shape
                q, k, v = self.qkv(x).view(b, s, 3, 12, 64).permute(2, 0, 3, 1, 4)
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, s, 768)
                x = self.ln1(x + self.out(a))
                return self.ln2(x + self.ffn2(F.gelu(self.ffn1(x))))

        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(Layer() for _ in range(12))

            def forward(self, x, mask):
                for layer in self.layers:
                    x = layer(x, mask)
                return x

        m = Encoder().cuda().to(dtype).eval()
        x = torch.randn(batch, 128, 768, device="cuda", dtype=dtype)
        mask = torch.zeros(batch, 1, 1, 128, device="cuda", dtype=dtype)
        mask[..., 112:] = -10000.0  # 16 padded tokens, as the ONNX model's first data set
        return m, (x, mask)
    raise SystemExit(f"torch_e2e: unknown network {name!r} (resnet50, mobilenet_v2, bert_base)")


def timed(fn, torch, warmup=10, repeats=50):
    with torch.no_grad():
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        ms = []
        for _ in range(repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
    q = statistics.quantiles(ms, n=10)
    return {"median_ms": statistics.median(ms), "p10_ms": q[0], "p90_ms": q[-1], "repeats": repeats, "warmup": warmup}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="NAME:BATCH:PRECISION,... (batch 1 is always timed too)")
    ap.add_argument("--compile-modes", default="default,max-autotune")
    ap.add_argument("--deadline-s", type=float, default=150.0, help="no new torch.compile after this many seconds")
    ap.add_argument("--out", required=True)
    o = ap.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    start = time.monotonic()
    result = {"schema": "bolt-torch-e2e-v1", "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
              "cudnn": torch.backends.cudnn.version(), "records": []}

    def save():
        with open(o.out, "w") as f:
            json.dump(result, f, indent=1)

    nets = []
    for item in o.models.split(","):
        name, batch, precision = (item.split(":") + ["1", "f16"])[:3]
        if (name, batch, precision) not in [(n, str(bs[-1]), p) for n, bs, p in nets]:
            nets.append((name, sorted({1, int(batch)}), precision))
    # Eager first (seconds), then each compile mode, the larger batch first, while time allows.
    plan = [(n, b, p, "eager") for n, bs, p in nets for b in bs]
    plan += [(n, b, p, mode) for mode in o.compile_modes.split(",") for n, bs, p in nets for b in bs[::-1]]
    for name, batch, precision, mode in plan:
        rec = {"model": name, "batch": batch, "precision": precision, "mode": mode}
        result["records"].append(rec)
        if mode != "eager" and time.monotonic() - start > o.deadline_s:
            rec.update(status="skipped", reason=f"deadline: {o.deadline_s:.0f} s of this run spent")
            save()
            continue
        try:
            torch.manual_seed(0)
            torch._dynamo.reset()
            m, args = build(name, batch, precision, torch)
            fn = (lambda: m(*args)) if mode == "eager" else None
            if fn is None:
                cm = torch.compile(m, mode=mode)
                t0 = time.monotonic()
                with torch.no_grad():
                    cm(*args)
                torch.cuda.synchronize()
                rec["compile_s"] = time.monotonic() - t0
                fn = lambda: cm(*args)  # noqa: E731
            rec.update(timed(fn, torch), status="ok")
        except Exception as e:  # noqa: BLE001 - one network failing is a result; the rest still run
            rec.update(status="error", reason=f"{type(e).__name__}: {e}"[:500])
        print(json.dumps(rec), flush=True)
        save()
    save()


if __name__ == "__main__":
    main()
