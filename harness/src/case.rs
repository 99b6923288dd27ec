//! A test case: everything needed to rebuild one graph, its inputs and the runs to make,
//! in one line of JSON.
//!
//! # Case file format (`corpora/**/*.json`, one JSON object per line)
//!
//! ```json
//! {"pattern":"add_mean","shape":[2,3,4],"dims":[-1],"keepdim":true,"dtype":"f32","seed":7}
//! ```
//!
//! | field | meaning | default |
//! |---|---|---|
//! | `pattern` | graph shape, see [`Pattern`] (`mean`, `add_mean`, `gap`, `rms_norm`, `qk_norm`, `pre_norm_mlp`, `conv_mean`, `conv_mean_conv`, `conv_sub_mean`, `shared_input`, `adaptive_pool`, or `random` with `graph`) | required |
//! | `shape` | logical (NCHW) shape of the main input; for dynamic dims, the upper bound | required |
//! | `dims` | the `mean.dim` dims list (any order, negative allowed, `[]` = all dims) | `[]` |
//! | `keepdim` | `keepdim` of the mean | `false` |
//! | `dtype` | `f32`, `f16`, `bf16`, or `qs8` (fp32 graph input, every op wrapped in quantize/dequantize) | `f32` |
//! | `format` | memory format of the input: `contiguous`, `channels_last` (4-D), `channels_last3d` (5-D) | `contiguous` |
//! | `mean_dtype` | the mean's `dtype=` argument, e.g. `"f32"` | none |
//! | `dynamic` | indices of input dims that are dynamic (bounded by `shape`) | `[]` |
//! | `run_shapes` | concrete input shapes to run, one run each; empty means `[shape]` | `[]` |
//! | `modes` | lowering modes to check: `Main`, `StaticMean`, `NhwcAware` | all three |
//! | `threads` | thread counts to run at | `[1, 2]` |
//! | `seed` | seed of the input data and of the weights | `0` |
//! | `specials` | include ±0, subnormals, ±inf and NaN in the input data | `false` |
//! | `param` | pattern knob: conv output channels, heads of a QK-norm, MLP hidden size, the permutation of a `mean` with variant bit 4 | `0` (pattern default) |
//! | `variant` | pattern knob: conv kernel size (1 or 3), GAP dims order, order of the shared-input users, qs8 mean: a requantizing copy first (bit 0; bit 1: a reshape), `adaptive_pool`: no conv before the pool (bit 1); bit 3: the commutative ops of `rms_norm`, `qk_norm`, `pre_norm_mlp` take their operands swapped, `conv_sub_mean` computes `(-1 * m) + y`; bit 4, `mean`: a permute before the mean (`param` picks it: even keeps the innermost dim) | `0` |
//! | `invalid` | make the graph invalid on purpose, see [`InvalidKind`] | none |
//! | `qparams` | qs8 `mean` (no requantizing copy) and `adaptive_pool` without conv: a real quantizer's parameters, `{"input":{"scale":0.0078431377,"zero_point":-1},"output":{...}}`, replacing the power-of-two defaults (either may be left out) | none |
//! | `inputs` | inline input tensors, one per run shape per graph input (see [`InlineTensor`]); replaces the seed for graph inputs | none |
//! | `graph` | `random` cases only: the whole graph, `{"inputs":[{"shape":[2,3],"dtype":"f16"}],"nodes":[{"op":"mean","dims":[-1],"args":[0]}],"outputs":[1]}` (see [`RandomGraph`]); `shape`, `format` and `dtype` then repeat its first input's shape and format and its coarsest float type | none |
//! | `xfail` | a known open bug: replay expects this case to fail, and says so when it passes | none |
//!
//! An inline tensor is `{"shape":[2,3],"dtype":"f32","values":[0.5,"nan",...],"bits":[1056964608,...]}`:
//! `values` are decimal (non-finite values as the strings `"nan"`, `"inf"`, `"-inf"`), `bits`
//! the raw bit patterns (fp32: u32, fp16/bf16: u16, qs8: the byte). When both are present the
//! bits win (decimal text can not carry a NaN payload or a signed zero reliably); a PyTorch
//! script may write only `values`. Values are in logical (row-major) order; `format` says how
//! the harness lays them out. A qs8 case may give its input as the int8 tensor itself,
//! `{"shape":[..],"dtype":"qs8","quant":{"scale":0.0078431377,"zero_point":-1},"values":[-128,5,...]}`:
//! the graph input is its dequantization, and its quantization is the graph's input
//! quantization (`qparams.input`, which it must equal when both are given).

