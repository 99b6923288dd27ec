//! Behaviours of real XNNPACK (this build, on x86) that differ from PyTorch's semantics, which
//! the reference implements, and how the XNNPACK comparison ([`super::real`]) models each.
//! Each was found by the fuzz loop, measured on the library (`reports/xnnpack-findings.md`)
//! and is pinned by a regression case under `corpora/regressions/xnnpack-*.json` and by the
//! real-engine tests, so a library that stops (or starts) behaving so is noticed.
//!
//! 1. **Denormals are flushed.** XNNPACK runs every operator with pthreadpool's
//!    `PTHREADPOOL_FLAG_DISABLE_DENORMALS` (`src/operator-run.c`): on x86 its kernels read
//!    fp32 (and bf16) subnormals as zero and write subnormal results as zero. Modelled by
//!    [`flushed_outputs`]: the reference evaluated node by node with every value a delegated
//!    node reads or writes below 2^-126 in magnitude set to a zero of its sign.
//! 2. **fp16 kernels that clamp lose NaN.** The fp16 convolution, depthwise convolution and
//!    fully connected kernels clamp every output to their range (infinite by default) with
//!    min/max instructions that return the bound for a NaN operand, so NaN comes out as the
//!    lower bound (-inf); so do the fp16 binary, clamp and global average pooling kernels with
//!    a finite range. The fp32 kernels keep NaN. In an fp16 program with such a node
//!    ([`drops_nan`]) an element the reference computes as NaN may come out as any value:
//!    those elements, and only those, are left out of the comparison.
//! 3. **fp16 `mean(square(x))` is fused.** `optimize_common_subgraphs` (`src/subgraph.c`)
//!    turns an fp16 `mean(square(x))` into one `reduce_mean_squared(x)`, which has no fp16
//!    kernel, so `xnn_subgraph_fallback_from_fp16_to_fp32` runs it in fp32 together with every
//!    op downstream of it in the delegate: its squares are never rounded to fp16 and do not
//!    overflow at 65504 where PyTorch's fp16 `square` does. Modelled by [`fused_mean_square`].
//!    A `mul(x, x)` is fused the same way (random graphs found it; probe: fp16 `[300, 300,
//!    1, 1]`, `mean(x * x)` gives 44992 where the reference's fp16 products overflow to inf,
//!    `xnnpack-fp16-mean-of-mul-square.json`). A global average pooling of a square over more
//!    than one element per channel matches the same model (seven campaign cases, fp16
//!    `conv -> square` or `mul(y, y) -> pool` over 2x1 to 7x4 areas,
//!    `xnnpack-fp16-reduce-of-square-*.json`, `xnnpack-fp16-pool-chain-*.json`); the
//!    [300, 300, 1, 1] probe's pool of one element per channel gives inf, as the reference
//!    does, so the model is never asked there. XNNPACK elides copies first, so an `XNNCopy`
//!    (a same-type `_to_copy`) between the square and the mean does not stop the fusion (probe: fp16
//!    `mean(to_copy(square(x)))` of `[300, 300, 1, 1]` gives 44992, not inf), and a copy
//!    after the fused mean moves its fp32 value on (`xnnpack-fp16-mean-of-copied-square.json`,
//!    `xnnpack-fused-mean-copy-*.json`; finding 18). The copies go before the pattern match,
//!    so `to_copy(y) * y` is a square too (campaign seed 20261214 case 2570890: fp16
//!    `mean(to_copy(y) * y, -3)` of `y = square(linear(..))`, finite on XNNPACK where the
//!    reference's fourth powers overflow, `xnnpack-fp16-mean-of-copy-times-self.json`;
//!    finding 20).
//!
//! 4. **qs8 ties round its own ways.** XNNPACK's qs8 mean rounds a tie to even *after* adding
//!    the output zero point, its qs8 add rounds ties up; PyTorch's quantize (and its convert)
//!    rounds `x / scale` half to even, then adds the zero point. The outputs oracle's qs8
//!    exactness argument ("any correct implementation gives the same integer") holds for
//!    round-to-nearest with PyTorch's tie rule only: at an exact tie XNNPACK may land one step
//!    away. Modelled by [`unquantized`]: the graph without its final quantize, whose value (exact
//!    in the cases the oracle calls exact) each XNNPACK output must be within half a step of.
//!
//! 5. **A non-finite input to a convolution spreads NaN.** The convolution and fully connected
//!    kernels multiply the padding lanes of their packed weights (zeros) by input values that
//!    lie outside the receptive field, so one infinite (or NaN) input gives inf × 0 = NaN in
//!    neighbouring outputs whose exact value is finite, or NaN where it is infinite (measured:
//!    a 1x1 depthwise convolution, one channel, over NHWC [1, 3, 3, 1] with +inf at pixel 2
//!    gives NaN at pixels 0, 1 and 2; over one pixel, NaN for -inf). When a delegated
//!    convolution or linear node of the graph reads a non-finite value (the reference's values
//!    say so), an element may therefore come out NaN (in fp16, through behaviour 2, as a
//!    clamping node's lower bound): those elements, and only they, are then left out. In fp16
//!    that lower bound (-inf) then flows on like any value: a later convolution multiplies it
//!    by each weight, so a negative one makes it +inf (fuzz seed 8, `conv_mean_conv` over
//!    [1, 1, 1, 2] with NaN at pixel 1: +inf and -inf at pixel 0 by the sign of the second
//!    conv's weights): there any non-finite value is left out.
//!
//! Behaviours 2 and 5 leave elements out of a comparison against the reference and against
//! the models of 1 and 3 alike, each time where that model's own value is NaN (fuzz seed 8,
//! `pre_norm_mlp` fp16 with NaN inputs in some rows and `x^2` past 65504 in others: the rows
//! of the fused mean match behaviour 3's model, the NaN rows only with 2).
//! 6. **fp16 depthwise convolutions accumulate in fp16.** Their kernels round the accumulator
//!    to fp16 after every tap (measured: 3x3 taps of 1 then 2^-11 x 8 give 1, not 1.0039);
//!    convolution, fully connected, mean and global average pooling accumulate in fp32 (same
//!    probe). That is one more fp16 rounding of a partial sum (at most `M`) per tap, `T u_c M`
//!    for `T` taps: [`fp16_dwconv_taps`] says how many the XNNPACK comparison adds, as
//!    `ceil(T / 2)` more ops in the `2 k u_c M` term. (Only a depth multiplier of 1 takes the
//!    depthwise kernel: with 2 output channels per input channel the same probe gives 1.0039,
//!    a GEMM's fp32 sum; `fp16_one_to_one_channel_convolutions_accumulate_in_fp16`.) At the
//!    top of the range the per-tap rounding also keeps a sum finite that the reference's one
//!    rounding overflows: `65504 + 5.7 + ...` stays 65504 tap after tap, while the exact sum
//!    65522 is past 65520 and rounds to inf (campaign seed 20261214 case 718356,
//!    `conv_mean_conv` fp16 with a 65504 special, `xnnpack-fp16-dwconv-keeps-finite.json`;
//!    finding 19). Where a delegated convolution's reference value overflowed that way (an
//!    infinity from finite operands, [`overflowed_conv`]), an element the reference computes
//!    as ±inf may come out finite: those elements, and only they, are left out, as with 2.
//!
//! 7. **A converted value copied and read again corrupts the heap.** When a payload's
//!    `XNNConvert` writes a value that an `XNNCopy` reads and something else reads too
//!    (another node, or the payload's outputs; shrunk twice: `dq(q(x))` copied and an output,
//!    `dq(q(x))` copied and added to `x`, `xnnpack-convert-output-read-*.json`) (or the payload has an fp16/bf16 convert and an fp16/bf16 value
//!    read twice: the bf16 case did not shrink further in the time there was), XNNPACK aborts with heap corruption (a segmentation fault) or
//!    gives wrong values (random graphs found it; smallest: fp32 [1,1,1,1], `dq(q(x))` read
//!    by a copy and also an output, `xnnpack-convert-output-read-qdq-copy.json`; first met as a
//!    bf16 graph whose outputs were 15 of 30 elements wrong, `xnnpack-folded-convert-*.json`;
//!    `reports/xnnpack-findings.md` finding 16). Nothing in PyTorch's semantics explains a
//!    crash, so it is not modelled as values: [`folded_convert`] finds such a payload and the
//!    XNNPACK comparison (and `replay`'s side-by-side table) skips it with that reason,
//!    counted, never a pass.
//!
//! 8. **A clamp after a clamped node with a disjoint range is refused.** XNNPACK fuses a
//!    `XNNClamp` into the node it reads when that node already has an output range (through
//!    a chain of clamps), and the intersection of the ranges is its new range; when they do not intersect (a conv
//!    clamped to `(-1, 1)`, then `clamp(min = 2)`, which PyTorch computes as the constant 2)
//!    `xnn_create_runtime_v2` fails with `invalid_parameter` (random graphs, fuzz `--pattern
//!    random --seed 43` cases 52016 and 2496299, both shrunk to fp16 conv -> clamp ->
//!    `rsqrt`'s clamp). An fp16 range that meets in one point is refused too (fp16 conv
//!    -> `clamp(-1, 1)` -> `clamp(min = 1)`, campaign seed 20261211 case 546892; the same
//!    graph in fp32 or bf16 runs and gives 1), as XNNPACK's fp16 operators want the bounds,
//!    rounded to fp16, strictly ordered. [`disjoint_clamps`] finds such a payload; the
//!    XNNPACK comparison skips it with that reason, counted.
//!
//! 9. **bf16 ops without a bf16 kernel run in fp32, unrounded between them.**
//!    `xnn_subgraph_fallback_from_bf16_to_fp32` keeps the native bf16 kernels (GEMMs,
//!    reductions) and runs every other bf16 op in fp32, inserting converts only at the edges of
//!    such chains: a chain's intermediate values are never rounded to bf16 (probe: bf16
//!    `square(255 + 0.5)` gives 65280, the reference rounds the sum to 256 and gives 65536).
//!    Within bf16 that is inside the tolerance; a later cast to fp16 turns the reference's
//!    65536 into inf (random graphs, fuzz `--pattern random --seed 43` case 640011: bf16
//!    `add -> square -> mean(dtype=f16)`, 52320 on XNNPACK,
//!    `xnnpack-bf16-chain-in-fp32-*.json`). Modelled by [`bf16_in_fp32`]. Which kernels
//!    count as native in this build was not probed: the model takes the convolutions,
//!    linears, means and poolings as native (reading bf16-rounded operands), as the fallback's
//!    header says; where they are not, their operands differ by one bf16 rounding, which the
//!    comparison's tolerance decides like any other value (a model never widens it).
//!
//! 10. **qs8 means over long rows wrap in int16.** XNNPACK's qs8 mean sums a row of the
//!     innermost (merged) reduced dims with its `qs8_rsum` kernel, which adds pairs of int8s
//!     into 32 int16 lanes (one pair per lane per 64 elements) and widens them to int32 only
//!     every 16,384 elements: a lane past 128 pairs can leave the int16 range and wrap.
//!     Probed (AMD EPYC Zen 3, AVX2) with constant inputs: a row of 8,256 elements of -128 (129
//!     pairs of -256 per lane) gives a mean of +45 steps above the zero point instead of -128;
//!     8,255 and fewer are exact; the model `S = 32 wrap16(2 q floor(r / 64)) + q (r mod 64)`
//!     per 16,384-element block `r` matches 80 of 80 probes from 8,193 to 70,000 elements
//!     (`qs8_mean_rows_past_8192_elements_wrap`). A row is the product of the trailing run of
//!     reduced dims, as `xnn_normalize_reduction` merges them: `[13341]` over its dim, `[3, 15,
//!     18, 16]` over all (12,960), `[2, 1, 100, 100]` over dims 1 to 3. A non-innermost reduction
//!     (its `rdsum` kernel) and global average pooling do not wrap (probed to 20,000 rows).
//!     Which elements share a lane depends on the kernel this CPU gets, so the value is not
//!     modelled: [`qs8_wrapping_rows`] finds such a payload, and a difference there is a skip
//!     with that reason, counted, never a pass; a matching output still passes (campaign seed
//!     20261216: four qs8 `mean` cases, `xnnpack-qs8-mean-long-row-*.json`; finding 23).
//!
//! An output passes against a model only within the same derived tolerance as against the
//! reference (for 4, half a step of the exact value), so a dropped element or a wrong divisor
//! still fails.

