//! Disjoint mutable chunks of one slice, handed to the pool's threads: each chunk can be
//! taken once, from any thread. Safe Rust: the slice is cut with `split_at_mut` up front and
//! each chunk sits behind its own (uncontended) lock, so no claim needs `unsafe`.

use std::sync::Mutex;

/// A mutable slice split at fixed boundaries; each chunk can be taken once, from any thread.
pub struct Parts<'a, T> {
    /// Start offset of each chunk in the original slice.
    starts: Vec<usize>,
    chunks: Vec<Mutex<Option<&'a mut [T]>>>,
}

impl<'a, T> Parts<'a, T> {
    /// Splits `s` at `bounds` (starts with 0, non-decreasing, ends with `s.len()`).
    pub fn new(s: &'a mut [T], mut bounds: Vec<usize>) -> Parts<'a, T> {
        assert!(
            bounds.first() == Some(&0) && bounds.last() == Some(&s.len()) && bounds.windows(2).all(|w| w[0] <= w[1]),
            "chunk bounds must cover the slice in order"
        );
        let mut chunks = Vec::with_capacity(bounds.len() - 1);
        let mut rest = s;
        for w in bounds.windows(2) {
            let (chunk, tail) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
            chunks.push(Mutex::new(Some(chunk)));
            rest = tail;
        }
        bounds.pop();
        Parts { starts: bounds, chunks }
    }

    /// Chunks of `chunk` elements (the last may be shorter).
    pub fn uniform(s: &'a mut [T], chunk: usize) -> Parts<'a, T> {
        let n = s.len();
        let chunk = chunk.max(1);
        let mut b: Vec<usize> = (0..n.div_ceil(chunk)).map(|i| i * chunk).collect();
        b.push(n);
        if b.len() == 1 {
            b.insert(0, 0);
        }
        Parts::new(s, b)
    }

    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Start offset of chunk `i` in the original slice.
    pub fn start(&self, i: usize) -> usize {
        self.starts[i]
    }

    /// Takes chunk `i`; `None` if out of range or already taken. A lock poisoned by a panic
    /// elsewhere still hands out its chunk (the chunk itself was never touched).
    pub fn take(&self, i: usize) -> Option<&'a mut [T]> {
        self.chunks.get(i)?.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_hand_out_each_chunk_once() {
        let mut v: Vec<u32> = (0..10).collect();
        let p = Parts::uniform(&mut v, 4);
        assert_eq!(p.len(), 3);
        let c = p.take(2).unwrap();
        assert_eq!(c, &[8, 9]);
        assert!(p.take(2).is_none());
        assert!(p.take(3).is_none());
        c[0] = 100;
        drop(p);
        assert_eq!(v[8], 100);
    }
}
