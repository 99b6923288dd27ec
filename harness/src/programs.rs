//! The catalog of named, fixed programs that `harness gate` pins and `harness bench` times.
//!
//! Three families: every row of the lowering table (issue 3), extra patterns from the
//! change's test list (§5 of the notes), and the benchmark scenarios (issue 8), which
//! include the LLM-like programs (RMSNorm then Linear, QK-norm between linears, pre-norm
//! MLP blocks). A program is a recipe, built on demand, so the large LLM weights only
//! exist while that program is being lowered or timed.
//!
//! Weights come from a private splitmix64 stream seeded by the program, not from
//! `reference::data`: the golden table hashes payload bytes, and those must not move
//! when the input generator changes.

use reference::dtype::{ElemType, QuantParams};
use reference::graph::{Conv2dParams, Graph, GraphBuilder, GraphError, TensorSpec, T};
use reference::tensor::{Tensor, TensorData};
use reference::MemoryFormat;
use std::sync::Arc;

mod pools;

/// Which list a program belongs to (reported in the golden table, never used to skip).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// A row of the issue-3 lowering table.
    Table,
    /// Another pattern of the change's test list (notes §5).
    Pattern,
    /// A benchmark scenario of issue 8 (also gated).
    Bench,
}

type Build = Arc<dyn Fn() -> Result<Graph, GraphError> + Send + Sync>;

/// One named program.
#[derive(Clone)]
pub struct NamedProgram {
    /// Unique, stable name (the golden table's key).
    pub name: String,
    pub description: String,
    pub family: Family,
    /// Benchmark scenario kind (`rmsnorm`, `mean_last`, ...): the CSV's `scenario` column.
    pub scenario: String,
    /// Shape label: the CSV's `shape` column.
    pub shape: String,
    pub dtype: ElemType,
    /// Lower with bf16 enabled (the follow-up's `enable_bf16`).
    pub enable_bf16: bool,
    /// Timed by `harness bench`.
    pub bench: bool,
    /// Part of `harness bench --quick`.
    pub quick: bool,
    build: Build,
}

impl std::fmt::Debug for NamedProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedProgram").field("name", &self.name).field("family", &self.family).finish()
    }
}

impl NamedProgram {
    /// Builds the graph (weights included).
    pub fn graph(&self) -> Result<Graph, GraphError> {
        (self.build)()
    }
}

/// Deterministic weights: splitmix64, uniform in [-bound, bound).
struct Weights {
    state: u64,
}

impl Weights {
    fn new(seed: &str) -> Weights {
        // FNV-1a of the name: a stable seed per program.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in seed.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Weights { state: h }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn uniform(&mut self, n: usize, bound: f32) -> Vec<f32> {
        (0..n).map(|_| ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * bound).collect()
    }

    /// A constant tensor of `dtype` (values rounded from f32).
    fn tensor(&mut self, shape: &[usize], bound: f32, dtype: ElemType) -> Tensor {
        let v = self.uniform(shape.iter().product(), bound);
        cast(shape, v, dtype)
    }
}

fn cast(shape: &[usize], v: Vec<f32>, dtype: ElemType) -> Tensor {
    let data = match dtype {
        ElemType::F16 => TensorData::F16(v.into_iter().map(half::f16::from_f32).collect()),
        ElemType::Bf16 => TensorData::Bf16(v.into_iter().map(half::bf16::from_f32).collect()),
        // Weights of qs8 programs stay fp32 (the q/dq wrapping is on activations).
        ElemType::F32 | ElemType::Qs8 => TensorData::F32(v),
    };
    Tensor::new(shape.to_vec(), data)
}

fn scalar(g: &GraphBuilder, v: f32, dtype: ElemType) -> T {
    g.constant(cast(&[], vec![v], dtype))
}

const EPS: f32 = 1e-6;
/// Activation quantization used by every qs8 program: covers [-2, 2).
const Q_IN: QuantParams = QuantParams { scale: 1.0 / 64.0, zero_point: 0 };
/// Output quantization of qs8 RMSNorm (normalized values reach about +-4).
const Q_OUT: QuantParams = QuantParams { scale: 1.0 / 32.0, zero_point: 0 };