use super::RefRun;
use crate::engine::{self, Interpreter};
use crate::patterns::Built;
use delegate::program::Step;
use delegate::LoweredProgram;
use reference::graph::{Graph, Node, Op};
use reference::{ElemType, Tensor};
use std::cell::OnceCell;

/// Whether a loaded payload has an fp16 node whose XNNPACK kernel clamps its output and so
/// turns NaN into the range's lower bound: a convolution, depthwise convolution or fully
/// connected node (always), or a binary, clamp or global average pooling node with a finite
/// output range.
pub fn drops_nan(g: &delegate::xnn::XnnGraph) -> bool {
    use delegate::xnn::{XNodeKind, XnnDatatype};
    let fp16 = |id: Option<u32>| g.values.iter().any(|v| Some(v.id_out) == id && v.datatype == XnnDatatype::Fp16);
    g.nodes.iter().any(|n| {
        let ranged = n.output_min_max.is_some_and(|(lo, hi)| lo.is_finite() || hi.is_finite());
        let clamps = match n.kind {
            XNodeKind::Conv2d(_) | XNodeKind::DepthwiseConv2d(_) | XNodeKind::FullyConnected { .. } => true,
            XNodeKind::Add { .. }
            | XNodeKind::Subtract { .. }
            | XNodeKind::Multiply { .. }
            | XNodeKind::Div { .. }
            | XNodeKind::Clamp { .. }
            | XNodeKind::GlobalAvgPooling2d { .. } => ranged,
            _ => false,
        };
        clamps && fp16(n.kind.output())
    })
}

