//! Multiversioned elementwise kernels: binary ops (plain and broadcast rows), clamp, square,
//! rsqrt.

use super::isa::{multiversion, Isa};

/// Binary operation of the elementwise kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
}

macro_rules! bin_loops {
    ($op:expr, $out:ident, $i:ident, $a:expr, $b:expr) => {
        match $op {
            BinOp::Add => {
                for $i in 0..$out.len() {
                    $out[$i] = $a + $b;
                }
            }
            BinOp::Sub => {
                for $i in 0..$out.len() {
                    $out[$i] = $a - $b;
                }
            }
            BinOp::Mul => {
                for $i in 0..$out.len() {
                    $out[$i] = $a * $b;
                }
            }
            BinOp::Div => {
                for $i in 0..$out.len() {
                    $out[$i] = $a / $b;
                }
            }
        }
    };
}

multiversion! {
    /// `out[i] = a[i] op b[i]`.
    pub fn bin_vv(op: BinOp, a: &[f32], b: &[f32], out: &mut [f32]) {
        let n = out.len();
        let (a, b) = (&a[..n], &b[..n]);
        bin_loops!(op, out, i, a[i], b[i]);
    }
}

multiversion! {
    /// `out[i] = a[i] op s`.
    pub fn bin_vs(op: BinOp, a: &[f32], s: f32, out: &mut [f32]) {
        let a = &a[..out.len()];
        bin_loops!(op, out, i, a[i], s);
    }
}

multiversion! {
    /// `out[i] = s op b[i]`.
    pub fn bin_sv(op: BinOp, s: f32, b: &[f32], out: &mut [f32]) {
        let b = &b[..out.len()];
        bin_loops!(op, out, i, s, b[i]);
    }
}

/// `a op b` for one element.
#[inline(always)]
pub fn bin_apply(op: BinOp, a: f32, b: f32) -> f32 {
    match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
    }
}

multiversion! {
    /// Elements `start..start + out.len()` of a broadcast binary op over row-major `dims`
    /// (`layout = [dims, a strides, b strides]`, adjacent dims merged, an operand's stride 0
    /// where it broadcasts; innermost strides are 0 or 1). One dispatch for every row of the
    /// chunk: a broadcast's rows are often a few channels long, and a call per row cost more
    /// than its arithmetic. Chunks may start and end inside a row.
    pub fn bin_rows(op: BinOp, a: &[f32], b: &[f32], layout: [&[usize]; 3], start: usize, out: &mut [f32]) {
        let [dims, sa, sb] = layout;
        let r = dims.len();
        assert!((1..=8).contains(&r) && sa.len() == r && sb.len() == r, "binary layout of rank {r}");
        let inner = dims[r - 1];
        let (ia, ib) = (sa[r - 1], sb[r - 1]);
        if inner == 0 {
            return;
        }
        // Position of the chunk's first row: its index along each outer dim, and the operands'
        // offsets there; later rows follow by carrying (no division per row).
        let mut idx = [0usize; 8];
        let (mut oa, mut ob) = (0, 0);
        let mut rem = start / inner;
        for k in (0..r - 1).rev() {
            idx[k] = rem % dims[k];
            rem /= dims[k];
            oa += idx[k] * sa[k];
            ob += idx[k] * sb[k];
        }
        let mut col = start % inner;
        let mut done = 0;
        while done < out.len() {
            let len = (inner - col).min(out.len() - done);
            let o = &mut out[done..done + len];
            let (ca, cb) = (oa + col * ia, ob + col * ib);
            match (ia, ib) {
                (0, 0) => o.fill(bin_apply(op, a[oa], b[ob])),
                (_, 0) => {
                    let (x, s) = (&a[ca..ca + len], b[ob]);
                    bin_loops!(op, o, i, x[i], s);
                }
                (0, _) => {
                    let (s, y) = (a[oa], &b[cb..cb + len]);
                    bin_loops!(op, o, i, s, y[i]);
                }
                _ => {
                    let (x, y) = (&a[ca..ca + len], &b[cb..cb + len]);
                    bin_loops!(op, o, i, x[i], y[i]);
                }
            }
            done += len;
            col = 0;
            for k in (0..r - 1).rev() {
                idx[k] += 1;
                oa += sa[k];
                ob += sb[k];
                if idx[k] < dims[k] {
                    break;
                }
                oa -= sa[k] * idx[k];
                ob -= sb[k] * idx[k];
                idx[k] = 0;
            }
        }
    }
}