/// `x * rsqrt(mean(x^2, -1, keepdim) + eps) * w`, with `w` of the last dim's size.
fn rmsnorm(g: &GraphBuilder, x: T, dim: usize, dtype: ElemType, w: &mut Weights) -> T {
    let ms = g.mean(g.square(x), &[-1], true);
    let inv = g.rsqrt(g.add(ms, scalar(g, EPS, dtype)));
    let wt = g.constant(w.tensor(&[dim], 1.0, dtype).map_values(|v| 1.0 + 0.25 * v));
    g.mul(g.mul(x, inv), wt)
}

fn linear(g: &GraphBuilder, x: T, k: usize, n: usize, dtype: ElemType, w: &mut Weights) -> T {
    let wt = g.constant(w.tensor(&[n, k], 1.0 / (k as f32).sqrt(), dtype));
    g.linear(x, wt, None)
}

fn conv(g: &GraphBuilder, x: T, cin: usize, cout: usize, k: usize, pad: usize, w: &mut Weights) -> T {
    let bound = 1.0 / ((cin * k * k) as f32).sqrt();
    let wt = g.constant(w.tensor(&[cout, cin, k, k], bound, ElemType::F32));
    let b = g.constant(w.tensor(&[cout], 0.1, ElemType::F32));
    g.conv2d(x, wt, Some(b), Conv2dParams { padding: [pad, pad], ..Default::default() })
}

fn q_dq(g: &GraphBuilder, x: T, q: QuantParams) -> T {
    g.dequantize(g.quantize(x, q.scale, q.zero_point), q.scale, q.zero_point)
}

trait MapValues {
    fn map_values(self, f: impl Fn(f32) -> f32) -> Self;
}

impl MapValues for Tensor {
    fn map_values(mut self, f: impl Fn(f32) -> f32) -> Tensor {
        self.data = match self.data {
            TensorData::F32(v) => TensorData::F32(v.into_iter().map(f).collect()),
            TensorData::F16(v) => TensorData::F16(v.into_iter().map(|x| half::f16::from_f32(f(x.to_f32()))).collect()),
            TensorData::Bf16(v) => {
                TensorData::Bf16(v.into_iter().map(|x| half::bf16::from_f32(f(x.to_f32()))).collect())
            }
            d @ TensorData::Qs8(_) => d,
        };
        self
    }
}

fn label(shape: &[usize]) -> String {
    shape.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("x")
}

struct Catalog {
    list: Vec<NamedProgram>,
}

impl Catalog {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        family: Family,
        name: String,
        description: String,
        scenario: &str,
        shape: String,
        dtype: ElemType,
        build: impl Fn(&GraphBuilder, &mut Weights) -> Vec<T> + Send + Sync + 'static,
    ) -> &mut NamedProgram {
        let seed = name.clone();
        let build: Build = Arc::new(move || {
            let g = GraphBuilder::new();
            let mut w = Weights::new(&seed);
            let outs = build(&g, &mut w);
            g.finish(&outs)
        });
        self.list.push(NamedProgram {
            name,
            description,
            family,
            scenario: scenario.to_string(),
            shape,
            dtype,
            enable_bf16: dtype == ElemType::Bf16,
            bench: family == Family::Bench,
            quick: false,
            build,
        });
        self.list.last_mut().expect("just pushed")
    }
}

/// Input spec of a float program of `dtype` (qs8 programs take fp32 and quantize inside).
fn in_spec(dtype: ElemType, shape: &[usize]) -> TensorSpec {
    match dtype {
        ElemType::Qs8 => TensorSpec::f32(shape),
        d => TensorSpec::new(d, shape),
    }
}

