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

/// An operand of one step over one row.
#[derive(Clone, Copy)]
enum Opd<'a> {
    Acc,
    Row(&'a [f32]),
    Scalar(f32),
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

    /// The operand over the whole block (not per row), or over row `j` of width `w`.
    #[inline(always)]
    fn row(self, j: usize, w: usize) -> Opd<'a> {
        match self {
            BlockOpd::Acc => Opd::Acc,
            BlockOpd::Flat(s) => Opd::Row(&s[j * w..(j + 1) * w]),
            BlockOpd::Const(v) => Opd::Scalar(v),
            BlockOpd::Rows { base, stride } => Opd::Row(&base[j * stride..j * stride + w]),
            BlockOpd::RowScalar { base, stride } => Opd::Scalar(base[j * stride]),
        }
    }

    #[inline(always)]
    fn whole(self) -> Opd<'a> {
        match self {
            BlockOpd::Acc => Opd::Acc,
            BlockOpd::Flat(s) => Opd::Row(s),
            BlockOpd::Const(v) => Opd::Scalar(v),
            // Not reached: `per_row` operands go row by row.
            BlockOpd::Rows { base, .. } => Opd::Row(base),
            BlockOpd::RowScalar { base, .. } => Opd::Scalar(base[0]),
        }
    }
}