/// Behaviour 7: a payload with an `XNNConvert` whose output an `XNNCopy` reads and something
/// else too (another node, or the payload's outputs), or with an fp16/bf16 `XNNConvert` and
/// an fp16/bf16 value read twice (the shapes the aborting cases shrank to).
pub fn folded_convert(g: &delegate::xnn::XnnGraph) -> bool {
    use delegate::xnn::{XNodeKind, XnnDatatype};
    // Readers of a value: nodes, and the payload's outputs.
    let reads = |id: u32| {
        g.nodes.iter().filter(|m| m.kind.inputs().contains(&id)).count() + g.output_ids.contains(&id) as usize
    };
    let narrow = |id: u32| {
        g.values.iter().any(|v| v.id_out == id && matches!(v.datatype, XnnDatatype::Fp16 | XnnDatatype::Bf16))
    };
    let converts = || g.nodes.iter().filter(|n| matches!(n.kind, XNodeKind::Convert { .. }));
    let copied =
        |o: u32| g.nodes.iter().any(|m| matches!(m.kind, XNodeKind::Copy { .. }) && m.kind.inputs().contains(&o));
    let output_read = converts().filter_map(|n| n.kind.output()).any(|o| copied(o) && reads(o) >= 2);
    let narrow_convert = converts().any(|n| n.kind.inputs().into_iter().chain(n.kind.output()).any(narrow));
    let narrow_twice = g.values.iter().any(|v| narrow(v.id_out) && reads(v.id_out) >= 2);
    output_read || narrow_convert && narrow_twice
}

/// Behaviour 8: an `XNNClamp` whose range, met with the ranges of the clamped nodes it
/// reads through a chain of clamps (XNNPACK fuses them all), is empty.
pub fn disjoint_clamps(g: &delegate::xnn::XnnGraph) -> bool {
    use delegate::xnn::{XNode, XNodeKind, XnnDatatype};
    let range = |n: &XNode| n.output_min_max.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let producer = |n: &XNode| {
        let input = n.kind.inputs().first().copied();
        g.nodes.iter().find(|p| input.is_some() && p.kind.output() == input)
    };
    g.nodes.iter().filter(|c| matches!(c.kind, XNodeKind::Clamp { .. })).any(|c| {
        let (mut lo, mut hi) = range(c);
        let mut at = c;
        // Up the chain: each clamp's producer, while it has a range (a cycle-free graph ends).
        for _ in 0..g.nodes.len() {
            let Some(p) = producer(at).filter(|p| p.output_min_max.is_some()) else { break };
            let (l, h) = range(p);
            (lo, hi) = (lo.max(l), hi.min(h));
            if !matches!(p.kind, XNodeKind::Clamp { .. }) {
                break;
            }
            at = p;
        }
        let fp16 = g.values.iter().any(|v| Some(v.id_out) == c.kind.output() && v.datatype == XnnDatatype::Fp16);
        if fp16 {
            let h = |v: f32| half::f16::from_f32(v).to_f32();
            h(lo) >= h(hi)
        } else {
            lo > hi
        }
    })
}