fn table(c: &mut Catalog) {
    use Family::Table;
    let t = ElemType::F32;
    c.add(
        Table,
        "gap_1x8x6x6".into(),
        "x.mean([2,3], keepdim=True) on 1x8x6x6".into(),
        "gap",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
            vec![g.mean(x, &[2, 3], true)]
        },
    );
    c.add(
        Table,
        "conv_gap".into(),
        "conv2d(3->8, 3x3) -> mean([2,3], keepdim=True) on 1x3x8x8".into(),
        "conv_gap",
        "1x3x8x8".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
            let y = conv(g, x, 3, 8, 3, 0, w);
            vec![g.mean(y, &[2, 3], true)]
        },
    );
    c.add(
        Table,
        "conv_mean_conv".into(),
        "conv(3->8, 3x3) -> mean(1, keepdim=True) -> conv(1->4, 3x3) on 1x3x8x8".into(),
        "conv_mean_conv",
        "1x3x8x8".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
            let y = conv(g, x, 3, 8, 3, 0, w);
            let m = g.mean(y, &[1], true);
            vec![conv(g, m, 1, 4, 3, 0, w)]
        },
    );
    c.add(
        Table,
        "conv_sub_mean".into(),
        "conv(3->8, 3x3) -> y - y.mean(1, keepdim=True) on 1x3x8x8".into(),
        "conv_sub_mean",
        "1x3x8x8".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
            let y = conv(g, x, 3, 8, 3, 0, w);
            vec![g.sub(y, g.mean(y, &[1], true))]
        },
    );
    c.add(
        Table,
        "cl_gap_1x8x6x6".into(),
        "channels_last 1x8x6x6 -> mean([2,3], keepdim=True)".into(),
        "cl_gap",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]).channels_last());
            vec![g.mean(x, &[2, 3], true)]
        },
    );
    c.add(
        Table,
        "rmsnorm_1x16x256_table".into(),
        "RMSNorm over the last dim of 1x16x256".into(),
        "rmsnorm",
        "1x16x256".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 16, 256]));
            vec![rmsnorm(g, x, 256, ElemType::F32, w)]
        },
    );
    // A requantizing copy before a qs8 mean (the two requantization bugs found on
    // 2026-11-30): its converts must stay, in every mode.
    for (name, reshape) in [("qs8_requant_copy_mean", false), ("qs8_requant_reshape_mean", true)] {
        let what = if reshape { "a same-shape reshape" } else { "a same-layout memory-format copy" };
        c.add(
            Table,
            name.into(),
            format!("qs8 1x8x16 requantized through {what} (1/64 -> 1/32), then mean(-1)"),
            "qs8_requant",
            "1x8x16".into(),
            ElemType::Qs8,
            move |g, _| {
                let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 8, 16])), Q_IN);
                let c = if reshape { g.reshape(x, &[1, 8, 16]) } else { g.to_format(x, MemoryFormat::Contiguous) };
                let m = g.mean(q_dq(g, c, Q_OUT), &[-1], true);
                vec![q_dq(g, m, Q_IN)]
            },
        );
    }
    for (name, dims, what) in [("qs8_mean_inner", -1i64, "innermost"), ("qs8_mean_middle", 1, "middle")] {
        c.add(
            Table,
            name.into(),
            format!("qs8 q/dq-wrapped mean over the {what} dim of 1x8x16"),
            "qs8_mean",
            "1x8x16".into(),
            ElemType::Qs8,
            move |g, _| {
                let x = g.input("x", TensorSpec::f32(&[1, 8, 16]));
                let m = g.mean(q_dq(g, x, Q_IN), &[dims], true);
                vec![q_dq(g, m, Q_IN)]
            },
        );
    }
    c.add(
        Table,
        "mean_all_dims".into(),
        "x.mean([]) (every dim) on 1x8x6x6".into(),
        "mean_all",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
            vec![g.mean(x, &[], true)]
        },
    );
    c.add(
        Table,
        "mean_dim3".into(),
        "x.mean([3], keepdim=True) on 1x8x6x6".into(),
        "mean_dim3",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
            vec![g.mean(x, &[3], true)]
        },
    );
    c.add(
        Table,
        "mean_dim3_nokeep".into(),
        "x.mean([3], keepdim=False) on 1x8x6x6".into(),
        "mean_dim3_nokeep",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
            vec![g.mean(x, &[3], false)]
        },
    );
    c.add(
        Table,
        "mean_dtype_arg".into(),
        "fp16 x.mean([-1], keepdim=True, dtype=float32) on 1x8x16 (B5's real trigger)".into(),
        "mean_dtype_arg",
        "1x8x16".into(),
        ElemType::F16,
        |g, _| {
            let x = g.input("x", TensorSpec::f16(&[1, 8, 16]));
            vec![g.mean_dtype(x, &[-1], true, ElemType::F32)]
        },
    );
}