multiversion! {
    /// `x = min(max(x, lo), hi)`, NaN kept (comparisons, not `f32::max`, which drops NaN).
    pub fn clamp_inplace(x: &mut [f32], lo: f32, hi: f32) {
        for v in x.iter_mut() {
            let t = if *v < lo { lo } else { *v };
            *v = if t > hi { hi } else { t };
        }
    }
}

multiversion! {
    pub fn square(x: &[f32], out: &mut [f32]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            out[i] = x[i] * x[i];
        }
    }
}

multiversion! {
    /// `1 / sqrt(x)` with two f32 roundings (at most about 1.5 ulp from the exact value).
    pub fn rsqrt(x: &[f32], out: &mut [f32]) {
        let x = &x[..out.len()];
        for i in 0..out.len() {
            out[i] = 1.0 / x[i].sqrt();
        }
    }
}

multiversion! {
    /// `out[i * len + j] = (x[i * len + j] * r[i]) * w[j]` with `len = w.len()`: RMSNorm's
    /// `x * r * w` on rows of `x`, `r` one value per row, `w` one row for all: the two
    /// products of the chain steps `Mul(x, r), Mul(acc, w)` in their order (a product's operand
    /// order never changes its bits), without the general chain's per-call layout walk and
    /// operand resolution (about 800 instructions a call: it was most of a small RMSNorm).
    pub fn scale_rows(x: &[f32], r: &[f32], w: &[f32], out: &mut [f32]) {
        let len = w.len();
        assert!(len > 0 && x.len() == out.len() && out.len() == r.len() * len, "scale_rows shapes");
        for ((o, x), &s) in out.chunks_exact_mut(len).zip(x.chunks_exact(len)).zip(r) {
            for j in 0..len {
                o[j] = (x[j] * s) * w[j];
            }
        }
    }
}

/// Most operands a fused elementwise chain reads (the plan ends a chain before it would read
/// more).
pub const CHAIN_ARGS: usize = 8;

/// Highest rank of a chain's output (XNNPACK's `XNN_MAX_TENSOR_DIMS`).
pub const CHAIN_RANK: usize = 6;

/// What a chain step reads: the running value of the element (the previous step's result),
/// or one of the chain's operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    Acc,
    Arg(usize),
}

/// One elementwise node of a fused chain, with the f32 arithmetic of its unfused kernel
/// (`bin_rows`, `square`, `rsqrt`, `clamp_inplace`), so the chain gives the same bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ChainStep {
    Bin {
        op: BinOp,
        a: Src,
        b: Src,
    },
    Square(Src),
    Rsqrt(Src),
    Copy(Src),
    /// `min(max(acc, lo), hi)` keeping NaN (a node's fused output range).
    Clamp {
        lo: f32,
        hi: f32,
    },
    /// The running value rounded to fp16 or bf16 and back: an fp16/bf16 node's output
    /// (`convert::round_to`, the unfused node's narrowing and the next node's widening).
    Round(super::convert::Narrow),
}

/// The iteration space of a chain: merged output dims (innermost last) and each operand's
/// stride per dim (0 where it broadcasts; innermost strides are 0 or 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainLayout {
    pub rank: usize,
    pub dims: [usize; CHAIN_RANK],
    pub st: [[usize; CHAIN_RANK]; CHAIN_ARGS],
}

impl ChainLayout {
    /// Where output element `start` lies: the outer dims' indices, each of the first `na`
    /// operands' offset at the start of its row, and the column in the row (innermost dim).
    pub(super) fn position(&self, na: usize, start: usize) -> ([usize; CHAIN_RANK], [usize; CHAIN_ARGS], usize) {
        let (r, inner) = (self.rank, self.dims[self.rank - 1]);
        let mut idx = [0usize; CHAIN_RANK];
        let mut off = [0usize; CHAIN_ARGS];
        let mut rem = start / inner;
        for k in (0..r - 1).rev() {
            idx[k] = rem % self.dims[k];
            rem /= self.dims[k];
            for (o, st) in off.iter_mut().zip(&self.st).take(na) {
                *o += idx[k] * st[k];
            }
        }
        (idx, off, start % inner)
    }