/// Longest qs8 row XNNPACK's mean sums without an int16 lane leaving its range: 128 pairs in
/// each of 32 lanes (behaviour 10).
pub const QS8_EXACT_ROW: usize = 8192;

/// Behaviour 10: a qs8 `XNNStaticMean` whose innermost reduced run of dims (merged as
/// `xnn_normalize_reduction` does) holds more than [`QS8_EXACT_ROW`] elements.
pub fn qs8_wrapping_rows(g: &delegate::xnn::XnnGraph) -> bool {
    use delegate::xnn::{XNodeKind, XnnDatatype};
    g.nodes.iter().any(|n| {
        let XNodeKind::StaticMean { reduction_axes, input_id, .. } = &n.kind else { return false };
        let Some(v) = g.values.iter().find(|v| v.id_out == *input_id && v.datatype == XnnDatatype::Qint8) else {
            return false;
        };
        // The trailing run of reduced dims (none, a row of 1, when the last dim is kept).
        let reduced = |d: &usize| reduction_axes.contains(&(*d as u32));
        let row = (0..v.dims.len()).rev().take_while(reduced).fold(1usize, |r, d| r.saturating_mul(v.dims[d] as usize));
        row > QS8_EXACT_ROW
    })
}

/// The largest tap count of an fp16 depthwise convolution in a loaded payload (behaviour 6;
/// 0 when there is none): the bias adds one more rounding.
pub fn fp16_dwconv_taps(g: &delegate::xnn::XnnGraph) -> usize {
    use delegate::xnn::{XNodeKind, XnnDatatype};
    let fp16 = |id: u32| g.values.iter().any(|v| v.id_out == id && v.datatype == XnnDatatype::Fp16);
    g.nodes
        .iter()
        .filter_map(|n| match &n.kind {
            XNodeKind::DepthwiseConv2d(c) if fp16(c.output_id) => {
                Some(c.kernel_height as usize * c.kernel_width as usize + usize::from(c.bias_id != u32::MAX))
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Whether a delegated convolution's reference output has an infinity while every value it
/// reads is finite: its exact sum overflowed in the one rounding (behaviour 6). `values`: the
/// graph evaluated on the inputs with every non-finite element zeroed, so an input's
/// infinities or NaNs elsewhere do not hide an overflow.
fn overflowed_conv(g: &Graph, portable: &[usize], values: &[Tensor]) -> bool {
    let finite = |t: &Tensor| t.values_f64().iter().all(|v| v.is_finite());
    g.nodes.iter().enumerate().any(|(i, n)| {
        matches!(n.op, Op::Conv2d(_))
            && !portable.contains(&i)
            && n.inputs.iter().all(|&x| values.get(x).is_some_and(finite))
            && values.get(i).is_some_and(|t| t.values_f64().iter().any(|v| v.is_infinite()))
    })
}

/// `t` with every non-finite element set to zero.
fn zero_nonfinite(t: &Tensor) -> Tensor {
    let v: Vec<f64> = t.values_f64().iter().map(|&v| if v.is_finite() { v } else { 0.0 }).collect();
    Tensor::from_f64(&t.shape, t.dtype(), t.quant, &v).to_format(t.format)
}

/// Whether a delegated convolution or linear node reads a non-finite value (behaviour 5).
fn gemm_reads_nonfinite(g: &Graph, portable: &[usize], values: &[Tensor]) -> bool {
    g.nodes.iter().enumerate().any(|(i, n)| {
        matches!(n.op, Op::Conv2d(_) | Op::Linear)
            && !portable.contains(&i)
            && n.inputs
                .first()
                .and_then(|&x| values.get(x))
                .is_some_and(|t| t.values_f64().iter().any(|v| !v.is_finite()))
    })
}

/// The lower bounds of a payload's fp16 clamping nodes (behaviour 2): -inf, or their range's.
fn clamp_lower_bounds(g: &delegate::xnn::XnnGraph) -> Vec<f64> {
    let mut v = vec![f64::NEG_INFINITY];
    v.extend(g.nodes.iter().filter_map(|n| n.output_min_max).map(|(lo, _)| lo as f64));
    v
}

/// `got` with the reference's value where `excused(want, got)` holds (behaviours 2 and 5);
/// `None` when nothing is excused.
fn excusing(want: &Tensor, got: &Tensor, excused: impl Fn(f64, f64) -> bool) -> Option<Tensor> {
    let (w, mut g) = (want.values_f64(), got.values_f64());
    if w.len() != g.len() || got.shape != want.shape {
        return None;
    }
    let mut any = false;
    for (gv, &wv) in g.iter_mut().zip(&w) {
        if excused(wv, *gv) && !(gv.is_nan() && wv.is_nan()) && *gv != wv {
            *gv = wv;
            any = true;
        }
    }
    any.then(|| Tensor::from_f64(&got.shape, got.dtype(), got.quant, &g).to_format(got.format))
}

/// Whether a loaded payload has a node pair XNNPACK fuses into a `reduce_mean_squared`: an
/// fp16 `XNNStaticMean` reading the output of an `XNNSquare` (its `optimize_common_subgraphs`
/// checks only that the mean's input is fp16 or fp32 and produced by a square).
fn fuses_mean_square(g: &delegate::xnn::XnnGraph) -> bool {
    use delegate::xnn::{XNodeKind, XnnDatatype};
    let fp16 = |id: u32| g.values.iter().any(|v| v.id_out == id && v.datatype == XnnDatatype::Fp16);
    // XNNPACK elides copies first, so the square may sit behind a chain of them (probe:
    // fp16 `mean(to_copy(square(x)))` of [300, 300, 1, 1] gives 44992, not inf).
    let through_copies = |mut id: u32| {
        for _ in 0..g.nodes.len() {
            match g.nodes.iter().find(|p| p.kind.output() == Some(id)).map(|p| &p.kind) {
                Some(XNodeKind::Copy { input_id, .. }) => id = *input_id,
                _ => break,
            }
        }
        id
    };
    g.nodes.iter().any(|n| match n.kind {
        XNodeKind::StaticMean { input_id, .. } | XNodeKind::GlobalAvgPooling2d { input_id, .. } => {
            let input_id = through_copies(input_id);
            fp16(input_id)
                && g.nodes.iter().any(|p| match p.kind {
                    XNodeKind::Square { output_id, .. } => output_id == input_id,
                    // `x * x` is a square to its pattern match too (the probe in the docs), and
                    // so is `copy(x) * x`: the copies are gone by then.
                    XNodeKind::Multiply { input1_id, input2_id, output_id, .. } => {
                        output_id == input_id && through_copies(input1_id) == through_copies(input2_id)
                    }
                    _ => false,
                })
        }
        _ => false,
    })
}

/// The graph as XNNPACK evaluates it once a delegate's fp16 `mean(square(x))` is fused into
/// `reduce_mean_squared(x)`: that reduction has no fp16 kernel, so XNNPACK's
/// `xnn_subgraph_fallback_from_fp16_to_fp32` runs it in fp32 (its squares are never rounded to
/// fp16 and do not overflow at 65504), and every op downstream of it in the delegate follows
/// in fp32 ("transparent" ops), until a convert or the delegate's edge rounds back to fp16.
/// Here: every fp16 node reached from such a mean, except ops left outside the delegate
/// (`portable`, graph node ids), computes in fp32; a portable op or a graph output reading one
/// gets it converted back to fp16; a `_to_copy` reads it as it is (XNNPACK elides an fp32 ->
/// fp32 convert and keeps an fp32 -> fp16 one). `None` when no mean is fused.
pub fn fused_mean_square(g: &Graph, portable: &[usize]) -> Option<Graph> {
    let delegated = |i: usize| !portable.contains(&i);
    // A delegated fp16 -> fp16 `_to_copy`: an `XNNCopy` (or a transpose), which XNNPACK
    // elides before it fuses, and which the fp32 fallback runs in fp32 like any data move.
    let copy16 = |i: usize| {
        let n = &g.nodes[i];
        matches!(n.op, Op::ToCopy { .. })
            && n.spec.dtype == ElemType::F16
            && delegated(i)
            && n.inputs.first().is_some_and(|&x| g.nodes[x].spec.dtype == ElemType::F16)
    };
    // The mean's operand with the copies before it skipped.
    let behind_copies = |mut x: usize| {
        while copy16(x) {
            x = g.nodes[x].inputs[0];
        }
        x
    };
    let fused = |i: usize| {
        let n = &g.nodes[i];
        matches!(n.op, Op::Mean { dtype: None, .. } | Op::AdaptiveAvgPool2d { .. })
            && n.spec.dtype == ElemType::F16
            && delegated(i)
            && n.inputs.first().is_some_and(|&s| {
                let k = behind_copies(s);
                let sq = &g.nodes[k];
                let square = match sq.op {
                    Op::Square => true,
                    Op::Binary(reference::graph::BinaryOp::Mul) => {
                        behind_copies(sq.inputs[0]) == behind_copies(sq.inputs[1])
                    }
                    _ => false,
                };
                square && sq.spec.dtype == ElemType::F16 && delegated(k)
            })
    };
    // Which nodes compute in fp32.
    let mut wide = vec![false; g.nodes.len()];
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let computes = !matches!(n.op, Op::Input { .. } | Op::Constant { .. } | Op::ToCopy { .. }) || copy16(i);
        wide[i] = fused(i)
            || (computes && delegated(i) && n.spec.dtype == ElemType::F16 && n.inputs.iter().any(|&x| wide[x]));
    }
    widened(g, &wide, &fused, &behind_copies, ElemType::F16)
}

/// The graph with the nodes marked `wide` computed in fp32 from operands in fp32 (a narrow
/// `narrow`-typed operand converted exactly), their values rounded back to `narrow` where a
/// node that is not wide reads them (a `_to_copy` that is not a same-type copy reads them as
/// they are: XNNPACK elides an fp32 -> fp32 convert and converts fp32 -> fp16 directly) and at
/// the graph's outputs. `fused(i)`: node `i` is a mean of a square behind `behind` (behaviour
/// 3), computed as the fp32 mean of fp32 squares. `None` when nothing is wide.
fn widened(
    g: &Graph,
    wide: &[bool],
    fused: &dyn Fn(usize) -> bool,
    behind: &dyn Fn(usize) -> usize,
    narrow: ElemType,
) -> Option<Graph> {
    use reference::graph::TensorSpec;
    if !wide.iter().any(|&w| w) {
        return None;
    }
    let same_type_copy = |i: usize| {
        let n = &g.nodes[i];
        matches!(n.op, Op::ToCopy { .. })
            && n.spec.dtype == narrow
            && n.inputs.first().is_some_and(|&x| g.nodes[x].spec.dtype == narrow)
    };
    let f32_spec = |spec: &TensorSpec| TensorSpec { dtype: ElemType::F32, ..spec.clone() };
    let mut nodes: Vec<Node> = Vec::with_capacity(g.nodes.len() * 2);
    let push = |nodes: &mut Vec<Node>, op: Op, inputs: Vec<usize>, spec: TensorSpec| {
        nodes.push(Node { op, inputs, spec });
        nodes.len() - 1
    };
    let to = |dt: ElemType| Op::ToCopy { dtype: Some(dt), format: None };
    // Per original node: its id in the model, and (made on first use) its value in the other
    // precision (fp32 of a narrow fp16 value, fp16 of a wide one).
    let mut map: Vec<usize> = Vec::with_capacity(g.nodes.len());
    let mut other: Vec<Option<usize>> = vec![None; g.nodes.len()];
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let mut input = |nodes: &mut Vec<Node>, x: usize, want_wide: bool| -> usize {
            let narrow_x = g.nodes[x].spec.dtype == narrow;
            if wide[x] == want_wide || (!wide[x] && !narrow_x) {
                return map[x];
            }
            *other[x].get_or_insert_with(|| {
                let (op, spec) = if wide[x] {
                    (to(narrow), g.nodes[x].spec.clone())
                } else {
                    (to(ElemType::F32), f32_spec(&g.nodes[x].spec))
                };
                push(nodes, op, vec![map[x]], spec)
            })
        };
        let id = if fused(i) {
            let sq = &g.nodes[behind(n.inputs[0])];
            let x = input(&mut nodes, sq.inputs[0], true);
            let squared = push(&mut nodes, Op::Square, vec![x], f32_spec(&sq.spec));
            push(&mut nodes, n.op.clone(), vec![squared], f32_spec(&n.spec))
        } else if wide[i] {
            let ins = n.inputs.iter().map(|&x| input(&mut nodes, x, true)).collect();
            // A wide same-type copy copies the fp32 value: its dtype argument says so.
            let op = match n.op {
                Op::ToCopy { dtype: Some(_), format } => Op::ToCopy { dtype: Some(ElemType::F32), format },
                ref op => op.clone(),
            };
            push(&mut nodes, op, ins, f32_spec(&n.spec))
        } else {
            let reads_as_is = matches!(n.op, Op::ToCopy { .. }) && !same_type_copy(i);
            let ins =
                n.inputs.iter().map(|&x| if reads_as_is { map[x] } else { input(&mut nodes, x, false) }).collect();
            push(&mut nodes, n.op.clone(), ins, n.spec.clone())
        };
        map.push(id);
    }
    let inputs = g.inputs.iter().map(|&i| map[i]).collect();
    let mut outputs = Vec::with_capacity(g.outputs.len());
    for &o in &g.outputs {
        outputs.push(if wide[o] {
            push(&mut nodes, to(narrow), vec![map[o]], g.nodes[o].spec.clone())
        } else {
            map[o]
        });
    }
    Some(Graph { nodes, inputs, outputs })
}

/// Behaviour 9: the graph as XNNPACK evaluates a delegate's bf16 ops.
/// `xnn_subgraph_fallback_from_bf16_to_fp32` keeps the native bf16 kernels (GEMMs, reductions)
/// and runs every other bf16 op in fp32, with no bf16 rounding between two such ops (probe:
/// bf16 `square(255 + 0.5)` gives 65280, the fp32 square of 255.5 rounded once; the reference
/// rounds the sum to 256 first, 65536). Here: every delegated bf16 node but an input,
/// constant, convolution, linear, mean or pooling computes in fp32 (a dtype-changing
/// `_to_copy` is a convert, which reads the fp32 value). `None` when there is no such node.
pub fn bf16_in_fp32(g: &Graph, portable: &[usize]) -> Option<Graph> {
    let wide: Vec<bool> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let native = matches!(
                n.op,
                Op::Input { .. }
                    | Op::Constant { .. }
                    | Op::Conv2d(_)
                    | Op::Linear
                    | Op::Mean { .. }
                    | Op::AdaptiveAvgPool2d { .. }
            );
            let convert = matches!(n.op, Op::ToCopy { .. })
                && n.inputs.first().is_some_and(|&x| g.nodes[x].spec.dtype != ElemType::Bf16);
            n.spec.dtype == ElemType::Bf16 && !portable.contains(&i) && !native && !convert
        })
        .collect();
    widened(g, &wide, &|_| false, &|x| x, ElemType::Bf16)
}