fn patterns(c: &mut Catalog) {
    use Family::Pattern;
    let t = ElemType::F32;
    c.add(
        Pattern,
        "p1_add_gap".into(),
        "x + x -> mean([-1,-2], keepdim=True) on 1x5x4x4 (P1)".into(),
        "add_gap",
        "1x5x4x4".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 5, 4, 4]));
            vec![g.mean(g.add(x, x), &[-1, -2], true)]
        },
    );
    c.add(
        Pattern,
        "p4_qs8_add_gap".into(),
        "qs8 x + x -> mean([2,3], keepdim=True) on 1x5x4x4 (P4)".into(),
        "qs8_add_gap",
        "1x5x4x4".into(),
        ElemType::Qs8,
        |g, _| {
            let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 5, 4, 4])), Q_IN);
            let s = q_dq(g, g.add(x, x), Q_IN);
            vec![q_dq(g, g.mean(s, &[2, 3], true), Q_IN)]
        },
    );
    for rank in 1..=6usize {
        let shape: Vec<usize> = (0..rank).map(|i| [2, 3, 4, 5, 3, 2][i]).collect();
        let lbl = label(&shape);
        c.add(
            Pattern,
            format!("p5_add_mean_rank{rank}"),
            format!("x + x -> mean([-1], keepdim=False) on {lbl} (P5)"),
            "add_mean",
            lbl,
            t,
            move |g, _| {
                let x = g.input("x", TensorSpec::f32(&shape));
                vec![g.mean(g.add(x, x), &[-1], false)]
            },
        );
    }
    c.add(
        Pattern,
        "p10_qs8_conv_mean_c".into(),
        "qs8 conv(3->8, 3x3) -> mean(1, keepdim=True) on 1x3x8x8 (P10)".into(),
        "qs8_conv_mean_c",
        "1x3x8x8".into(),
        ElemType::Qs8,
        |g, w| {
            let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 3, 8, 8])), Q_IN);
            let y = q_dq(g, conv(g, x, 3, 8, 3, 0, w), Q_IN);
            vec![q_dq(g, g.mean(y, &[1], true), Q_IN)]
        },
    );
    c.add(
        Pattern,
        "p11_qs8_cl_add_mean_c".into(),
        "qs8 channels_last 1x8x6x6 -> x + x -> mean(1, keepdim=True) (P11, B3)".into(),
        "qs8_cl_add_mean_c",
        "1x8x6x6".into(),
        ElemType::Qs8,
        |g, _| {
            let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 8, 6, 6]).channels_last()), Q_IN);
            let s = q_dq(g, g.add(x, x), Q_IN);
            vec![q_dq(g, g.mean(s, &[1], true), Q_IN)]
        },
    );
    c.add(
        Pattern,
        "p14_rmsnorm_dynamic".into(),
        "RMSNorm over the last dim of 1x(<=16)x256, dim 1 dynamic (P14)".into(),
        "rmsnorm_dynamic",
        "1x16x256".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 16, 256]).dynamic(1));
            vec![rmsnorm(g, x, 256, ElemType::F32, w)]
        },
    );
    c.add(
        Pattern,
        "p15_fp16_mean_middle".into(),
        "fp16 mean(1, keepdim=True) on 1x8x16 (P15)".into(),
        "mean_middle",
        "1x8x16".into(),
        ElemType::F16,
        |g, _| {
            let x = g.input("x", TensorSpec::f16(&[1, 8, 16]));
            vec![g.mean(x, &[1], true)]
        },
    );
    c.add(
        Pattern,
        "p18_bf16_cl_gap".into(),
        "bf16 channels_last 1x8x6x6 -> mean([2,3], keepdim=True) (P18)".into(),
        "bf16_cl_gap",
        "1x8x6x6".into(),
        ElemType::Bf16,
        |g, _| {
            let x = g.input("x", TensorSpec::bf16(&[1, 8, 6, 6]).channels_last());
            vec![g.mean(x, &[2, 3], true)]
        },
    );
    c.add(
        Pattern,
        "b1_shared_dq_mean_conv".into(),
        "qs8: one dq feeds a mean(1) (first) and a conv (B1/B2 shape) on 1x3x8x8".into(),
        "shared_dq",
        "1x3x8x8".into(),
        ElemType::Qs8,
        |g, w| {
            let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 3, 8, 8])), Q_IN);
            let m = q_dq(g, g.mean(x, &[1], true), Q_IN);
            let y = q_dq(g, conv(g, x, 3, 8, 3, 0, w), Q_IN);
            vec![m, y]
        },
    );
}

