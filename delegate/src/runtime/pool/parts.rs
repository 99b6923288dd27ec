//! Disjoint mutable chunks of one slice, handed to the pool's threads: each chunk can be
//! taken once, from any thread.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

/// A mutable slice split at fixed boundaries; each chunk can be taken once, from any thread.
pub struct Parts<'a, T> {
    ptr: *mut T,
    bounds: Vec<usize>,
    claimed: Vec<AtomicBool>,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: `Parts` only hands out disjoint `&'a mut [T]` chunks, each at most once (atomic claim),
// which is what sending `&mut [T]` pieces to other threads requires (`T: Send`).
unsafe impl<T: Send> Send for Parts<'_, T> {}
// SAFETY: as above; shared access only performs atomic claims.
unsafe impl<T: Send> Sync for Parts<'_, T> {}

impl<'a, T> Parts<'a, T> {
    /// Splits `s` at `bounds` (starts with 0, non-decreasing, ends with `s.len()`).
    pub fn new(s: &'a mut [T], bounds: Vec<usize>) -> Parts<'a, T> {
        assert!(
            bounds.first() == Some(&0) && bounds.last() == Some(&s.len()) && bounds.windows(2).all(|w| w[0] <= w[1]),
            "chunk bounds must cover the slice in order"
        );
        let claimed = (0..bounds.len() - 1).map(|_| AtomicBool::new(false)).collect();
        Parts { ptr: s.as_mut_ptr(), bounds, claimed, _borrow: PhantomData }
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
        self.claimed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.claimed.is_empty()
    }

    /// Start offset of chunk `i` in the original slice.
    pub fn start(&self, i: usize) -> usize {
        self.bounds[i]
    }

    /// Takes chunk `i`; `None` if out of range or already taken.
    pub fn take(&self, i: usize) -> Option<&'a mut [T]> {
        let c = self.claimed.get(i)?;
        if c.swap(true, Ordering::AcqRel) {
            return None;
        }
        let (s, e) = (self.bounds[i], self.bounds[i + 1]);
        // SAFETY: `new` checked 0 = b0 <= b1 <= ... <= len, so chunk i is inside the slice and
        // disjoint from every other chunk; the atomic swap guarantees chunk i is handed out once.
        // The original `&'a mut` borrow is held by `self` (PhantomData) for `'a`.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(s), e - s) })
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