/// The smallest normal f32 (and bf16) magnitude, 2^-126.
const MIN_NORMAL: f64 = 1.1754943508222875e-38;

/// `t` with every fp32 or bf16 value below 2^-126 in magnitude set to a zero of its sign
/// (behaviour 1); other types unchanged.
fn flush(t: &Tensor) -> Tensor {
    if !matches!(t.dtype(), ElemType::F32 | ElemType::Bf16) {
        return t.clone();
    }
    let v = t.values_f64();
    if !v.iter().any(|x| *x != 0.0 && x.abs() < MIN_NORMAL) {
        return t.clone();
    }
    let f: Vec<f64> = v.iter().map(|&x| if x.abs() < MIN_NORMAL { 0.0f64.copysign(x) } else { x }).collect();
    Tensor::from_f64(&t.shape, t.dtype(), t.quant, &f).to_format(t.format)
}

/// The reference's value of node `n` on operand values `ins` (a one-node graph).
fn eval_one(g: &Graph, n: &Node, ins: &[Tensor], interp: Interpreter) -> Option<Tensor> {
    let mut nodes: Vec<Node> = n
        .inputs
        .iter()
        .enumerate()
        .map(|(k, &x)| Node { op: Op::Input { name: format!("in{k}") }, inputs: vec![], spec: g.nodes[x].spec.clone() })
        .collect();
    let k = nodes.len();
    nodes.push(Node { op: n.op.clone(), inputs: (0..k).collect(), spec: n.spec.clone() });
    let one = Graph { nodes, inputs: (0..k).collect(), outputs: vec![k] };
    engine::reference(&one, ins, interp).ok()?.pop()
}