pub use crate::patterns::random::RandomGraph;
use anyhow::{bail, Context, Result};
use delegate::LoweringMode;
use half::{bf16, f16};
use reference::{ElemType, MemoryFormat, QuantParams, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Why a case can not be run as written: a mistake in the case itself (its writer's, or a
/// generator's), never a bug of the delegate or the reference. Names the field at fault.
/// `replay` reports it and exits non-zero; the fuzz job counts it as a skip; fuzz targets
/// treat such an input as uninteresting.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid case: {field}: {message}")]
pub struct InvalidCase {
    /// The case field at fault (`shape`, `threads`, `inputs[2]`, `run_shapes[1]`...).
    pub field: String,
    pub message: String,
}

impl InvalidCase {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> InvalidCase {
        InvalidCase { field: field.into(), message: message.into() }
    }
}

/// The largest input a case may ask for, in elements (so no case allocates without bound).
pub const MAX_ELEMS: usize = 1 << 22;
/// The largest thread count a case may run at.
pub const MAX_THREADS: usize = 64;

/// The graph a case builds (see `patterns.rs` for each one's exact ops).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// `x.mean(dims, keepdim)` on a graph input.
    Mean,
    /// `(x + x).mean(dims, keepdim)` (ExecuTorch's `test_mean_dim`).
    AddMean,
    /// `(x + x).mean([-1, -2] or [2, 3], keepdim=True)` on a 4-D input: the GAP case.
    Gap,
    /// `x * rsqrt(mean(x^2, -1, keepdim=True) + eps) * w`.
    RmsNorm,
    /// `linear -> view [B, S, H, Dh] -> RMSNorm over Dh -> view back -> linear`.
    QkNorm,
    /// `x + linear(relu(linear(rmsnorm(x))))`: a pre-norm residual MLP block.
    PreNormMlp,
    /// `conv2d(x).mean(dims, keepdim)`.
    ConvMean,
    /// `conv2d(conv2d(x).mean(1, keepdim=True))`.
    ConvMeanConv,
    /// `y = conv2d(x); y - y.mean(1, keepdim=True)` (LayerNorm2d centering).
    ConvSubMean,
    /// One input (under qs8: one dequantize) feeding both a mean and a conv.
    SharedInput,
    /// `F.adaptive_avg_pool2d(conv2d(x), 1)` (variant bit 1: of `x` itself), a CNN head:
    /// `to_edge` makes it `mean([-1, -2], keepdim=True)`, so it lowers to GAP in every mode.
    AdaptivePool,
    /// A random DAG over the whole graph language, stored in [`Case::graph`]
    /// (`patterns::random`). Not in [`Pattern::ALL`], which the templates' draw indexes.
    Random,
}

impl Pattern {
    /// Ordered simplest first: shrinking moves toward the front.
    pub const ALL: [Pattern; 11] = [
        Pattern::Mean,
        Pattern::AddMean,
        Pattern::Gap,
        Pattern::AdaptivePool,
        Pattern::RmsNorm,
        Pattern::ConvMean,
        Pattern::ConvSubMean,
        Pattern::ConvMeanConv,
        Pattern::SharedInput,
        Pattern::QkNorm,
        Pattern::PreNormMlp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::Mean => "mean",
            Pattern::AddMean => "add_mean",
            Pattern::Gap => "gap",
            Pattern::RmsNorm => "rms_norm",
            Pattern::QkNorm => "qk_norm",
            Pattern::PreNormMlp => "pre_norm_mlp",
            Pattern::ConvMean => "conv_mean",
            Pattern::ConvMeanConv => "conv_mean_conv",
            Pattern::ConvSubMean => "conv_sub_mean",
            Pattern::SharedInput => "shared_input",
            Pattern::AdaptivePool => "adaptive_pool",
            Pattern::Random => "random",
        }
    }

    /// Patterns whose input must be 4-D NCHW (a conv or GAP reads it).
    pub fn needs_rank4(self) -> bool {
        matches!(
            self,
            Pattern::Gap
                | Pattern::ConvMean
                | Pattern::ConvMeanConv
                | Pattern::ConvSubMean
                | Pattern::SharedInput
                | Pattern::AdaptivePool
        )
    }

    /// Whether `dims`/`keepdim` of the case choose the mean (otherwise the pattern fixes them).
    pub fn free_dims(self) -> bool {
        matches!(self, Pattern::Mean | Pattern::AddMean | Pattern::ConvMean | Pattern::SharedInput)
    }
}

