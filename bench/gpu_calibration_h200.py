"""Prepared GPU measurement for the H200 calibration table (issue 2), for a session lent a GPU machine.

Measures, with PyTorch on the local GPU, the same linear ops as configs/validation/gpu_calibration.yaml
(Llama-2-7B TP1 and Llama-2-70B TP4 per-GPU shapes, fp16, 1 to 4,096 tokens) and a decode-attention
kernel (torch.nn.functional.scaled_dot_product_attention, batch x 1 query token over a KV cache) at the
same token counts, and writes a YAML table in the golden-table format with the date, GPU name and
software versions. Median of `--repeats` CUDA-event-timed runs after warm-up.

    python bench/gpu_calibration_h200.py --out $OUT/h200_calibration.yaml

Not run yet: no GPU machine was lent to the session that wrote it. It needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys

SHAPES = {  # per-GPU [K, N] as in configs/validation/gpu_calibration.yaml (vidur tables)
    ("Llama-2-7B", 1): {"qkv": (4096, 12288), "out": (4096, 4096), "up": (4096, 22016), "down": (11008, 4096)},
    ("Llama-2-70B", 4): {"qkv": (8192, 2560), "out": (2048, 8192), "up": (8192, 14336), "down": (7168, 8192)},
}
TOKENS = (1, 8, 32, 64, 128, 256, 512, 1024, 4096)


def timed(fn, repeats: int) -> float:
    """Median time in microseconds of ``fn`` over ``repeats`` CUDA-event-timed calls."""
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args(argv)
    import torch
    import yaml

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    dt = torch.float16
    tables = []
    for (model, tp), shapes in SHAPES.items():
        us = {}
        for t in TOKENS:
            row = []
            for op, (k, n) in shapes.items():
                x = torch.randn(t, k, device=dev, dtype=dt)
                w = torch.randn(k, n, device=dev, dtype=dt)
                row.append(round(timed(lambda: torch.matmul(x, w), args.repeats), 2))
            us[t] = {"h200": row}
        tables.append({"model": model, "tp": tp, "shapes": {op: list(s) for op, s in shapes.items()}, "us": us})
    attention = {}
    heads, kv_heads, head_dim, ctx = 64 // 8, 8 // 8, 128, 4096  # Llama-2-70B per TP-8 rank (GQA 8:1)
    for b in TOKENS:
        q = torch.randn(b, heads, 1, head_dim, device=dev, dtype=dt)
        k = torch.randn(b, kv_heads, ctx, head_dim, device=dev, dtype=dt).expand(b, heads, ctx, head_dim)
        v = torch.randn(b, kv_heads, ctx, head_dim, device=dev, dtype=dt).expand(b, heads, ctx, head_dim)
        attention[b] = round(timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), args.repeats), 2)
    doc = {
        "source": f"measured with bench/gpu_calibration_h200.py on {torch.cuda.get_device_name(0)}",
        "date": datetime.date.today().isoformat(),
        "software": {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()},
        "vidur_shapes": {"tables": tables},
        "decode_attention_us": {
            "note": "SDPA, 1 query token, 8 heads / 1 KV head (Llama-2-70B TP8), 4096-token KV, key = batch",
            "us": attention,
        },
    }
    with open(args.out, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