/// RMSNorm shapes of the change's threadpool sweep (notes §7.3).
pub const RMSNORM_SHAPES: [[usize; 3]; 10] = [
    [1, 1, 128],
    [1, 8, 64],
    [1, 8, 128],
    [1, 16, 256],
    [1, 32, 128],
    [1, 32, 512],
    [1, 64, 512],
    [1, 128, 128],
    [1, 32, 2048],
    [1, 128, 2048],
];
pub const MEAN_SHAPES: [[usize; 3]; 2] = [[1, 128, 128], [1, 128, 2048]];

fn bench(c: &mut Catalog) {
    // fp32 first, then the LLM and conv programs, then the other dtypes: the sweep times in
    // catalog order, so the headline rows come first.
    bench_dtype_rows(c, ElemType::F32);
    bench_fp32_programs(c);
    for dtype in [ElemType::F16, ElemType::Bf16, ElemType::Qs8] {
        bench_dtype_rows(c, dtype);
    }
}

fn bench_dtype_rows(c: &mut Catalog, dtype: ElemType) {
    use Family::Bench;
    {
        let dn = dtype.name();
        for shape in RMSNORM_SHAPES {
            let lbl = label(&shape);
            let quick = dtype == ElemType::F32 && (shape == [1, 8, 64] || shape == [1, 128, 2048]);
            let p = c.add(
                Bench,
                format!("rmsnorm_{lbl}_{dn}"),
                format!("{dn} RMSNorm over the last dim of {lbl}"),
                "rmsnorm",
                lbl,
                dtype,
                move |g, w| {
                    let x = g.input("x", in_spec(dtype, &shape));
                    if dtype == ElemType::Qs8 {
                        let y = rmsnorm(g, q_dq(g, x, Q_IN), shape[2], ElemType::F32, w);
                        vec![q_dq(g, y, Q_OUT)]
                    } else {
                        vec![rmsnorm(g, x, shape[2], dtype, w)]
                    }
                },
            );
            p.quick = quick;
        }
        for shape in MEAN_SHAPES {
            let lbl = label(&shape);
            let quick = dtype == ElemType::F32 && shape == [1, 128, 128];
            let p = c.add(
                Bench,
                format!("mean_last_{lbl}_{dn}"),
                format!("{dn} bare x.mean(-1, keepdim=True) on {lbl}"),
                "mean_last",
                lbl,
                dtype,
                move |g, _| {
                    let x = g.input("x", in_spec(dtype, &shape));
                    if dtype == ElemType::Qs8 {
                        vec![q_dq(g, g.mean(q_dq(g, x, Q_IN), &[-1], true), Q_IN)]
                    } else {
                        vec![g.mean(x, &[-1], true)]
                    }
                },
            );
            p.quick = quick;
        }
    }
}