    /// Moves a [`ChainLayout::position`] on by `rows` rows (within the dim just outside the
    /// rows), carrying into the outer dims as an odometer does.
    pub(super) fn advance_rows(
        &self,
        na: usize,
        idx: &mut [usize; CHAIN_RANK],
        off: &mut [usize; CHAIN_ARGS],
        rows: usize,
    ) {
        let mut step = rows;
        for k in (0..self.rank - 1).rev() {
            idx[k] += step;
            for (o, st) in off.iter_mut().zip(&self.st).take(na) {
                *o += step * st[k];
            }
            if idx[k] < self.dims[k] {
                break;
            }
            for (o, st) in off.iter_mut().zip(&self.st).take(na) {
                *o -= st[k] * idx[k];
            }
            idx[k] = 0;
            step = 1;
        }
    }
}

/// Elements evaluated step by step in one block (whole rows, as many as fit, or part of one
/// long row): 16 KiB per operand, so a chain's passes over a block stay in L2 (pairs of steps
/// are one pass, see `chain_pair`). Measured on RMSNorm's `x * r * w` over 1x128x2048 at one
/// thread (AMD EPYC, AVX-512): 1024 took 39 us, 2048 33 us, 4096 30 us (a plain Rust loop
/// over the same arrays: 25-26 us); the cost per block is what smaller blocks pay.
const TILE: usize = 4096;

/// What an operand of a block is in each of its rows: the running value, a row of
/// elements, or one value (the same kind in every row of a block).
#[derive(Clone, Copy)]
enum Kind {
    Acc,
    Row,
    Scalar,
}

/// An operand of one step over a block of `rows` rows of `w` elements.
#[derive(Clone, Copy)]
enum BlockOpd<'a> {
    Acc,
    /// Contiguous over the whole block (a dense operand, or a block of one row).
    Flat(&'a [f32]),
    /// One value for the whole block.
    Const(f32),
    /// Row `j`: `w` elements from `base[j * stride..]` (an operand broadcast over rows).
    Rows {
        base: &'a [f32],
        stride: usize,
    },
    /// Row `j`: the value `base[j * stride]` (an operand broadcast along rows).
    RowScalar {
        base: &'a [f32],
        stride: usize,
    },
}

impl<'a> BlockOpd<'a> {
    fn per_row(self) -> bool {
        matches!(self, BlockOpd::Rows { .. } | BlockOpd::RowScalar { .. })
    }

    #[inline(always)]
    fn kind(self) -> Kind {
        match self {
            BlockOpd::Acc => Kind::Acc,
            BlockOpd::Flat(_) | BlockOpd::Rows { .. } => Kind::Row,
            BlockOpd::Const(_) | BlockOpd::RowScalar { .. } => Kind::Scalar,
        }
    }

    /// Row `j` of width `w` of a [`Kind::Row`] operand.
    #[inline(always)]
    fn slice(self, j: usize, w: usize) -> &'a [f32] {
        match self {
            BlockOpd::Flat(s) => &s[j * w..(j + 1) * w],
            BlockOpd::Rows { base, stride } => &base[j * stride..j * stride + w],
            BlockOpd::Acc | BlockOpd::Const(_) | BlockOpd::RowScalar { .. } => &[],
        }
    }

    /// Row `j`'s value of a [`Kind::Scalar`] operand.
    #[inline(always)]
    fn scalar(self, j: usize) -> f32 {
        match self {
            BlockOpd::Const(v) => v,
            BlockOpd::RowScalar { base, stride } => base[j * stride],
            BlockOpd::Acc | BlockOpd::Flat(_) | BlockOpd::Rows { .. } => 0.0,
        }
    }
}

/// A block of `o.len()` elements as rows for the per-row helpers: rows of `w` where an
/// operand changes per row, else one row of the whole block (one pass).
#[inline(always)]
fn row_width(per_row: bool, w: usize, o: &[f32]) -> usize {
    if per_row {
        w
    } else {
        o.len().max(1)
    }
}

