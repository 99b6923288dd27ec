//! The catalog of named, fixed programs that `harness gate` pins and `harness bench` times.
//!
//! Three families: every row of the lowering table (issue 3, [`table`], with its pool rows
//! in [`pools`]), extra patterns from the change's test list (§5 of the notes,
//! [`patterns`]), and the benchmark scenarios (issue 8, [`bench`]), which
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

mod bench;
mod patterns;
mod pools;
mod table;

pub use bench::{MEAN_SHAPES, RMSNORM_SHAPES};

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

/// Every named program, in a stable order.
pub fn catalog() -> Vec<NamedProgram> {
    let mut c = Catalog { list: Vec::new() };
    table::table(&mut c);
    pools::pools(&mut c);
    patterns::patterns(&mut c);
    bench::bench(&mut c);
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