fn bench_fp32_programs(c: &mut Catalog) {
    use Family::Bench;
    let f = ElemType::F32;
    c.add(
        Bench,
        "rmsnorm_linear_1x32x512".into(),
        "RMSNorm over the last dim of 1x32x512 then Linear(512->512)".into(),
        "rmsnorm_linear",
        "1x32x512".into(),
        f,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 32, 512]));
            let n = rmsnorm(g, x, 512, ElemType::F32, w);
            vec![linear(g, n, 512, 512, ElemType::F32, w)]
        },
    );
    for (phase, tokens) in [("decode", 1usize), ("prefill", 64)] {
        let lbl = format!("1x{tokens}x512");
        c.add(Bench, format!("mlp4_{phase}"), format!("4 pre-norm residual MLP blocks x + W2(relu(W1(RMSNorm(x)))), width 512, hidden 2048, {phase} ({tokens} tokens)"), &format!("mlp4_{phase}"), lbl, f, move |g, w| {
            let mut x = g.input("x", TensorSpec::f32(&[1, tokens, 512]));
            for _ in 0..4 {
                let n = rmsnorm(g, x, 512, ElemType::F32, w);
                let h = g.relu(linear(g, n, 512, 2048, ElemType::F32, w));
                x = g.add(x, linear(g, h, 2048, 512, ElemType::F32, w));
            }
            vec![x]
        });
    }
    c.add(
        Bench,
        "conv_mean_c_c96_56x56".into(),
        "conv(3->96, 1x1) -> mean(1, keepdim=True) on 1x3x56x56".into(),
        "conv_mean_c",
        "1x96x56x56".into(),
        f,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 56, 56]));
            vec![g.mean(conv(g, x, 3, 96, 1, 0, w), &[1], true)]
        },
    );
    let p = c.add(
        Bench,
        "conv_mean_conv_c96_56x56".into(),
        "conv(3->96, 1x1) -> mean(1, keepdim=True) -> conv(1->4, 1x1) on 1x3x56x56".into(),
        "conv_mean_conv",
        "1x96x56x56".into(),
        f,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 56, 56]));
            let m = g.mean(conv(g, x, 3, 96, 1, 0, w), &[1], true);
            vec![conv(g, m, 1, 4, 1, 0, w)]
        },
    );
    p.quick = true;
    c.add(
        Bench,
        "conv_sub_mean_c96_56x56".into(),
        "conv(3->96, 1x1) -> y - y.mean(1, keepdim=True) on 1x3x56x56".into(),
        "conv_sub_mean",
        "1x96x56x56".into(),
        f,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 56, 56]));
            let y = conv(g, x, 3, 96, 1, 0, w);
            vec![g.sub(y, g.mean(y, &[1], true))]
        },
    );
    for (heads, hd) in [(8usize, 64usize), (16, 128)] {
        let width = heads * hd;
        let p = c.add(
            Bench,
            format!("qknorm_{heads}x{hd}"),
            format!(
                "decode QK-norm: Linear({width}->{width}) -> view 1x1x{heads}x{hd} -> RMSNorm(-1) -> view -> Linear"
            ),
            "qknorm",
            format!("{heads}x{hd}"),
            f,
            move |g, w| {
                let x = g.input("x", TensorSpec::f32(&[1, 1, width]));
                let q = linear(g, x, width, width, ElemType::F32, w);
                let h = g.reshape(q, &[1, 1, heads as i64, hd as i64]);
                let n = rmsnorm(g, h, hd, ElemType::F32, w);
                let back = g.reshape(n, &[1, 1, width as i64]);
                vec![linear(g, back, width, width, ElemType::F32, w)]
            },
        );
        p.quick = heads == 8;
    }
}

/// Every named program, in a stable order.
pub fn catalog() -> Vec<NamedProgram> {
    let mut c = Catalog { list: Vec::new() };
    table(&mut c);
    pools::pools(&mut c);
    patterns(&mut c);
    bench(&mut c);
    c.list
}

/// The program called `name`, if any.
pub fn find(name: &str) -> Option<NamedProgram> {
    catalog().into_iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_graph_builds() {
        let cat = catalog();
        let mut names: Vec<&str> = cat.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate program names");
        for p in cat.iter().filter(|p| !matches!(p.scenario.as_str(), "mlp4_prefill" | "mlp4_decode" | "qknorm")) {
            let g = p.graph().unwrap_or_else(|e| panic!("{}: {e}", p.name));
            assert!(!g.outputs.is_empty());
        }
    }

    #[test]
    fn weights_are_deterministic_per_name() {
        let a = Weights::new("x").uniform(8, 1.0);
        let b = Weights::new("x").uniform(8, 1.0);
        let c = Weights::new("y").uniform(8, 1.0);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
    }

    #[test]
    fn issue8_scenarios_are_all_present() {
        let cat = catalog();
        let bench: Vec<&NamedProgram> = cat.iter().filter(|p| p.bench).collect();
        // 10 RMSNorm + 2 mean shapes in 4 dtypes, plus 8 fp32 LLM/conv programs.
        assert_eq!(bench.len(), 4 * 12 + 8);
        for s in [
            "rmsnorm_linear",
            "mlp4_decode",
            "mlp4_prefill",
            "conv_mean_c",
            "conv_mean_conv",
            "conv_sub_mean",
            "qknorm",
        ] {
            assert!(bench.iter().any(|p| p.scenario == s), "missing scenario {s}");
        }
        assert!(bench.iter().filter(|p| p.quick).count() >= 4);
    }
}
