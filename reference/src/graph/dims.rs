//! Dims lists (of means and permutes) and broadcasting of shapes: the rules shape inference
//! and the delegate's lowering share.

use super::{Dim, GraphErrorKind};

/// Normalizes a mean/permute dims list against `rank`: negatives wrap, out of range and
/// repeats are errors. An empty list is returned empty (callers decide what it means).
pub fn normalize_dims(dims: &[i64], rank: usize) -> Result<Vec<usize>, GraphErrorKind> {
    let r = rank as i64;
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        // A 0-D tensor accepts dim 0 and -1, as PyTorch does.
        let rr = r.max(1);
        if d < -rr || d >= rr {
            return Err(GraphErrorKind::DimOutOfRange { dim: d, rank });
        }
        let n = d.rem_euclid(rr) as usize;
        if out.contains(&n) {
            return Err(GraphErrorKind::RepeatedDim { dim: n });
        }
        out.push(n);
    }
    Ok(out)
}

/// The dims a mean reduces, sorted: the normalized list, or every dim when empty.
pub fn mean_axes(dims: &[i64], rank: usize) -> Result<Vec<usize>, GraphErrorKind> {
    let mut axes = normalize_dims(dims, rank)?;
    if axes.is_empty() {
        axes = (0..rank).collect();
    }
    axes.retain(|&a| a < rank);
    axes.sort_unstable();
    Ok(axes)
}

/// [`mean_axes`] as a bit set (bit d: dim d is reduced), with the same errors, for a rank of
/// a valid spec (at most [`MAX_RANK`]): no list allocated.
pub(crate) fn mean_axes_mask(dims: &[i64], rank: usize) -> Result<u64, GraphErrorKind> {
    let rr = (rank as i64).max(1);
    let mut axes = 0u64;
    for &d in dims {
        // A 0-D tensor accepts dim 0 and -1, as PyTorch does.
        if d < -rr || d >= rr {
            return Err(GraphErrorKind::DimOutOfRange { dim: d, rank });
        }
        let n = d.rem_euclid(rr) as usize;
        if axes & (1 << n) != 0 {
            return Err(GraphErrorKind::RepeatedDim { dim: n });
        }
        axes |= 1 << n;
    }
    let all = (1u64 << rank) - 1;
    Ok(if dims.is_empty() { all } else { axes & all })
}

/// Numpy/PyTorch broadcasting of two shapes (right-aligned).
pub fn broadcast(a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>, GraphErrorKind> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    let err = || GraphErrorKind::NotBroadcastable {
        a: a.iter().map(|d| d.size).collect(),
        b: b.iter().map(|d| d.size).collect(),
    };
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { Dim::fixed(1) };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { Dim::fixed(1) };
        let d = if da == db {
            da
        } else if da == Dim::fixed(1) {
            db
        } else if db == Dim::fixed(1) {
            da
        } else if da.size == db.size {
            // One static, one dynamic with the same bound: the static size wins at run time,
            // the dynamic side must then equal it.
            Dim { size: da.size, dynamic: da.dynamic && db.dynamic }
        } else {
            return Err(err());
        };
        out.push(d);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::MAX_RANK;

    #[test]
    fn mean_axes_mask_matches_mean_axes() {
        let lists: [&[i64]; 10] = [&[], &[0], &[-1], &[1, -1], &[2, 0], &[0, 0], &[-1, 5], &[3, -7], &[1, 2, 3], &[6]];
        for rank in 0..=MAX_RANK {
            for dims in lists {
                let want = mean_axes(dims, rank).map(|a| a.iter().fold(0u64, |m, &d| m | 1 << d));
                assert_eq!(mean_axes_mask(dims, rank), want, "dims {dims:?} rank {rank}");
            }
        }
    }
}
