//! Quick, load-robust throughput check (no criterion): each case runs many times and prints
//! the minimum and median time per call and the GB/s at the minimum. The minimum is the
//! uninterrupted run, which is what matters on a shared 2-core machine; criterion's numbers
//! (`runtime_kernels`, `runtime_rmsnorm`) are the reference when the machine is quiet.
//!
//! `cargo bench -p delegate --bench runtime_quick [-- FILTER]`

use delegate::runtime::kernels::{convert, gap, mean, transpose, Ctx, Scratch, View, ViewMut};
use delegate::runtime::pool::Pool;
use delegate::runtime::simd::Isa;
use delegate::runtime::{Program, RunOptions, SimdLevel, ThreadPolicy};
use delegate::{lower, LoweringMode};
use half::f16;
use reference::data::{generate, DataOptions};
use reference::graph::{GraphBuilder, TensorSpec};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn data(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i % 1013) as f32) * 0.001 - 0.5).collect()
}

/// (min, median) seconds per call of `f`, over about `budget` of calls.
fn time(budget: Duration, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..3 {
        f();
    }
    let mut v = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget || v.len() < 20 {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64());
    }
    v.sort_by(|a, b| a.total_cmp(b));
    (v[0], v[v.len() / 2])
}

fn report(name: &str, bytes: usize, (min, med): (f64, f64)) {
    println!(
        "{name:58} min {:>10.2} us  median {:>10.2} us  {:>7.1} GB/s at min",
        min * 1e6,
        med * 1e6,
        bytes as f64 / min / 1e9
    );
}

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-')).unwrap_or_default();
    let run = |name: &str| name.contains(&filter);
    let isa = Isa::best();
    println!("isa {}", isa.name());
    let budget = Duration::from_millis(600);
    let pools: Vec<Pool> = [1, 2].into_iter().map(|t| Pool::new(t, ThreadPolicy::CostModel).unwrap()).collect();
    // Rooflines: a whole-tensor mean is a pure streaming read, so "mean all" at the same
    // footprint is the read rate the other means are held to; 256 KiB fits one core's L2
    // (512 KiB on this machine), 1 MiB does not and streams from L3.
    let means: [(&str, &[usize], &[usize]); 9] = [
        ("mean last_dim 1x32x2048 (256 KiB, L2-resident)", &[1, 32, 2048], &[2]),
        ("mean all 64Ki (256 KiB, L2 read roofline)", &[1 << 16], &[0]),
        ("mean last_dim 1x128x2048", &[1, 128, 2048], &[2]),
        ("mean all 256Ki (1 MiB, read roofline)", &[1 << 18], &[0]),
        ("mean last_dim 8192x2048 (64 MiB)", &[8192, 2048], &[1]),
        ("mean all 16Mi (64 MiB)", &[16 << 20], &[0]),
        ("mean innermost 8x4096x64 dim 2", &[8, 4096, 64], &[2]),
        ("mean strided 8x4096x64 dim 1", &[8, 4096, 64], &[1]),
        ("mean 8x4096x64 dims [0,2]", &[8, 4096, 64], &[0, 2]),
    ];
    for (name, shape, axes) in means {
        if !run(name) {
            continue;
        }
        let x = data(shape.iter().product());
        let mut out = vec![0f32; mean::normalize(shape, axes).outputs];
        for pool in &pools {
            let ctx = Ctx { isa, pool };
            let t = time(budget, || mean::mean_f32(&ctx, black_box(&x), shape, axes, &mut out).unwrap());
            report(&format!("{name} t{}", pool.threads()), x.len() * 4, t);
        }
    }
    for shape in [[1usize, 56, 56, 96], [8, 28, 28, 256]] {
        let name = format!("gap nhwc {shape:?}");
        if !run(&name) {
            continue;
        }
        let x = data(shape.iter().product());
        let mut out = vec![0f32; shape[0] * shape[3]];
        let mut s = Scratch::default();
        for pool in &pools {
            let ctx = Ctx { isa, pool };
            let t = time(budget, || {
                gap::gap_nhwc(&ctx, View::F32(&x), &shape, ViewMut::F32(&mut out), None, &mut s).unwrap()
            });
            report(&format!("{name} t{}", pool.threads()), x.len() * 4, t);
        }
    }
    let tcases: [(&str, &[usize], &[usize]); 4] = [
        ("transpose nchw->nhwc 1x96x56x56", &[1, 96, 56, 56], &[0, 2, 3, 1]),
        ("transpose nhwc->nchw 1x56x56x96", &[1, 56, 56, 96], &[0, 3, 1, 2]),
        ("transpose nchw->nhwc 4x256x64x64", &[4, 256, 64, 64], &[0, 2, 3, 1]),
        ("transpose 64x128x96 perm [2,0,1]", &[64, 128, 96], &[2, 0, 1]),
    ];
    for (name, shape, perm) in tcases {
        if !run(name) {
            continue;
        }
        let n: usize = shape.iter().product();
        let x = data(n);
        let mut out = vec![0f32; n];
        let id: Vec<usize> = (0..shape.len()).collect();
        for pool in &pools {
            let ctx = Ctx { isa, pool };
            let t = time(budget, || {
                transpose::transpose(&ctx, View::F32(&x), shape, perm, ViewMut::F32(&mut out)).unwrap()
            });
            report(&format!("{name} t{}", pool.threads()), n * 8, t);
            let t =
                time(budget, || transpose::transpose(&ctx, View::F32(&x), shape, &id, ViewMut::F32(&mut out)).unwrap());
            report(&format!("  (copy of the same bytes) t{}", pool.threads()), n * 8, t);
        }
    }
    if run("convert") {
        let n = 1 << 20;
        let x = data(n);
        let mut oh = vec![f16::ZERO; n];
        let mut ob = vec![half::bf16::ZERO; n];
        for pool in &pools {
            let ctx = Ctx { isa, pool };
            let t = time(budget, || convert::convert(&ctx, View::F32(&x), ViewMut::F16(&mut oh), None).unwrap());
            report(&format!("convert f32->f16 1Mi t{}", pool.threads()), n * 6, t);
            let t = time(budget, || convert::convert(&ctx, View::F32(&x), ViewMut::Bf16(&mut ob), None).unwrap());
            report(&format!("convert f32->bf16 1Mi t{}", pool.threads()), n * 6, t);
        }
    }
    if run("serialize") {
        // The loader and the writer on ExecuTorch 1.5.1's own payloads (every `.xnn` fixture).
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/executorch-1.5.1");
        let mut files: Vec<_> =
            std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
        files.retain(|p| p.extension().is_some_and(|e| e == "xnn"));
        files.sort();
        for path in files {
            let Ok(bytes) = std::fs::read(&path) else { continue };
            let name = path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
            // Payloads whose weights live in the .pte's named data load only leniently.
            let (limits, graph) = match delegate::serialize::load(&bytes, &delegate::serialize::LoadLimits::default()) {
                Ok(g) => (delegate::serialize::LoadLimits::default(), g),
                Err(_) => match delegate::serialize::load(&bytes, &delegate::serialize::LoadLimits::lenient()) {
                    Ok(g) => (delegate::serialize::LoadLimits::lenient(), g),
                    Err(e) => {
                        println!("{name}: not timed: {e}");
                        continue;
                    }
                },
            };
            let t = time(budget / 2, || {
                black_box(delegate::serialize::load(black_box(&bytes), &limits).unwrap());
            });
            report(&format!("load {name} ({} bytes)", bytes.len()), bytes.len(), t);
            let t = time(budget / 2, || {
                black_box(delegate::serialize::write(black_box(&graph)));
            });
            report(&format!("write {name}"), bytes.len(), t);
        }
    }
    if run("inline") {
        // The CostModel inline threshold, measured: a last-dim mean (rows of 2,048 floats, so
        // the op is bandwidth-bound like the ops it decides for) run inline on the caller vs
        // split in two halves on the 2-thread pool. The split starts paying at the smallest
        // size whose ratio drops below 1; `pool::INLINE_BYTES` is set from this.
        let inline_pool = &pools[0];
        let ctx1 = Ctx { isa, pool: inline_pool };
        for kib in [16usize, 32, 48, 64, 96, 128, 192, 256, 512] {
            let rows = kib * 1024 / 4 / 2048;
            let shape = [rows.max(2), 2048];
            let x = data(shape[0] * 2048);
            let mut out = vec![0f32; shape[0]];
            let t1 = time(budget / 2, || mean::mean_f32(&ctx1, black_box(&x), &shape, &[1], &mut out).unwrap());
            let half = shape[0] / 2;
            let outs = std::sync::Mutex::new(vec![0f32; shape[0]]);
            let t2 = time(budget / 2, || {
                pools[1].run_tasks(2, &|t| {
                    let (lo, hi) = if t == 0 { (0, half) } else { (half, shape[0]) };
                    let mut o = vec![0f32; hi - lo];
                    mean::mean_f32(&ctx1, &x[lo * 2048..hi * 2048], &[hi - lo, 2048], &[1], &mut o).unwrap();
                    outs.lock().unwrap()[lo..hi].copy_from_slice(&o);
                })
            });
            println!(
                "{:58} inline {:>8.2} us  split {:>8.2} us  split / inline = {:.2}",
                format!("inline threshold: mean of {} KiB", shape[0] * 8),
                t1.0 * 1e6,
                t2.0 * 1e6,
                t2.0 / t1.0
            );
        }
    }
    if run("rmsnorm") {
        for (t, d) in [(1, 128), (1, 2048), (4, 512), (8, 256), (8, 2048), (16, 1024), (32, 2048), (128, 2048)] {
            let g = GraphBuilder::new();
            let x = g.input("x", TensorSpec::f32(&[1, t, d]));
            let ms = g.mean(g.mul(x, x), &[-1], true);
            let y = g.mul(x, g.rsqrt(g.add(ms, g.scalar(1e-6))));
            let graph = g.finish(&[y]).unwrap();
            let lowered = lower(&graph, LoweringMode::StaticMean).unwrap();
            let input = generate(&graph.nodes[0].spec, 1, &DataOptions::default());
            let mut mins = Vec::new();
            for (label, threads, policy) in [
                ("t1", 1, ThreadPolicy::CostModel),
                ("t2 cost", 2, ThreadPolicy::CostModel),
                ("t2 per_output", 2, ThreadPolicy::PerOutputTasks),
            ] {
                let p = Program::new(
                    &lowered,
                    &RunOptions { threads, policy, simd: SimdLevel::Auto, ..RunOptions::default() },
                )
                .unwrap();
                let tm = time(budget / 2, || {
                    black_box(p.run(std::slice::from_ref(&input)).unwrap());
                });
                mins.push(tm.0);
                report(&format!("rmsnorm 1x{t}x{d} {label}"), t * d * 4, tm);
            }
            println!(
                "{:58} t2 cost / t1 = {:.2}, t2 per_output / t1 = {:.2}",
                "",
                mins[1] / mins[0],
                mins[2] / mins[0]
            );
        }
    }
}