/// One step over a block of rows of `w` elements (`o` holds them, row-major): one
/// pass over the whole block when no operand changes per row, else one per row.
#[inline(always)]
fn chain_step<'a>(st: &ChainStep, opd: impl Fn(Src) -> BlockOpd<'a> + Copy, w: usize, o: &mut [f32], rounding: Isa) {
    let unary = |x: Src, o: &mut [f32], f: fn(f32) -> f32| {
        let x = opd(x);
        if x.per_row() {
            for (j, oj) in o.chunks_exact_mut(w).enumerate() {
                chain_unary(x.row(j, w), oj, f);
            }
        } else {
            chain_unary(x.whole(), o, f);
        }
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

/// `o = f(a, b)` over one row or block, `f` one of the binary ops (`bin_apply`'s arithmetic).
#[inline(always)]
fn bin_fn(a: Opd, b: Opd, o: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    let n = o.len();
    match (a, b) {
        (Opd::Acc, Opd::Acc) => o.iter_mut().for_each(|v| *v = f(*v, *v)),
        (Opd::Acc, Opd::Row(y)) => o.iter_mut().zip(&y[..n]).for_each(|(v, &y)| *v = f(*v, y)),
        (Opd::Acc, Opd::Scalar(s)) => o.iter_mut().for_each(|v| *v = f(*v, s)),
        (Opd::Row(x), Opd::Acc) => o.iter_mut().zip(&x[..n]).for_each(|(v, &x)| *v = f(x, *v)),
        (Opd::Scalar(s), Opd::Acc) => o.iter_mut().for_each(|v| *v = f(s, *v)),
        (Opd::Row(x), Opd::Row(y)) => {
            let (x, y) = (&x[..n], &y[..n]);
            for i in 0..n {
                o[i] = f(x[i], y[i]);
            }
        }
        (Opd::Row(x), Opd::Scalar(s)) => o.iter_mut().zip(&x[..n]).for_each(|(v, &x)| *v = f(x, s)),
        (Opd::Scalar(s), Opd::Row(y)) => o.iter_mut().zip(&y[..n]).for_each(|(v, &y)| *v = f(s, y)),
        (Opd::Scalar(s), Opd::Scalar(t)) => o.fill(f(s, t)),
    }
}

/// A binary step over a block of rows of `w` elements: one pass when neither operand
/// changes per row, else one per row (the operation chosen once per block, not per row).
#[inline(always)]
fn bin_block(a: BlockOpd, b: BlockOpd, w: usize, o: &mut [f32], f: impl Fn(f32, f32) -> f32 + Copy) {
    if a.per_row() || b.per_row() {
        for (j, oj) in o.chunks_exact_mut(w).enumerate() {
            bin_fn(a.row(j, w), b.row(j, w), oj, f);
        }
    } else {
        bin_fn(a.whole(), b.whole(), o, f);
    }
}

/// `o = g(f(a, b), c)` over one row or block in one pass: two binary steps with the
/// intermediate kept in registers (one store per element instead of two). The first step's
/// operands are rows, scalars or the running value on the left; `false` (nothing done) for
/// other combinations, which then run step by step.
#[inline(always)]
fn pair_fn(a: Opd, b: Opd, c: Opd, o: &mut [f32], f: impl Fn(f32, f32) -> f32, g: impl Fn(f32, f32) -> f32) -> bool {
    let n = o.len();
    match (a, b, c) {
        (Opd::Row(x), Opd::Row(y), Opd::Row(z)) => {
            let (x, y, z) = (&x[..n], &y[..n], &z[..n]);
            for i in 0..n {
                o[i] = g(f(x[i], y[i]), z[i]);
            }
        }
        (Opd::Row(x), Opd::Row(y), Opd::Scalar(s)) => {
            let (x, y) = (&x[..n], &y[..n]);
            for i in 0..n {
                o[i] = g(f(x[i], y[i]), s);
            }
        }
        (Opd::Row(x), Opd::Scalar(t), Opd::Row(z)) => {
            let (x, z) = (&x[..n], &z[..n]);
            for i in 0..n {
                o[i] = g(f(x[i], t), z[i]);
            }
        }
        (Opd::Row(x), Opd::Scalar(t), Opd::Scalar(s)) => {
            o.iter_mut().zip(&x[..n]).for_each(|(v, &x)| *v = g(f(x, t), s));
        }
        (Opd::Scalar(t), Opd::Row(y), Opd::Row(z)) => {
            let (y, z) = (&y[..n], &z[..n]);
            for i in 0..n {
                o[i] = g(f(t, y[i]), z[i]);
            }
        }
        (Opd::Scalar(t), Opd::Row(y), Opd::Scalar(s)) => {
            o.iter_mut().zip(&y[..n]).for_each(|(v, &y)| *v = g(f(t, y), s));
        }
        (Opd::Acc, Opd::Row(y), Opd::Row(z)) => {
            let (y, z) = (&y[..n], &z[..n]);
            for i in 0..n {
                o[i] = g(f(o[i], y[i]), z[i]);
            }
        }
        (Opd::Acc, Opd::Row(y), Opd::Scalar(s)) => {
            o.iter_mut().zip(&y[..n]).for_each(|(v, &y)| *v = g(f(*v, y), s));
        }
        (Opd::Acc, Opd::Scalar(t), Opd::Row(z)) => {
            o.iter_mut().zip(&z[..n]).for_each(|(v, &z)| *v = g(f(*v, t), z));
        }
        (Opd::Acc, Opd::Scalar(t), Opd::Scalar(s)) => o.iter_mut().for_each(|v| *v = g(f(*v, t), s)),
        _ => return false,
    }
    true
}

/// [`pair_fn`] over a block of rows of `w` elements (per row when an operand changes per row).
#[inline(always)]
fn pair_block(
    (a, b, c): (BlockOpd, BlockOpd, BlockOpd),
    w: usize,
    o: &mut [f32],
    f: impl Fn(f32, f32) -> f32 + Copy,
    g: impl Fn(f32, f32) -> f32 + Copy,
) -> bool {
    if a.per_row() || b.per_row() || c.per_row() {
        if !pair_fn(a.row(0, w), b.row(0, w), c.row(0, w), &mut [], f, g) {
            return false;
        }
        for (j, oj) in o.chunks_exact_mut(w).enumerate() {
            pair_fn(a.row(j, w), b.row(j, w), c.row(j, w), oj, f, g);
        }
        true
    } else {
        pair_fn(a.whole(), b.whole(), c.whole(), o, f, g)
    }
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

/// `o[i] = f(x[i])` for an operand `x` (the block itself, a row or a broadcast scalar).
#[inline(always)]
fn chain_unary(x: Opd, o: &mut [f32], f: impl Fn(f32) -> f32) {
    match x {
        Opd::Acc => {
            for v in o.iter_mut() {
                *v = f(*v);
            }
        }
        Opd::Row(x) => {
            let x = &x[..o.len()];
            for i in 0..o.len() {
                o[i] = f(x[i]);
            }
        }
        Opd::Scalar(s) => o.fill(f(s)),
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