/// The graph's outputs with XNNPACK's denormal flushing on the nodes it runs (every node but
/// `portable` ones): behaviour 1. `None` when some node does not evaluate.
pub fn flushed_outputs(g: &Graph, portable: &[usize], inputs: &[Tensor], interp: Interpreter) -> Option<Vec<Tensor>> {
    let mut vals: Vec<Tensor> = Vec::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let v = match &n.op {
            Op::Input { .. } => inputs.get(g.inputs.iter().position(|&x| x == i)?)?.clone(),
            Op::Constant { tensor } => tensor.clone(),
            _ if portable.contains(&i) => {
                let ins: Vec<Tensor> = n.inputs.iter().map(|&x| vals[x].clone()).collect();
                eval_one(g, n, &ins, interp)?
            }
            _ => {
                let ins: Vec<Tensor> = n.inputs.iter().map(|&x| flush(&vals[x])).collect();
                flush(&eval_one(g, n, &ins, interp)?)
            }
        };
        vals.push(v);
    }
    Some(g.outputs.iter().map(|&o| vals[o].clone()).collect())
}

/// The graph with each output's final `dequantize(quantize(v))` removed, so it outputs `v`
/// (behaviour 4). `None` unless every output ends so.
pub fn unquantized(g: &Graph) -> Option<Graph> {
    let mut outputs = Vec::with_capacity(g.outputs.len());
    for &o in &g.outputs {
        let (Op::Dequantize(dq), [q]) = (&g.nodes[o].op, g.nodes[o].inputs.as_slice()) else { return None };
        let (Op::Quantize(qq), [v]) = (&g.nodes[*q].op, g.nodes[*q].inputs.as_slice()) else { return None };
        if dq != qq {
            return None;
        }
        outputs.push(*v);
    }
    Some(Graph { nodes: g.nodes.clone(), inputs: g.inputs.clone(), outputs })
}

