//! Where the native heartbeats of the Java binding live: side by side in
//! chunks of [`CHUNK`], instead of each in its own `Box`.
//!
//! A `Box` per heartbeat puts each one wherever the allocator has room at
//! that moment: between the create's buffers, the keys and whatever else the
//! process allocated since the previous one. Walking many heartbeats then
//! misses the cache on every one of their lines, where heartbeats kept side
//! by side (a `Vec`, as the core's own benchmark and the driver's slots keep
//! them) let the hardware prefetcher bring the next lines in early. Measured
//! with `scripts/bench-jvm.sh` (1,000 heartbeats, alternating builds): about
//! 100 ns less per decision through the Java API.
//!
//! Each chunk is one allocation aligned to a cache line; a value starts on a
//! line when its size is a multiple of 64. A slot is taken from the
//! lowest-addressed chunk with room, lowest slot first, so a batch of
//! heartbeats made one after another lies in ascending order. A chunk whose
//! last value is removed goes back to the allocator, unless it is the only
//! chunk with room left (a loop that makes and closes one heartbeat does not
//! allocate a chunk each time). Addresses never move: a value stays where
//! [`Pool::insert`] put it until [`Pool::remove`].

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Values per chunk (one bit each in a `u64` mask).
pub(crate) const CHUNK: usize = 64;

/// Every slot of a chunk free.
const ALL_FREE: u64 = u64::MAX;

/// A pool of values of type `T` at stable addresses. Thread-safe: one lock
/// around the bookkeeping, held only to take or give back a slot (the
/// values themselves are reached through their pointers, without it).
pub(crate) struct Pool<T> {
    state: Mutex<State>,
    _values: PhantomData<fn(T) -> T>,
}

struct State {
    /// Chunk base address -> mask of its free slots (bit i = slot i free).
    chunks: BTreeMap<usize, u64>,
    /// The chunks with at least one free slot.
    with_room: BTreeSet<usize>,
}

impl<T> Pool<T> {
    /// An empty pool (allocates nothing until the first insert).
    pub(crate) const fn new() -> Pool<T> {
        Pool {
            state: Mutex::new(State {
                chunks: BTreeMap::new(),
                with_room: BTreeSet::new(),
            }),
            _values: PhantomData,
        }
    }

    fn layout() -> Layout {
        assert!(size_of::<T>() > 0, "a pool of zero-sized values");
        Layout::array::<T>(CHUNK)
            .and_then(|l| l.align_to(64))
            .expect("a chunk's layout")
    }

    /// A poisoned lock only means a refused [`Pool::remove`], which panics
    /// before it changes anything: the state is still whole.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves `value` into a free slot and returns its address, valid until
    /// [`Pool::remove`]. Aborts on out-of-memory, as `Box::new` does.
    pub(crate) fn insert(&self, value: T) -> NonNull<T> {
        let layout = Self::layout();
        let mut s = self.lock();
        let base = match s.with_room.first() {
            Some(&base) => base,
            None => {
                // SAFETY: the layout has a non-zero size (T is not zero-sized).
                let p = unsafe { alloc(layout) };
                if p.is_null() {
                    handle_alloc_error(layout);
                }
                let base = p as usize;
                s.chunks.insert(base, ALL_FREE);
                s.with_room.insert(base);
                base
            }
        };
        let mask = s
            .chunks
            .get_mut(&base)
            .expect("every chunk with room is a chunk");
        let i = mask.trailing_zeros() as usize;
        *mask &= !(1u64 << i);
        if *mask == 0 {
            s.with_room.remove(&base);
        }
        drop(s);
        // SAFETY: slot i < CHUNK of the chunk at `base` (an allocation of
        // CHUNK values of T, aligned for T) was free and is now taken: no
        // other insert gets it until it is removed, and nothing reads it.
        unsafe {
            let p = (base as *mut T).add(i);
            p.write(value);
            NonNull::new_unchecked(p)
        }
    }