/// A deliberate defect; the graph (or a run) must then be rejected by both sides with the
/// same [`reference::graph::ErrorClass`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvalidKind {
    /// A mean dim equal to the rank (shape class).
    DimOutOfRange,
    /// The same dim twice, once negative (shape class).
    RepeatedDim,
    /// A rank-7 input (shape class).
    RankTooHigh,
    /// A zero-sized input dim (shape class).
    ZeroSizedDim,
    /// `mean(dtype=qs8)` (dtype class).
    MeanDtypeQs8,
    /// A mean directly on a qs8 tensor, without dequantize (dtype class).
    MeanOnQs8,
    /// A quantize with scale 0 (quant class).
    BadQuantScale,
    /// A quantize with zero point 300 (quant class).
    BadZeroPoint,
    /// A conv weight with the wrong input-channel count (conv class).
    ConvChannelMismatch,
    /// An add of shapes that do not broadcast (shape class).
    NotBroadcastable,
    /// A run whose dynamic dim is above its bound (dynamic class, at run time).
    DynamicAboveBound,
    /// `adaptive_avg_pool2d` with output size [2, 2], which the graph language does not
    /// model (shape class).
    PoolOutputSize,
}

impl InvalidKind {
    pub const ALL: [InvalidKind; 12] = [
        InvalidKind::DimOutOfRange,
        InvalidKind::RepeatedDim,
        InvalidKind::RankTooHigh,
        InvalidKind::ZeroSizedDim,
        InvalidKind::MeanDtypeQs8,
        InvalidKind::MeanOnQs8,
        InvalidKind::BadQuantScale,
        InvalidKind::BadZeroPoint,
        InvalidKind::ConvChannelMismatch,
        InvalidKind::NotBroadcastable,
        InvalidKind::DynamicAboveBound,
        InvalidKind::PoolOutputSize,
    ];
}

/// A qs8 case's quantization as a real quantizer (a PyTorch observer) chose it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseQuant {
    /// The graph input's (the first quantize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<QuantParams>,
    /// The output's (the last quantize, after the mean or pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<QuantParams>,
}

/// A concrete input written into the case file (see the module docs for the format).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InlineTensor {
    pub shape: Vec<usize>,
    pub dtype: ElemType,
    #[serde(default)]
    pub format: MemoryFormat,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quant: Option<QuantParams>,
    /// Decimal values in logical order; non-finite values as `"nan"`, `"inf"`, `"-inf"`.
    #[serde(default)]
    pub values: Vec<serde_json::Value>,
    /// Raw bit patterns in logical order; authoritative when present.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bits: Vec<u32>,
}

impl InlineTensor {
    /// Writes a tensor as decimal values plus bit patterns.
    pub fn from_tensor(t: &Tensor) -> InlineTensor {
        let c = t.to_contiguous();
        let n = c.data.len();
        let values = (0..n)
            .map(|i| {
                let v = c.data.get_f64(i);
                if v.is_nan() {
                    serde_json::Value::from("nan")
                } else if v.is_infinite() {
                    serde_json::Value::from(if v > 0.0 { "inf" } else { "-inf" })
                } else if matches!(c.data, TensorData::Qs8(_)) {
                    serde_json::Value::from(v as i64)
                } else {
                    serde_json::Value::from(v)
                }
            })
            .collect();
        let bits = (0..n).map(|i| c.data.bits(i)).collect();
        InlineTensor { shape: t.shape.clone(), dtype: t.dtype(), format: t.format, quant: t.quant, values, bits }
    }