/// Every element of `got` equal to the reference's `want` or within half a `step` of `exact`
/// (at a tie either neighbour will do; where `exact` lies outside the quantized range the
/// reference's clamped value is the only answer).
fn nearest_to(exact: &Tensor, want: &Tensor, got: &Tensor, step: f32) -> bool {
    let (e, w, g) = (exact.values_f64(), want.values_f64(), got.values_f64());
    let half = step as f64 / 2.0;
    e.len() == g.len()
        && w.len() == g.len()
        && e.iter().zip(&w).zip(&g).all(|((&e, &w), &g)| g == w || (g - e).abs() <= half + e.abs() * 2f64.powi(-22))
}

/// The models that apply to one lowered program, evaluated on first use per run.
pub struct Models<'a> {
    graph: &'a Graph,
    portable: Vec<usize>,
    /// Behaviour 2 applies.
    drops_nan: bool,
    /// Behaviour 2's lower bounds: what a NaN comes out as.
    nan_bounds: Vec<f64>,
    /// Behaviour 5, per run: a delegated convolution or linear reads a non-finite value.
    gemm_nonfinite: Vec<OnceCell<bool>>,
    /// Behaviour 6 applies: an fp16 depthwise convolution.
    dwconv16: bool,
    /// Behaviour 6, per run: a delegated convolution overflowed in the reference's rounding.
    conv_overflow: Vec<OnceCell<bool>>,
    /// Behaviour 3's graph, when a mean is fused.
    fused: Option<Graph>,
    /// Behaviour 9's graph, when a delegated bf16 op runs in fp32.
    bf16_wide: Option<Graph>,
    bf16_runs: Vec<OnceCell<Option<Vec<Tensor>>>>,
    /// Behaviour 1 may matter: some fp32 or bf16 value.
    flushes: bool,
    /// Behaviour 4's graph, for qs8 programs.
    unquantized: Option<Graph>,
    unquantized_runs: Vec<OnceCell<Option<Vec<Tensor>>>>,
    refs: &'a [RefRun<'a>],
    /// The runs' evaluator (the fuzz loop's fast one gives the plain one's values bit for
    /// bit: `reference/tests/fast_matches_plain.rs`); the models are graphs of the same
    /// language, evaluated on large inputs too.
    interp: Interpreter,
    fused_runs: Vec<OnceCell<Option<Vec<Tensor>>>>,
    flushed_runs: Vec<OnceCell<Option<Vec<Tensor>>>>,
}

