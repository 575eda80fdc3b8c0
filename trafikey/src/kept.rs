//! Emptied vectors kept from one command to the next, so that a command allocates none of them
//! (issue 44: a vector of a few hundred bytes a job is a malloc and a free of the server's
//! allocator each command, counted in the server's CPU a job).
//!
//! The one way trafikey keeps an allocation between commands: a [`Shelf`] in a
//! `thread_local!` (the server runs every command on its main thread), taken from by
//! [`Kept::take`], a guard that derefs to the vector and puts it back, emptied, when it drops.
//! Where a guard does not fit (a plan's `Op<'a>` borrows for less than `'static`), the owner
//! calls [`Shelf::take`] and [`Shelf::put`] itself.

use std::cell::Cell;
use std::ops::{Deref, DerefMut, RangeInclusive};
use std::thread::LocalKey;

/// Up to `N` emptied vectors of `T`, each kept only when its room (capacity) is in `room`: a
/// vector with no room is never kept (it would take a useful one's place), and a far bigger
/// one than a command needs may be let go.
pub struct Shelf<T, const N: usize = 1> {
    slots: [Cell<Vec<T>>; N],
    /// How many slots, from the first, hold a kept vector.
    filled: Cell<usize>,
    room: RangeInclusive<usize>,
}

impl<T, const N: usize> Shelf<T, N> {
    /// An empty shelf for a `thread_local!` (`const { Shelf::new(1..=usize::MAX) }`).
    pub const fn new(room: RangeInclusive<usize>) -> Self {
        Shelf {
            slots: [const { Cell::new(Vec::new()) }; N],
            filled: Cell::new(0),
            room,
        }
    }

    /// The vector put back last, empty with its room, or a new one when the shelf is empty.
    pub fn take(&self) -> Vec<T> {
        let Some(last) = self.filled.get().checked_sub(1) else {
            return Vec::new();
        };
        self.filled.set(last);
        self.slots.get(last).map_or_else(Vec::new, Cell::take)
    }

    /// Keep `v`, emptied (its elements dropped now, in the command), for the next [`take`]:
    /// unless its room is out of bounds or the shelf is full, when it is let go.
    ///
    /// [`take`]: Shelf::take
    pub fn put(&self, mut v: Vec<T>) {
        let at = self.filled.get();
        v.clear();
        if let (Some(slot), true) = (self.slots.get(at), self.room.contains(&v.capacity())) {
            slot.set(v);
            self.filled.set(at + 1);
        }
    }
}

/// A vector taken from a thread's [`Shelf`]: used as a `Vec<T>`, put back when dropped.
pub struct Kept<T: 'static, const N: usize = 1> {
    vec: Vec<T>,
    shelf: &'static LocalKey<Shelf<T, N>>,
}

impl<T, const N: usize> Kept<T, N> {
    /// The shelf's last vector (empty, with its room), or a new one.
    pub fn take(shelf: &'static LocalKey<Shelf<T, N>>) -> Self {
        Kept {
            vec: shelf.with(Shelf::take),
            shelf,
        }
    }

    /// A new empty vector, the shelf's left in place: for a command that will push nothing.
    pub fn empty(shelf: &'static LocalKey<Shelf<T, N>>) -> Self {
        Kept {
            vec: Vec::new(),
            shelf,
        }
    }
}

impl<T, const N: usize> Deref for Kept<T, N> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.vec
    }
}

impl<T, const N: usize> DerefMut for Kept<T, N> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.vec
    }
}

impl<T, const N: usize> Drop for Kept<T, N> {
    fn drop(&mut self) {
        // a vector with no room is never kept: not worth the thread-local's lookup
        if self.vec.capacity() > 0 {
            let vec = std::mem::take(&mut self.vec);
            self.shelf.with(|shelf| shelf.put(vec));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    // each test runs on a thread of its own: its shelves start empty
    thread_local! {
        static ONE: Shelf<u64> = const { Shelf::new(1..=128) };
        static TWO: Shelf<u64, 2> = const { Shelf::new(1..=usize::MAX) };
        static COUNTED: Shelf<Rc<()>> = const { Shelf::new(1..=usize::MAX) };
    }

    /// Where a vector's allocation is, and its room.
    fn place(v: &[u64], room: usize) -> (usize, usize) {
        (v.as_ptr() as usize, room)
    }

    #[test]
    fn a_dropped_guards_vector_comes_back_emptied_with_its_room() {
        let mut first = Kept::take(&ONE);
        first.extend([1, 2, 3]);
        let was = place(&first, first.capacity());
        drop(first);
        let next = Kept::take(&ONE);
        assert!(next.is_empty());
        assert_eq!(place(&next, next.capacity()), was);
    }

    #[test]
    fn an_empty_guard_leaves_the_kept_vector_in_place() {
        let mut first = Kept::take(&ONE);
        first.push(1);
        let was = place(&first, first.capacity());
        drop(first);
        drop(Kept::empty(&ONE));
        let next = Kept::take(&ONE);
        assert_eq!(place(&next, next.capacity()), was);
    }

    #[test]
    fn a_vector_out_of_room_is_let_go() {
        ONE.with(|shelf| {
            shelf.put(Vec::with_capacity(129));
            assert_eq!(shelf.take().capacity(), 0);
            shelf.put(Vec::new());
            shelf.put(Vec::with_capacity(128));
            assert_eq!(shelf.take().capacity(), 128);
        });
    }

    #[test]
    fn a_shelf_keeps_up_to_n_vectors_the_last_put_first() {
        TWO.with(|shelf| {
            shelf.put(Vec::with_capacity(3));
            shelf.put(Vec::with_capacity(5));
            shelf.put(Vec::with_capacity(7)); // the shelf is full: let go
            assert_eq!(shelf.take().capacity(), 5);
            assert_eq!(shelf.take().capacity(), 3);
            assert_eq!(shelf.take().capacity(), 0);
        });
    }

    #[test]
    fn a_put_back_vectors_elements_are_dropped_at_once() {
        let counted = Rc::new(());
        let mut v = Kept::take(&COUNTED);
        v.push(Rc::clone(&counted));
        drop(v);
        assert_eq!(Rc::strong_count(&counted), 1);
        assert!(COUNTED.with(Shelf::take).capacity() > 0);
    }
}