/// One step over a block of rows of `w` elements (`o` holds them, row-major): one
/// pass over the whole block when no operand changes per row, else one per row.
#[inline(always)]
fn chain_step<'a>(st: &ChainStep, opd: impl Fn(Src) -> BlockOpd<'a> + Copy, w: usize, o: &mut [f32], rounding: Isa) {
    let unary = |x: Src, o: &mut [f32], f: fn(f32) -> f32| {
        let x = opd(x);
        chain_unary(x, row_width(x.per_row(), w, o), o, f);
    };
    match *st {
        ChainStep::Bin { op, a, b } => {
            let (a, b) = (opd(a), opd(b));
            match op {
                BinOp::Add => bin_block(a, b, w, o, |x, y| x + y),
                BinOp::Sub => bin_block(a, b, w, o, |x, y| x - y),
                BinOp::Mul => bin_block(a, b, w, o, |x, y| x * y),
                BinOp::Div => bin_block(a, b, w, o, |x, y| x / y),
            }
        }
        ChainStep::Square(x) => unary(x, o, |v| v * v),
        ChainStep::Rsqrt(x) => unary(x, o, |v| 1.0 / v.sqrt()),
        ChainStep::Copy(x) => unary(x, o, |v| v),
        ChainStep::Clamp { lo, hi } => {
            for v in o.iter_mut() {
                let t = if *v < lo { lo } else { *v };
                *v = if t > hi { hi } else { t };
            }
        }
        ChainStep::Round(to) => super::convert::round_to(rounding, to, o),
    }
}

/// `o = f(a, b)` over a block of rows of `w` elements, `f` one of the binary ops
/// (`bin_apply`'s arithmetic): the operands' kinds matched once, then a pass per row (one
/// pass over the block when neither operand changes per row).
#[inline(always)]
fn bin_block(a: BlockOpd, b: BlockOpd, w: usize, o: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    let w = row_width(a.per_row() || b.per_row(), w, o);
    let rows = o.chunks_exact_mut(w).enumerate();
    match (a.kind(), b.kind()) {
        (Kind::Acc, Kind::Acc) => o.iter_mut().for_each(|v| *v = f(*v, *v)),
        (Kind::Acc, Kind::Row) => {
            for (j, o) in rows {
                o.iter_mut().zip(b.slice(j, w)).for_each(|(v, &y)| *v = f(*v, y));
            }
        }
        (Kind::Acc, Kind::Scalar) => {
            for (j, o) in rows {
                let s = b.scalar(j);
                o.iter_mut().for_each(|v| *v = f(*v, s))
            }
        }
        (Kind::Row, Kind::Acc) => {
            for (j, o) in rows {
                o.iter_mut().zip(a.slice(j, w)).for_each(|(v, &x)| *v = f(x, *v));
            }
        }
        (Kind::Scalar, Kind::Acc) => {
            for (j, o) in rows {
                let s = a.scalar(j);
                o.iter_mut().for_each(|v| *v = f(s, *v))
            }
        }
        (Kind::Row, Kind::Row) => {
            for (j, o) in rows {
                let n = o.len();
                let (x, y) = (&a.slice(j, w)[..n], &b.slice(j, w)[..n]);
                for i in 0..n {
                    o[i] = f(x[i], y[i]);
                }
            }
        }
        (Kind::Row, Kind::Scalar) => {
            for (j, o) in rows {
                let s = b.scalar(j);
                o.iter_mut().zip(a.slice(j, w)).for_each(|(v, &x)| *v = f(x, s))
            }
        }
        (Kind::Scalar, Kind::Row) => {
            for (j, o) in rows {
                let s = a.scalar(j);
                o.iter_mut().zip(b.slice(j, w)).for_each(|(v, &y)| *v = f(s, y))
            }
        }
        (Kind::Scalar, Kind::Scalar) => {
            for (j, o) in rows {
                o.fill(f(a.scalar(j), b.scalar(j)));
            }
        }
    }
}

/// `o = f(x)` over a block in rows of `w` elements, for an operand `x` (the block itself, a
/// row or a broadcast scalar).
#[inline(always)]
fn chain_unary(x: BlockOpd, w: usize, o: &mut [f32], f: impl Fn(f32) -> f32) {
    let rows = o.chunks_exact_mut(w).enumerate();
    match x.kind() {
        Kind::Acc => o.iter_mut().for_each(|v| *v = f(*v)),
        Kind::Row => {
            for (j, o) in rows {
                o.iter_mut().zip(x.slice(j, w)).for_each(|(v, &x)| *v = f(x));
            }
        }
        Kind::Scalar => {
            for (j, o) in rows {
                o.fill(f(x.scalar(j)));
            }
        }
    }
}