    /// Moves the value at `p` out of the pool and frees its slot (and the
    /// chunk, when it was the chunk's last value and another chunk has
    /// room). The caller drops the value, outside the pool's lock.
    ///
    /// # Safety
    ///
    /// `p` was returned by [`Pool::insert`] on this pool, was not removed
    /// since, and no reference to the value is alive (nor made after).
    pub(crate) unsafe fn remove(&self, p: NonNull<T>) -> T {
        let addr = p.as_ptr() as usize;
        let mut s = self.lock();
        // What the bookkeeping can tell is not a taken slot (a second remove
        // while its chunk lives, a pointer into no chunk or between slots)
        // is refused before anything is read: a panic, which the JNI entry
        // point catches. The safety contract still holds the caller to it.
        let (&base, mask) = s
            .chunks
            .range_mut(..=addr)
            .next_back()
            .expect("a pointer from this pool");
        let offset = addr - base;
        let i = offset / size_of::<T>();
        assert!(
            offset % size_of::<T>() == 0 && i < CHUNK && *mask & (1u64 << i) == 0,
            "not a taken slot of this pool"
        );
        // SAFETY: the caller's contract: `p` points to the live value in
        // taken slot i, which nothing else uses; it is read once, here, while
        // the lock keeps the slot from being taken again.
        let value = unsafe { p.as_ptr().read() };
        *mask |= 1u64 << i;
        let empty = *mask == ALL_FREE;
        s.with_room.insert(base);
        if empty && s.with_room.len() > 1 {
            s.chunks.remove(&base);
            s.with_room.remove(&base);
            drop(s);
            // SAFETY: `base` came from `alloc` with this layout and none of
            // its slots holds a value any more.
            unsafe { dealloc(base as *mut u8, Self::layout()) };
        }
        value
    }

    /// How many chunks are allocated (for tests).
    #[cfg(test)]
    fn chunks(&self) -> usize {
        self.lock().chunks.len()
    }
}