impl<'a> Models<'a> {
    /// `loaded`: what the loader returned for each of the program's payloads.
    pub fn new(
        built: &'a Built,
        program: &LoweredProgram,
        loaded: &[delegate::xnn::XnnGraph],
        refs: &'a [RefRun<'a>],
    ) -> Models<'a> {
        let portable: Vec<usize> = program
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Portable(p) => Some(p.node),
                Step::Delegate(_) => None,
            })
            .collect();
        let fused =
            if loaded.iter().any(fuses_mean_square) { fused_mean_square(&built.graph, &portable) } else { None };
        let bf16_wide = bf16_in_fp32(&built.graph, &portable);
        let flushes = built.graph.nodes.iter().any(|n| matches!(n.spec.dtype, ElemType::F32 | ElemType::Bf16));
        let qs8 = built.graph.nodes.iter().any(|n| n.spec.dtype == ElemType::Qs8);
        let unquantized = if qs8 { unquantized(&built.graph) } else { None };
        fn cells<T>(refs: &[RefRun]) -> Vec<OnceCell<T>> {
            refs.iter().map(|_| OnceCell::new()).collect()
        }
        Models {
            graph: &built.graph,
            portable,
            drops_nan: loaded.iter().any(drops_nan),
            nan_bounds: loaded.iter().flat_map(clamp_lower_bounds).collect(),
            gemm_nonfinite: cells(refs),
            dwconv16: loaded.iter().any(|g| fp16_dwconv_taps(g) > 0),
            conv_overflow: cells(refs),
            fused,
            bf16_wide,
            bf16_runs: cells(refs),
            flushes,
            unquantized,
            unquantized_runs: cells(refs),
            refs,
            interp: refs.first().map_or(Interpreter::Plain, |r| r.interp),
            fused_runs: cells(refs),
            flushed_runs: cells(refs),
        }
    }

    /// Whether output `o` of run `r`, `got`, beyond its tolerance of the reference `want`, is
    /// explained by a documented behaviour: `within(model, got)` compares under the output's
    /// tolerance; `step` is a qs8 output's quantization step.
    pub fn explains(
        &self,
        r: usize,
        o: usize,
        want: &Tensor,
        got: &Tensor,
        step: Option<f32>,
        within: &mut dyn FnMut(&Tensor, &Tensor) -> bool,
    ) -> bool {
        if let (Some(g), Some(step)) = (&self.unquantized, step) {
            let inputs = &self.refs[r].inputs;
            let m = self.unquantized_runs[r].get_or_init(|| engine::reference(g, inputs, self.interp).ok());
            if m.as_ref().and_then(|m| m.get(o)).is_some_and(|m| nearest_to(m, want, got, step)) {
                return true;
            }
        }
        // Behaviour 2: the reference's NaNs may be anything; 5: anything may be NaN (with 2
        // too, a clamping node's lower bound).
        let inputs = &self.refs[r].inputs;
        let (nan_any, bounds) = (self.drops_nan, &self.nan_bounds);
        let spread_like =
            got.values_f64().iter().any(|v| v.is_nan() || (nan_any && (bounds.contains(v) || v.is_infinite())));
        let spreads = spread_like
            && *self.gemm_nonfinite[r].get_or_init(|| {
                engine::reference_all(self.graph, inputs, self.interp)
                    .is_ok_and(|all| gemm_reads_nonfinite(self.graph, &self.portable, &all))
            });
        // 6: a reference infinity may be finite where a convolution's sum overflowed only in
        // the reference's one rounding.
        let kept_finite = self.dwconv16
            && want.values_f64().iter().zip(got.values_f64()).any(|(w, g)| w.is_infinite() && g.is_finite())
            && *self.conv_overflow[r].get_or_init(|| {
                let finite: Vec<Tensor> = inputs.iter().map(zero_nonfinite).collect();
                engine::reference_all(self.graph, &finite, self.interp)
                    .is_ok_and(|all| overflowed_conv(self.graph, &self.portable, &all))
            });
        // Once a spread NaN comes out of a clamping fp16 node as its lower bound (-inf), a
        // later product with a negative weight turns it into +inf: with 2, any non-finite value.
        let excused = |w: f64, g: f64| {
            (nan_any && w.is_nan())
                || (spreads && (g.is_nan() || (nan_any && (bounds.contains(&g) || g.is_infinite()))))
                || (kept_finite && w.is_infinite() && g.is_finite())
        };
        // 2 and 5 combine with the others: masked against each model's own values.
        let mut matches = |m: &Tensor| {
            let masked = excusing(m, got, excused);
            (masked.is_some() || !std::ptr::eq(m, want)) && within(m, masked.as_ref().unwrap_or(got))
        };
        if matches(want) {
            return true;
        }
        if let Some(g) = &self.fused {
            let m = self.fused_runs[r].get_or_init(|| engine::reference(g, inputs, self.interp).ok());
            if m.as_ref().and_then(|m| m.get(o)).is_some_and(&mut matches) {
                return true;
            }
        }
        if let Some(g) = &self.bf16_wide {
            let m = self.bf16_runs[r].get_or_init(|| engine::reference(g, inputs, self.interp).ok());
            if m.as_ref().and_then(|m| m.get(o)).is_some_and(&mut matches) {
                return true;
            }
        }
        if self.flushes {
            let m =
                self.flushed_runs[r].get_or_init(|| flushed_outputs(self.graph, &self.portable, inputs, self.interp));
            if m.as_ref().and_then(|m| m.get(o)).is_some_and(&mut matches) {
                return true;
            }
        }
        false
    }
}
