#!/usr/bin/env python3
"""Writes int8 mean cases the way a PyTorch user gets them: inputs quantized by
`torch.quantize_per_tensor` with a `MinMaxObserver`'s scale and zero point (qint8,
per-tensor affine), the mean of their dequantization, and its output quantized with the
observer's parameters for that output. Each case carries its own int8 input tensor with its
scale and zero point (`inputs`, `qparams`: see the case format in README.md), preceded by a
`// torch:` comment line with torch's own int8 output (`int_repr`), which
`harness/tests/torch_int8.rs` compares with the reference under the tie rule.

    /tmp/etvenv/bin/python scripts/torch-int8-cases.py > corpora/seeds/torch_int8.jsonl

Deterministic (fixed seed): rerunning it gives the same file.
"""
import json
import sys

import torch
from torch.ao.quantization.observer import MinMaxObserver


def observe(t):
    obs = MinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_affine)
    obs(t)
    scale, zp = obs.calculate_qparams()
    return float(scale.item()), int(zp.item())


def f32_repr(x):
    # The shortest decimal that reads back as the same f32 (JSON readers parse to f64,
    # and the harness rounds that to f32 once).
    for digits in range(6, 18):
        s = "%.*g" % (digits, x)
        if torch.tensor(float(s), dtype=torch.float32).item() == x:
            return float(s)
    return x


def main():
    g = torch.Generator().manual_seed(20261202)
    shapes = [
        ([2, 3, 4], [-1], True), ([4, 16], [1], False), ([1, 8, 5, 5], [2, 3], True),
        ([3, 7], [0], False), ([2, 3, 4, 5], [1], True), ([6, 10], [], False),
        ([1, 3, 8, 8], [-1, -2], True), ([5, 9], [-1], True), ([2, 2, 33], [2], False),
        ([8, 3, 3], [0, 2], True), ([1, 16, 4, 4], [1], False), ([7], [0], True),
        ([2, 5, 6], [1, 2], False), ([3, 4, 4, 2], [0], True), ([1, 64], [1], True),
        ([4, 4, 4], [], True), ([2, 3, 6, 6], [3], False), ([9, 11], [1], False),
        ([1, 2, 3, 4, 5], [-1, 1], True), ([10, 3], [0, 1], False),
    ]
    print("// 20 int8 mean cases from PyTorch %s quantizers (scripts/torch-int8-cases.py);" % torch.__version__)
    print("// each `// torch:` line is torch's int8 output of the case after it.")
    for i, (shape, dims, keepdim) in enumerate(shapes):
        # Offsets and spreads of real activations: not centered, not a power of two wide.
        spread = 0.25 + 4.0 * torch.rand(1, generator=g).item()
        offset = (torch.rand(1, generator=g).item() - 0.3) * spread
        x = torch.randn(shape, generator=g) * spread + offset
        s_in, zp_in = observe(x)
        xq = torch.quantize_per_tensor(x, s_in, zp_in, torch.qint8)
        y = xq.dequantize().mean(dim=dims if dims else list(range(len(shape))), keepdim=keepdim)
        s_out, zp_out = observe(y)
        yq = torch.quantize_per_tensor(y, s_out, zp_out, torch.qint8)
        case = {
            "pattern": "mean",
            "shape": shape,
            "dims": dims,
            "keepdim": keepdim,
            "dtype": "qs8",
            "seed": i + 1,
            "qparams": {
                "input": {"scale": f32_repr(s_in), "zero_point": zp_in},
                "output": {"scale": f32_repr(s_out), "zero_point": zp_out},
            },
            "inputs": [{
                "shape": shape,
                "dtype": "qs8",
                "quant": {"scale": f32_repr(s_in), "zero_point": zp_in},
                "values": xq.int_repr().flatten().tolist(),
            }],
        }
        if not keepdim:
            del case["keepdim"]
        print("// torch: " + json.dumps(yq.int_repr().flatten().tolist(), separators=(",", ":")))
        print(json.dumps(case, separators=(",", ":")))


if __name__ == "__main__":
    sys.exit(main())