    /// Rebuilds the tensor, laid out in `format`.
    pub fn to_tensor(&self) -> Result<Tensor> {
        let n = self.shape.iter().try_fold(1usize, |a, &s| a.checked_mul(s)).context("inline tensor too large")?;
        let from_bits = !self.bits.is_empty();
        let len = if from_bits { self.bits.len() } else { self.values.len() };
        if len != n {
            bail!("inline tensor of shape {:?} has {} elements, needs {}", self.shape, len, n);
        }
        let value = |i: usize| -> Result<f64> {
            match &self.values[i] {
                serde_json::Value::Number(x) => x.as_f64().context("bad number"),
                serde_json::Value::String(s) => match s.to_ascii_lowercase().as_str() {
                    "nan" => Ok(f64::NAN),
                    "inf" | "+inf" | "infinity" => Ok(f64::INFINITY),
                    "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
                    other => other.parse::<f64>().with_context(|| format!("bad value {other:?}")),
                },
                v => bail!("bad inline value {v}"),
            }
        };
        let data = match self.dtype {
            ElemType::F32 => TensorData::F32(if from_bits {
                self.bits.iter().map(|&b| f32::from_bits(b)).collect()
            } else {
                (0..n).map(|i| value(i).map(|v| v as f32)).collect::<Result<_>>()?
            }),
            ElemType::F16 => TensorData::F16(if from_bits {
                self.bits.iter().map(|&b| f16::from_bits(b as u16)).collect()
            } else {
                (0..n).map(|i| value(i).map(reference::dtype::f16_from_f64)).collect::<Result<_>>()?
            }),
            ElemType::Bf16 => TensorData::Bf16(if from_bits {
                self.bits.iter().map(|&b| bf16::from_bits(b as u16)).collect()
            } else {
                (0..n).map(|i| value(i).map(reference::dtype::bf16_from_f64)).collect::<Result<_>>()?
            }),
            ElemType::Qs8 => TensorData::Qs8(if from_bits {
                self.bits.iter().map(|&b| b as u8 as i8).collect()
            } else {
                (0..n).map(|i| value(i).map(|v| v.round().clamp(-128.0, 127.0) as i8)).collect::<Result<_>>()?
            }),
        };
        let t = Tensor { shape: self.shape.clone(), format: MemoryFormat::Contiguous, quant: self.quant, data };
        Ok(t.to_format(self.format))
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
fn is_zero_usize(v: &usize) -> bool {
    *v == 0
}
fn is_zero_u8(v: &u8) -> bool {
    *v == 0
}
fn is_f32(d: &ElemType) -> bool {
    *d == ElemType::F32
}
fn is_contiguous(f: &MemoryFormat) -> bool {
    *f == MemoryFormat::Contiguous
}
fn default_modes() -> Vec<LoweringMode> {
    LoweringMode::ALL.to_vec()
}
fn is_default_modes(m: &Vec<LoweringMode>) -> bool {
    *m == default_modes()
}
fn default_threads() -> Vec<usize> {
    vec![1, 2]
}
fn is_default_threads(t: &Vec<usize>) -> bool {
    *t == default_threads()
}
fn default_dtype() -> ElemType {
    ElemType::F32
}

/// One test case (see the module docs for the JSON format).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub pattern: Pattern,
    pub shape: Vec<usize>,
    #[serde(default)]
    pub dims: Vec<i64>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub keepdim: bool,
    #[serde(default = "default_dtype", skip_serializing_if = "is_f32")]
    pub dtype: ElemType,
    #[serde(default, skip_serializing_if = "is_contiguous")]
    pub format: MemoryFormat,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_dtype: Option<ElemType>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dynamic: Vec<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_shapes: Vec<Vec<usize>>,
    #[serde(default = "default_modes", skip_serializing_if = "is_default_modes")]
    pub modes: Vec<LoweringMode>,
    #[serde(default = "default_threads", skip_serializing_if = "is_default_threads")]
    pub threads: Vec<usize>,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub seed: u64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub specials: bool,
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub param: usize,
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub variant: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<InvalidKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qparams: Option<CaseQuant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<InlineTensor>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<RandomGraph>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xfail: Option<String>,
}

impl Case {
    /// A plain fp32 case of `pattern` with every default.
    pub fn new(pattern: Pattern, shape: &[usize], dims: &[i64], keepdim: bool) -> Case {
        Case {
            pattern,
            shape: shape.to_vec(),
            dims: dims.to_vec(),
            keepdim,
            dtype: ElemType::F32,
            format: MemoryFormat::Contiguous,
            mean_dtype: None,
            dynamic: vec![],
            run_shapes: vec![],
            modes: default_modes(),
            threads: default_threads(),
            seed: 0,
            specials: false,
            param: 0,
            variant: 0,
            invalid: None,
            qparams: None,
            inputs: None,
            graph: None,
            xfail: None,
        }
    }