/// `o = g(f(a, b), c)` over a block of rows of `w` elements in one pass per row (one pass
/// over the block when no operand changes per row): two binary steps with the intermediate
/// kept in registers (one store per element instead of two). The first step's operands are
/// rows, scalars or the running value on the left; `false` (nothing done) for other
/// combinations, which then run step by step. The kinds are matched once per block.
#[inline(always)]
fn pair_block(
    (a, b, c): (BlockOpd, BlockOpd, BlockOpd),
    w: usize,
    o: &mut [f32],
    f: impl Fn(f32, f32) -> f32 + Copy,
    g: impl Fn(f32, f32) -> f32 + Copy,
) -> bool {
    use Kind::{Acc, Row, Scalar};
    let w = row_width(a.per_row() || b.per_row() || c.per_row(), w, o);
    let rows = o.chunks_exact_mut(w).enumerate();
    match (a.kind(), b.kind(), c.kind()) {
        (Row, Row, Row) => {
            for (j, o) in rows {
                let n = o.len();
                let (x, y, z) = (&a.slice(j, w)[..n], &b.slice(j, w)[..n], &c.slice(j, w)[..n]);
                for i in 0..n {
                    o[i] = g(f(x[i], y[i]), z[i]);
                }
            }
        }
        (Row, Row, Scalar) => {
            for (j, o) in rows {
                let n = o.len();
                let (x, y, s) = (&a.slice(j, w)[..n], &b.slice(j, w)[..n], c.scalar(j));
                for i in 0..n {
                    o[i] = g(f(x[i], y[i]), s);
                }
            }
        }
        (Row, Scalar, Row) => {
            for (j, o) in rows {
                let n = o.len();
                let (x, t, z) = (&a.slice(j, w)[..n], b.scalar(j), &c.slice(j, w)[..n]);
                for i in 0..n {
                    o[i] = g(f(x[i], t), z[i]);
                }
            }
        }
        (Row, Scalar, Scalar) => {
            for (j, o) in rows {
                let (t, s) = (b.scalar(j), c.scalar(j));
                o.iter_mut().zip(a.slice(j, w)).for_each(|(v, &x)| *v = g(f(x, t), s));
            }
        }
        (Scalar, Row, Row) => {
            for (j, o) in rows {
                let n = o.len();
                let (t, y, z) = (a.scalar(j), &b.slice(j, w)[..n], &c.slice(j, w)[..n]);
                for i in 0..n {
                    o[i] = g(f(t, y[i]), z[i]);
                }
            }
        }
        (Scalar, Row, Scalar) => {
            for (j, o) in rows {
                let (t, s) = (a.scalar(j), c.scalar(j));
                o.iter_mut().zip(b.slice(j, w)).for_each(|(v, &y)| *v = g(f(t, y), s));
            }
        }
        (Acc, Row, Row) => {
            for (j, o) in rows {
                let n = o.len();
                let (y, z) = (&b.slice(j, w)[..n], &c.slice(j, w)[..n]);
                for i in 0..n {
                    o[i] = g(f(o[i], y[i]), z[i]);
                }
            }
        }
        (Acc, Row, Scalar) => {
            for (j, o) in rows {
                let s = c.scalar(j);
                o.iter_mut().zip(b.slice(j, w)).for_each(|(v, &y)| *v = g(f(*v, y), s));
            }
        }
        (Acc, Scalar, Row) => {
            for (j, o) in rows {
                let t = b.scalar(j);
                o.iter_mut().zip(c.slice(j, w)).for_each(|(v, &z)| *v = g(f(*v, t), z));
            }
        }
        (Acc, Scalar, Scalar) => {
            for (j, o) in rows {
                let (t, s) = (b.scalar(j), c.scalar(j));
                o.iter_mut().for_each(|v| *v = g(f(*v, t), s));
            }
        }
        _ => return false,
    }
    true
}

