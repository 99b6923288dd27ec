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