impl<T> Drop for Pool<T> {
    /// Frees the chunks; values still in the pool are leaked, not dropped
    /// (a pool only ends with the process or a test).
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for &base in s.chunks.keys() {
            // SAFETY: each base came from `alloc` with this layout.
            unsafe { dealloc(base as *mut u8, Self::layout()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A value the size of a cache line that counts its drops.
    #[repr(align(64))]
    struct Line {
        n: u64,
        _token: Rc<()>,
    }

    #[test]
    fn values_made_one_after_another_lie_side_by_side_on_cache_lines() {
        let pool = Pool::<Line>::new();
        let token = Rc::new(());
        let ps: Vec<_> = (0..200)
            .map(|n| {
                pool.insert(Line {
                    n,
                    _token: token.clone(),
                })
            })
            .collect();
        assert_eq!(pool.chunks(), 200usize.div_ceil(CHUNK));
        for (i, p) in ps.iter().enumerate() {
            assert_eq!(p.as_ptr() as usize % 64, 0);
            // SAFETY: p is live in the pool and only read here.
            assert_eq!(unsafe { p.as_ref() }.n, i as u64);
            if i % CHUNK != 0 {
                assert_eq!(p.as_ptr() as usize - ps[i - 1].as_ptr() as usize, 64);
            }
        }
        assert_eq!(Rc::strong_count(&token), 201);
        for (i, p) in ps.into_iter().enumerate() {
            // SAFETY: from insert, removed once.
            let v = unsafe { pool.remove(p) };
            assert_eq!(v.n, i as u64);
        }
        assert_eq!(
            Rc::strong_count(&token),
            1,
            "every value moved out and dropped"
        );
        assert_eq!(pool.chunks(), 1, "the last chunk with room is kept");
    }

    #[test]
    fn a_freed_slot_is_reused_lowest_first_and_empty_chunks_go_back() {
        let pool = Pool::<[u64; 9]>::new();
        let ps: Vec<_> = (0..3 * CHUNK as u64).map(|i| pool.insert([i; 9])).collect();
        assert_eq!(pool.chunks(), 3);
        // Empty the second chunk: it is the only chunk with room, so it stays.
        let second: Vec<_> = ps[CHUNK..2 * CHUNK].to_vec();
        for p in &second {
            // SAFETY: from insert, removed once.
            unsafe { pool.remove(*p) };
        }
        assert_eq!(pool.chunks(), 3, "the only chunk with room is kept");
        // Refilled in ascending order, lowest slot first.
        let refill: Vec<_> = (0..CHUNK).map(|_| pool.insert([7; 9])).collect();
        assert_eq!(refill, second);
        // A slot freed in the full pool is the next one taken.
        // SAFETY: from insert, removed once.
        unsafe { pool.remove(ps[5]) };
        assert_eq!(pool.insert([99; 9]), ps[5]);
        // Empty the third chunk while the first has room: it goes back.
        // SAFETY: from insert, removed once.
        unsafe { pool.remove(ps[0]) };
        for p in &ps[2 * CHUNK..] {
            // SAFETY: from insert, removed once.
            unsafe { pool.remove(*p) };
        }
        assert_eq!(pool.chunks(), 2);
    }

    #[test]
    fn a_second_remove_is_refused_and_the_pool_stays_usable() {
        let pool = Pool::<[u64; 8]>::new();
        let keep = pool.insert([1; 8]);
        let p = pool.insert([2; 8]);
        // SAFETY: from insert, removed once.
        assert_eq!(unsafe { pool.remove(p) }, [2; 8]);
        let again = std::panic::catch_unwind(|| {
            // SAFETY: not upheld on purpose: the pool must refuse it.
            unsafe { pool.remove(p) }
        });
        assert!(again.is_err(), "a second remove is refused");
        let between = NonNull::new((p.as_ptr() as usize + 8) as *mut [u64; 8]).expect("non-null");
        let stray = std::panic::catch_unwind(|| {
            // SAFETY: not upheld on purpose: the pool must refuse it.
            unsafe { pool.remove(between) }
        });
        assert!(stray.is_err(), "a pointer between slots is refused");
        assert_eq!(pool.insert([3; 8]), p, "the freed slot is taken again");
        // SAFETY: live in the pool, only read here.
        assert_eq!(unsafe { keep.as_ref() }, &[1; 8]);
    }

    #[test]
    fn churn_matches_a_model() {
        type Item = (u64, [u8; 40]);
        let pool = Pool::<Item>::new();
        let mut live: Vec<(NonNull<Item>, u64)> = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for n in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if live.is_empty() || x % 5 < 3 {
                live.push((pool.insert((n, [n as u8; 40])), n));
            } else {
                let (p, v) = live.swap_remove((x as usize / 5) % live.len());
                // SAFETY: from insert, removed once.
                let got = unsafe { pool.remove(p) };
                assert_eq!(got, (v, [v as u8; 40]));
            }
            if n % 1000 == 0 {
                for (p, v) in &live {
                    // SAFETY: live in the pool, only read here.
                    assert_eq!(unsafe { p.as_ref() }.0, *v);
                }
                // At most one empty chunk stays (the only one with room when
                // it emptied); every other chunk holds a live value.
                assert!(pool.chunks() <= live.len() + 1);
            }
        }
        for (p, _) in live {
            // SAFETY: from insert, removed once.
            unsafe { pool.remove(p) };
        }
        assert_eq!(pool.chunks(), 1);
    }

    #[test]
    fn threads_insert_and_remove_at_once() {
        static POOL: Pool<(usize, usize)> = Pool::new();
        let drops = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let drops = drops.clone();
                std::thread::spawn(move || {
                    for round in 0..200 {
                        let ps: Vec<_> = (0..100)
                            .map(|i| POOL.insert((t, round * 100 + i)))
                            .collect();
                        for (i, p) in ps.into_iter().enumerate() {
                            // SAFETY: from insert, removed once, by this thread only.
                            let v = unsafe { POOL.remove(p) };
                            assert_eq!(v, (t, round * 100 + i));
                            drops.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no thread panicked");
        }
        assert_eq!(drops.load(Ordering::Relaxed), 4 * 200 * 100);
        assert_eq!(POOL.chunks(), 1);
    }
}