/// Runs steps `k` and `k + 1` as one pass when they are two binary steps, the second an
/// addition or multiplication of the running value (either side: the same value, as both
/// operations are commutative) with an operand. Returns whether it did.
#[inline(always)]
fn chain_pair<'a>(
    steps: &[ChainStep],
    k: usize,
    opd: impl Fn(Src) -> BlockOpd<'a> + Copy,
    w: usize,
    o: &mut [f32],
) -> bool {
    let (Some(&ChainStep::Bin { op: op1, a, b }), Some(&ChainStep::Bin { op: op2, a: a2, b: b2 })) =
        (steps.get(k), steps.get(k + 1))
    else {
        return false;
    };
    let c = match (a2, b2) {
        (Src::Acc, Src::Arg(c)) | (Src::Arg(c), Src::Acc) => c,
        _ => return false,
    };
    let (mut a, mut b) = (opd(a), opd(b));
    // The running value on the right of a commutative first step: on the left.
    if matches!(b, BlockOpd::Acc) && matches!(op1, BinOp::Add | BinOp::Mul) {
        (a, b) = (b, a);
    }
    let ops = (a, b, opd(Src::Arg(c)));
    macro_rules! second {
        ($f:expr) => {
            match op2 {
                BinOp::Add => pair_block(ops, w, o, $f, |v, c| v + c),
                BinOp::Mul => pair_block(ops, w, o, $f, |v, c| v * c),
                BinOp::Sub | BinOp::Div => false,
            }
        };
    }
    match op1 {
        BinOp::Add => second!(|x, y| x + y),
        BinOp::Sub => second!(|x, y| x - y),
        BinOp::Mul => second!(|x, y| x * y),
        BinOp::Div => second!(|x, y| x / y),
    }
}

/// Every step of a chain over one block of rows of `w` elements, operand `a` being `bo[a]`:
/// pairs of binary steps in one pass where `chain_pair` takes them.
#[inline(always)]
fn chain_steps(steps: &[ChainStep], bo: [BlockOpd; CHAIN_ARGS], w: usize, o: &mut [f32], rounding: Isa) {
    let opd = |s: Src| match s {
        Src::Acc => BlockOpd::Acc,
        Src::Arg(a) => bo[a],
    };
    let mut k = 0;
    while k < steps.len() {
        if chain_pair(steps, k, opd, w, o) {
            k += 2;
        } else {
            chain_step(&steps[k], opd, w, o, rounding);
            k += 1;
        }
    }
}

/// Where every operand of a chain is one value, outputs up to this long (one block of the
/// general path) run step by step over the whole output ([`chain_consts`]), without the
/// general path's per-block operand resolution (RMSNorm's tail `rsqrt(mean + eps)` over one
/// row's mean took 468 instructions per call through it, callgrind, AVX2).
const CONSTS_MAX: usize = TILE;

/// Every step over all of `out`, where every operand is one value (each `args[a][0]`): each
/// step is `chain_step` over one block of `out.len()` elements, which the general path runs
/// on blocks of the same operands, so the same bits.
#[inline(always)]
fn chain_consts(steps: &[ChainStep], args: &[&[f32]], out: &mut [f32], rounding: Isa) {
    let opd = |s: Src| match s {
        Src::Acc => BlockOpd::Acc,
        Src::Arg(a) => BlockOpd::Const(args[a][0]),
    };
    for st in steps {
        chain_step(st, opd, out.len(), out, rounding);
    }
}

