#!/usr/bin/env python3
"""Times ExecuTorch 1.5.1's portable `mean.out` on the means that the bench sweep's "before"
programs (`Main`) leave outside the delegate, so the bench summary can say how far our
portable mean (what every before/after ratio divides by) is from ExecuTorch's.

Not part of CI (it needs torch). Environment, once:

    python3 -m venv /tmp/etvenv
    /tmp/etvenv/bin/pip install executorch==1.5.1   # pulls a matching torch (CPU wheels:
                                                    #  --extra-index-url https://download.pytorch.org/whl/cpu)

Run (writes reports/executorch-portable.csv, which `harness bench` reads into its summary):

    nice -n 10 /tmp/etvenv/bin/python scripts/time-executorch-portable.py [--out reports/executorch-portable.csv]

Each program is `x.mean(dims, keepdim=True)` exported with no partitioner (every op on the
portable kernels) and run through the pybindings (`_load_for_executorch_from_buffer`,
`forward`). The figure is the median of `--runs` calls after a warm-up; `call_ns` is the median
of the same call on a one-element mean, the pybindings' own cost, subtracted in `net_ns`.

The list mirrors the Main means of harness/src/programs.rs (`bench` family): each mean's input
shape, reduced dims and dtype (the qs8 programs take their mean on dequantized fp32 values).
"""
import argparse
import csv
import os
import platform
import statistics
import subprocess
import time

import torch
from executorch.exir import to_edge
from executorch.extension.pybindings import portable_lib as pl

RMSNORM_SHAPES = ["1x1x128", "1x8x64", "1x8x128", "1x16x256", "1x32x128", "1x32x512",
                  "1x64x512", "1x128x128", "1x32x2048", "1x128x2048"]
MEAN_SHAPES = ["1x128x128", "1x128x2048"]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "qs8": torch.float32}


def scenarios():
    """(scenario, shape label, dtype label, mean input shape, dims)."""
    out = []
    for dt in ["fp32"]:
        out += [("rmsnorm", s, dt, s, [-1]) for s in RMSNORM_SHAPES]
        out += [("mean_last", s, dt, s, [-1]) for s in MEAN_SHAPES]
    out += [("rmsnorm_linear", "1x32x512", "fp32", "1x32x512", [-1]),
            ("mlp4_decode", "1x1x512", "fp32", "1x1x512", [-1]),
            ("mlp4_prefill", "1x64x512", "fp32", "1x64x512", [-1])]
    for sc in ["conv_mean_c", "conv_mean_conv", "conv_sub_mean"]:
        out.append((sc, "1x96x56x56", "fp32", "1x96x56x56", [1]))
    out += [("qknorm", "8x64", "fp32", "1x1x8x64", [-1]), ("qknorm", "16x128", "fp32", "1x1x16x128", [-1])]
    for dt in ["fp16", "bf16", "qs8"]:
        out += [("rmsnorm", s, dt, s, [-1]) for s in RMSNORM_SHAPES]
        out += [("mean_last", s, dt, s, [-1]) for s in MEAN_SHAPES]
    return out


class Mean(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.mean(self.dims, keepdim=True)


def load(dims, x):
    ep = torch.export.export(Mean(dims), (x,))
    buf = to_edge(ep).to_executorch().buffer
    # The module reads the program from `buf`: keep the bytes alive as long as the module.
    return pl._load_for_executorch_from_buffer(buf), buf


def median_ns(m, x, runs, budget_s):
    for _ in range(10):
        m.forward([x])
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < runs and (len(times) < 20 or time.perf_counter() < deadline):
        t0 = time.perf_counter_ns()
        m.forward([x])
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times), len(times)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="reports/executorch-portable.csv")
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per program at most (>= 20 runs)")
    a = ap.parse_args()
    torch.manual_seed(1)
    torch.set_num_threads(1)
    one = torch.rand(1, 1, 1)
    m1, b1 = load([-1], one)
    call_ns, _ = median_ns(m1, one, 2000, 1.0)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "unknown"
    rows = []
    for sc, shape, dt, mshape, dims in scenarios():
        x = torch.rand(*[int(d) for d in mshape.split("x")]).to(DTYPES[dt])
        m, buf = load(dims, x)
        want = x.mean(dims, keepdim=True)
        got = m.forward([x])[0]
        err = float((got.float() - want.float()).abs().max())
        med, n = median_ns(m, x, a.runs, a.budget)
        rows.append({"scenario": sc, "shape": shape, "dtype": dt, "mean_shape": mshape,
                     "mean_dims": " ".join(map(str, dims)), "mean_dtype": str(DTYPES[dt]).replace("torch.", ""),
                     "et_median_ns": round(med), "call_ns": round(call_ns), "net_ns": round(max(med - call_ns, 0)),
                     "runs": n, "max_abs_err": f"{err:.3g}", "executorch": "1.5.1 portable (pybindings)",
                     "cpu": cpu_model(), "commit": commit,
                     "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        print(f"{sc:15} {shape:11} {dt:5} mean{dims} of {mshape}: {med/1000:9.1f} us ({n} runs, err {err:.2g})", flush=True)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {a.out} ({len(rows)} programs; pybindings call {call_ns/1000:.2f} us)")


if __name__ == "__main__":
    main()
