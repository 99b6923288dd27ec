//! Kernel throughput of the runtime: innermost and strided means, GAP, transposes (with a
//! memcpy of the same bytes as the copy-bandwidth reference), converts; each at 1 and 2
//! threads (`t1`, `t2`, CostModel) on the widest instruction set. Throughput is bytes of
//! input (transposes, copies, converts: input plus output).
//!
//! `cargo bench -p delegate --bench runtime_kernels -- --warm-up-time 1 --measurement-time 2`

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use delegate::runtime::kernels::{convert, gap, mean, transpose, Ctx, Scratch, View, ViewMut};
use delegate::runtime::pool::Pool;
use delegate::runtime::simd::Isa;
use delegate::runtime::ThreadPolicy;
use half::{bf16, f16};

fn data(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i % 1013) as f32) * 0.001 - 0.5).collect()
}

fn pools() -> Vec<Pool> {
    [1, 2].into_iter().map(|t| Pool::new(t, ThreadPolicy::CostModel).unwrap()).collect()
}

fn bench_means(c: &mut Criterion) {
    let isa = Isa::best();
    let pools = pools();
    let cases: [(&str, &[usize], &[usize]); 6] = [
        ("last_dim_1x128x2048", &[1, 128, 2048], &[2]),
        ("last_dim_8192x2048_64MiB", &[8192, 2048], &[1]),
        ("all_16Mi_64MiB", &[16 << 20], &[0]),
        ("innermost_8x4096x64_dim2", &[8, 4096, 64], &[2]),
        ("strided_8x4096x64_dim1", &[8, 4096, 64], &[1]),
        ("outer_and_inner_8x4096x64_dims02", &[8, 4096, 64], &[0, 2]),
    ];
    let mut g = c.benchmark_group("mean_f32");
    for (name, shape, axes) in cases {
        let x = data(shape.iter().product());
        let r = mean::normalize(shape, axes);
        let mut out = vec![0f32; r.outputs];
        g.throughput(Throughput::Bytes((x.len() * 4) as u64));
        for pool in &pools {
            let ctx = Ctx { isa, pool };
            g.bench_with_input(BenchmarkId::new(name, format!("t{}", pool.threads())), &(), |b, _| {
                b.iter(|| mean::mean_f32(&ctx, black_box(&x), shape, axes, &mut out).unwrap())
            });
        }
    }
    g.finish();
}

fn bench_gap(c: &mut Criterion) {
    let isa = Isa::best();
    let pools = pools();
    let mut g = c.benchmark_group("gap_nhwc_f32");
    for shape in [[1usize, 56, 56, 96], [8, 28, 28, 256]] {
        let x = data(shape.iter().product());
        let mut out = vec![0f32; shape[0] * shape[3]];
        let mut scratch = Scratch::default();
        g.throughput(Throughput::Bytes((x.len() * 4) as u64));
        for pool in &pools {
            let ctx = Ctx { isa, pool };
            let name = format!("{}x{}x{}x{}", shape[0], shape[1], shape[2], shape[3]);
            g.bench_with_input(BenchmarkId::new(name, format!("t{}", pool.threads())), &(), |b, _| {
                b.iter(|| {
                    gap::gap_nhwc(&ctx, View::F32(black_box(&x)), &shape, ViewMut::F32(&mut out), None, &mut scratch)
                        .unwrap()
                })
            });
        }
    }
    g.finish();
}

fn bench_transpose(c: &mut Criterion) {
    let isa = Isa::best();
    let pools = pools();
    let mut g = c.benchmark_group("transpose_f32");
    let cases: [(&str, &[usize], &[usize]); 4] = [
        ("nchw_to_nhwc_1x96x56x56", &[1, 96, 56, 56], &[0, 2, 3, 1]),
        ("nhwc_to_nchw_1x56x56x96", &[1, 56, 56, 96], &[0, 3, 1, 2]),
        ("nchw_to_nhwc_4x256x64x64", &[4, 256, 64, 64], &[0, 2, 3, 1]),
        ("perm_3d_64x128x96_to_2_0_1", &[64, 128, 96], &[2, 0, 1]),
    ];
    for (name, shape, perm) in cases {
        let n: usize = shape.iter().product();
        let x = data(n);
        let mut out = vec![0f32; n];
        g.throughput(Throughput::Bytes((n * 8) as u64));
        for pool in &pools {
            let ctx = Ctx { isa, pool };
            g.bench_with_input(BenchmarkId::new(name, format!("t{}", pool.threads())), &(), |b, _| {
                b.iter(|| {
                    transpose::transpose(&ctx, View::F32(black_box(&x)), shape, perm, ViewMut::F32(&mut out)).unwrap()
                })
            });
            // The copy-bandwidth reference: the same bytes through the identity permutation
            // (a chunked memcpy on the same threads).
            let id: Vec<usize> = (0..shape.len()).collect();
            g.bench_with_input(
                BenchmarkId::new(format!("{name}_copy"), format!("t{}", pool.threads())),
                &(),
                |b, _| {
                    b.iter(|| {
                        transpose::transpose(&ctx, View::F32(black_box(&x)), shape, &id, ViewMut::F32(&mut out))
                            .unwrap()
                    })
                },
            );
        }
    }
    g.finish();
}

fn bench_convert(c: &mut Criterion) {
    let isa = Isa::best();
    let pools = pools();
    let n = 1 << 20;
    let x = data(n);
    let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let (mut of, mut oh, mut ob) = (vec![0f32; n], vec![f16::ZERO; n], vec![bf16::ZERO; n]);
    let mut g = c.benchmark_group("convert_1Mi");
    g.throughput(Throughput::Bytes((n * 6) as u64));
    for pool in &pools {
        let ctx = Ctx { isa, pool };
        let t = format!("t{}", pool.threads());
        g.bench_with_input(BenchmarkId::new("f32_to_f16", &t), &(), |b, _| {
            b.iter(|| convert::convert(&ctx, View::F32(&x), ViewMut::F16(&mut oh), None).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("f16_to_f32", &t), &(), |b, _| {
            b.iter(|| convert::convert(&ctx, View::F16(&xh), ViewMut::F32(&mut of), None).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("f32_to_bf16", &t), &(), |b, _| {
            b.iter(|| convert::convert(&ctx, View::F32(&x), ViewMut::Bf16(&mut ob), None).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("bf16_to_f32", &t), &(), |b, _| {
            b.iter(|| convert::convert(&ctx, View::Bf16(&xb), ViewMut::F32(&mut of), None).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench_means, bench_gap, bench_transpose, bench_convert);
criterion_main!(benches);