multiversion! {
    /// Elements `start..start + out.len()` of a fused elementwise chain over `lay`: each block
    /// (whole rows, or part of a long row) runs every step in order (the first step reads only
    /// operands, later ones the running value too), the same f32 operations per element as
    /// the unfused nodes, so the same bits, with each operand read once and the output written
    /// once. Chunks may start and end inside a row. `rounding` is the ISA of the
    /// [`ChainStep::Round`] steps (the unfused conversions' own). Operand `a` holds its elements
    /// from offset `origin[a]` on (a tile of a dense operand widened for this call; else 0).
    #[allow(clippy::too_many_arguments)]
    pub fn chain_rows(
        steps: &[ChainStep],
        args: &[&[f32]],
        origin: &[usize; CHAIN_ARGS],
        lay: &ChainLayout,
        start: usize,
        out: &mut [f32],
        rounding: Isa,
    ) {
        let r = lay.rank;
        let na = args.len();
        assert!((1..=CHAIN_RANK).contains(&r) && na <= CHAIN_ARGS, "chain of rank {r} with {na} operands");
        let inner = lay.dims[r - 1];
        if inner == 0 {
            return;
        }
        if out.len() <= CONSTS_MAX && lay.st[..na].iter().all(|st| st[..r].iter().all(|&s| s == 0)) {
            chain_consts(steps, args, out, rounding);
            return;
        }
        if r == 1 {
            // One dim: every operand is dense or one value, and a block is a run of the output.
            let mut done = 0;
            while done < out.len() {
                let w = (out.len() - done).min(TILE);
                let at = start + done;
                let mut bo = [BlockOpd::Acc; CHAIN_ARGS];
                for (a, b) in bo.iter_mut().enumerate().take(na) {
                    *b = match lay.st[a][0] {
                        0 => BlockOpd::Const(args[a][0]),
                        _ => BlockOpd::Flat(&args[a][at - origin[a]..][..w]),
                    };
                }
                chain_steps(steps, bo, w, &mut out[done..done + w], rounding);
                done += w;
            }
            return;
        }
        // Rows are indexed by the outer dims; the one just outside the rows is `rd` (none for a
        // single row), and a block of several rows stays inside it.
        let rd = r.checked_sub(2);
        let (mut idx, mut off, mut col) = lay.position(na, start);
        let mut done = 0;
        while done < out.len() {
            let left = out.len() - done;
            // A block: whole rows when the chunk is at a row start and has one, else part of a row.
            let (rows, w) = match rd {
                Some(k) if col == 0 && inner <= TILE && left >= inner => {
                    ((TILE / inner).min(left / inner).min(lay.dims[k] - idx[k]).max(1), inner)
                }
                _ => (1, (inner - col).min(left).min(TILE)),
            };
            let o = &mut out[done..done + rows * w];
            // Each operand over this block, resolved once for every step that reads it.
            let mut bo = [BlockOpd::Acc; CHAIN_ARGS];
            for (a, b) in bo.iter_mut().enumerate().take(na) {
                let (inner_st, row_st) = (lay.st[a][r - 1], rd.map_or(0, |k| lay.st[a][k]));
                // The operand's element under the block's first output (innermost strides
                // are 0 or 1).
                let x = &args[a][off[a] + col * inner_st - origin[a]..];
                *b = match (inner_st, row_st) {
                    (0, _) if rows == 1 || row_st == 0 => BlockOpd::Const(x[0]),
                    (0, _) => BlockOpd::RowScalar { base: x, stride: row_st },
                    (_, _) if rows == 1 || row_st == w => BlockOpd::Flat(&x[..rows * w]),
                    _ => BlockOpd::Rows { base: x, stride: row_st },
                };
            }
            chain_steps(steps, bo, w, o, rounding);
            done += rows * w;
            // Advance: along the row (part of a long row), or by `rows` rows with carries.
            if col + w < inner {
                col += w;
                continue;
            }
            col = 0;
            lay.advance_rows(na, &mut idx, &mut off, rows);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advancing_by_rows_lands_where_the_position_of_the_later_element_is() {
        // Output [3, 4, 5]; operand 0 dense, operand 1 broadcast over the middle dim, operand 2
        // one value per [outer, middle] (a mean's output): no dims merge.
        let mut lay = ChainLayout { rank: 3, dims: [0; CHAIN_RANK], st: [[0; CHAIN_RANK]; CHAIN_ARGS] };
        lay.dims[..3].copy_from_slice(&[3, 4, 5]);
        lay.st[0][..3].copy_from_slice(&[20, 5, 1]);
        lay.st[1][..3].copy_from_slice(&[5, 0, 1]);
        lay.st[2][..3].copy_from_slice(&[4, 1, 0]);
        let inner = 5;
        for row in 0..12 {
            // Blocks of rows stay inside the middle dim (as `chain_rows` makes them).
            for rows in 1..=4 - row % 4 {
                let (mut idx, mut off, col) = lay.position(3, row * inner);
                assert_eq!(col, 0);
                lay.advance_rows(3, &mut idx, &mut off, rows);
                let end = (row + rows) * inner;
                let (want_idx, want_off, _) =
                    if end < 60 { lay.position(3, end) } else { ([0; CHAIN_RANK], [0; CHAIN_ARGS], 0) };
                assert_eq!((idx, off), (want_idx, want_off), "row {row} + {rows}");
            }
        }
    }
}