    /// The case as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a Case always serializes")
    }

    pub fn from_json(line: &str) -> Result<Case> {
        serde_json::from_str(line.trim()).with_context(|| format!("not a case: {}", truncate(line, 200)))
    }

    /// Every case in a file: one per non-empty line that is not a `//` or `#` comment.
    pub fn read_file(path: &std::path::Path) -> Result<Vec<Case>> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| {
                !l.trim().is_empty() && !l.trim_start().starts_with("//") && !l.trim_start().starts_with('#')
            })
            .map(|(i, l)| Case::from_json(l).with_context(|| format!("{}:{}", path.display(), i + 1)))
            .collect()
    }

    /// First 12 hex digits of the sha256 of the JSON line (names regression files).
    pub fn hash(&self) -> String {
        let mut c = self.clone();
        c.xfail = None;
        let digest = Sha256::digest(c.to_json().as_bytes());
        digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
    }

    /// The concrete input shapes to run (the bound shape when none are listed).
    pub fn runs(&self) -> Vec<Vec<usize>> {
        if self.run_shapes.is_empty() {
            vec![self.shape.clone()]
        } else {
            self.run_shapes.clone()
        }
    }

    /// Number of elements of the main input at its bound shape (`usize::MAX` when the
    /// product overflows).
    pub fn numel(&self) -> usize {
        self.shape.iter().try_fold(1usize, |a, &s| a.checked_mul(s)).unwrap_or(usize::MAX)
    }

    /// The checks every pattern shares: a rank the graph language has, no zero-sized dim
    /// unless asked for, a bounded size, thread counts and modes to run, dynamic dims that
    /// exist, run shapes of the input's rank.
    pub fn check(&self) -> Result<(), InvalidCase> {
        let bad = |field: &str, msg: String| Err(InvalidCase::new(field, msg));
        let rank = self.shape.len();
        // (`rank_too_high` cases stay at rank 6: the corruption adds the seventh dim.)
        if rank == 0 || rank > 6 {
            return bad("shape", format!("rank {rank} ({:?}); the graph language has ranks 1 to 6", self.shape));
        }
        if let Some(d) = self.shape.iter().position(|&s| s == 0) {
            if self.invalid != Some(InvalidKind::ZeroSizedDim) {
                return bad(
                    "shape",
                    format!("dim {d} of {:?} is 0 (a zero-sized dim needs \"invalid\":\"zero_sized_dim\")", self.shape),
                );
            }
        }
        if self.numel() > MAX_ELEMS {
            let n = self.shape.iter().try_fold(1u128, |a, &s| a.checked_mul(s as u128));
            let size = n.map_or("more than 2^128".to_string(), |n| n.to_string());
            return bad("shape", format!("{:?} has {size} elements; at most {MAX_ELEMS}", self.shape));
        }
        if let Some(&d) = self.dynamic.iter().find(|&&d| d >= rank) {
            return bad("dynamic", format!("dim {d} does not exist in a rank-{rank} input"));
        }
        if self.threads.is_empty() {
            return bad("threads", "no thread count to run at".into());
        }
        if let Some(&t) = self.threads.iter().find(|&&t| t == 0 || t > MAX_THREADS) {
            return bad("threads", format!("{t} is outside 1..={MAX_THREADS}"));
        }
        if self.modes.is_empty() {
            return bad("modes", "no lowering mode to check".into());
        }
        for (r, s) in self.run_shapes.iter().enumerate() {
            if s.len() != rank {
                return bad(
                    &format!("run_shapes[{r}]"),
                    format!("{s:?} has rank {}, the input {:?} has rank {rank}", s.len(), self.shape),
                );
            }
        }
        Ok(())
    }

    /// A short label for logs: `add_mean f32 [2,3,4] dims=[-1] keepdim`.
    pub fn label(&self) -> String {
        if let Some(g) = &self.graph {
            return format!("random {} {:?} {} nodes {} inputs", self.dtype, self.shape, g.nodes.len(), g.inputs.len());
        }
        let mut s = format!("{} {} {:?} dims={:?}", self.pattern.name(), self.dtype, self.shape, self.dims);
        if self.keepdim {
            s.push_str(" keepdim");
        }
        if self.format != MemoryFormat::Contiguous {
            s.push(' ');
            s.push_str(self.format.name());
        }
        if let Some(d) = self.mean_dtype {
            s.push_str(&format!(" dtype={d}"));
        }
        if !self.dynamic.is_empty() {
            s.push_str(&format!(" dynamic={:?} runs={:?}", self.dynamic, self.runs()));
        }
        if let Some(k) = self.invalid {
            s.push_str(&format!(" invalid={k:?}"));
        }
        s
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_string()
    } else {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_line_parses_with_defaults_and_round_trips() {
        let c =
            Case::from_json(r#"{"pattern":"add_mean","shape":[2,3,4],"dims":[-1],"keepdim":true,"seed":7}"#).unwrap();
        assert_eq!(c.pattern, Pattern::AddMean);
        assert_eq!(c.dtype, ElemType::F32);
        assert_eq!(c.modes, LoweringMode::ALL.to_vec());
        assert_eq!(c.threads, vec![1, 2]);
        assert_eq!(c.runs(), vec![vec![2, 3, 4]]);
        let line = c.to_json();
        assert!(!line.contains('\n'));
        assert_eq!(Case::from_json(&line).unwrap(), c);
        assert_eq!(line, r#"{"pattern":"add_mean","shape":[2,3,4],"dims":[-1],"keepdim":true,"seed":7}"#);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(Case::from_json(r#"{"pattern":"mean","shape":[2],"dimz":[0]}"#).is_err());
    }

    #[test]
    fn inline_tensor_bits_win_and_specials_survive() {
        let t = Tensor::f32(&[2, 2], vec![1.5, f32::NAN, -0.0, f32::INFINITY]);
        let it = InlineTensor::from_tensor(&t);
        assert_eq!(it.values[1], serde_json::Value::from("nan"));
        let json = serde_json::to_string(&it).unwrap();
        let back: InlineTensor = serde_json::from_str(&json).unwrap();
        let t2 = back.to_tensor().unwrap();
        let (TensorData::F32(a), TensorData::F32(b)) = (&t.data, &t2.data) else { panic!() };
        let bits = |v: &Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a), bits(b));
        // Values only (a PyTorch script), channels_last layout.
        let it = InlineTensor {
            shape: vec![1, 2, 1, 2],
            dtype: ElemType::F16,
            format: MemoryFormat::ChannelsLast,
            quant: None,
            values: vec![1.into(), 2.into(), 3.into(), "-inf".into()],
            bits: vec![],
        };
        let t = it.to_tensor().unwrap();
        assert_eq!(t.format, MemoryFormat::ChannelsLast);
        assert_eq!(t.values_f64(), vec![1.0, 2.0, 3.0, f64::NEG_INFINITY]);
        // Wrong element count is an error, not a panic.
        let bad = InlineTensor { values: vec![1.into()], ..it };
        assert!(bad.to_tensor().is_err());
    }

    #[test]
    fn hash_is_stable_and_ignores_xfail() {
        let mut c = Case::new(Pattern::Mean, &[4], &[0], false);
        let h = c.hash();
        assert_eq!(h.len(), 12);
        c.xfail = Some("known".into());
        assert_eq!(c.hash(), h);
        c.seed = 1;
        assert_ne!(c.hash(), h);
    }
}
