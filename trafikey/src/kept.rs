//! Emptied vectors kept from one command to the next, so that a command allocates none of them
//! (issue 44: a vector of a few hundred bytes a job is a malloc and a free of the server's
//! allocator each command, counted in the server's CPU a job).
//!
//! The one way trafikey keeps an allocation between commands: a [`Shelf`] in a
//! `thread_local!` (the server runs every command on its main thread). The vector's owner takes
//! one with `SHELF.with(Shelf::take)` and puts it back with `SHELF.with(|s| s.put(v))`, in its
//! `Drop` when it has one. Not a guard holding the `&'static LocalKey`: a thread-local reached
//! through a stored reference is looked up by an indirect call (about 20 instructions a drop,
//! a few drops a job), while one named at the call is inlined.

use std::cell::Cell;
use std::ops::RangeInclusive;

/// Up to `N` emptied vectors of `T`, the last put back taken first; a vector is kept only when
/// its room (capacity) is within the shelf's bounds: one with no room is never kept (it would
/// take a useful one's place), and one far bigger than a command needs may be let go.
pub struct Shelf<T, const N: usize = 1> {
    slots: [Cell<Vec<T>>; N],
    /// How many slots, from the first, hold a kept vector (a shelf of one slot counts none).
    filled: Cell<usize>,
    least: usize,
    most: usize,
}

impl<T, const N: usize> Shelf<T, N> {
    /// An empty shelf keeping vectors whose room is in `room`, for a `thread_local!`
    /// (`const { Shelf::new(1..=usize::MAX) }`).
    pub const fn new(room: RangeInclusive<usize>) -> Self {
        Shelf {
            slots: [const { Cell::new(Vec::new()) }; N],
            filled: Cell::new(0),
            least: *room.start(),
            most: *room.end(),
        }
    }

    /// The vector put back last, empty with its room, or a new one when the shelf is empty.
    pub fn take(&self) -> Vec<T> {
        let at = match N {
            // one slot keeps no count: an empty one holds a vector with no room
            1 => 0,
            _ => match self.filled.get().checked_sub(1) {
                Some(last) => {
                    self.filled.set(last);
                    last
                }
                None => return Vec::new(),
            },
        };
        self.slots.get(at).map_or_else(Vec::new, Cell::take)
    }

    /// Keep `v`, emptied (its elements dropped now, in the command), for the next [`take`];
    /// let go when its room is out of bounds, or when the shelf is full (a shelf of one slot
    /// lets its older vector go instead).
    ///
    /// [`take`]: Shelf::take
    pub fn put(&self, mut v: Vec<T>) {
        v.clear();
        let room = v.capacity();
        if room < self.least || room > self.most {
            return;
        }
        let at = match N {
            1 => 0,
            _ => self.filled.get(),
        };
        if let Some(slot) = self.slots.get(at) {
            slot.set(v);
            if N > 1 {
                self.filled.set(at + 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// Where a vector's allocation is, and its room.
    fn place<T>(v: &Vec<T>) -> (usize, usize) {
        (v.as_ptr() as usize, v.capacity())
    }

    #[test]
    fn a_vector_put_back_is_taken_again_emptied_with_its_room() {
        let shelf: Shelf<u64> = Shelf::new(1..=128);
        let mut first = shelf.take();
        first.extend([1, 2, 3]);
        let was = place(&first);
        shelf.put(first);
        let next = shelf.take();
        assert!(next.is_empty());
        assert_eq!(place(&next), was);
    }

    #[test]
    fn a_vector_out_of_room_is_let_go() {
        let shelf: Shelf<u64> = Shelf::new(1..=128);
        shelf.put(Vec::with_capacity(129));
        assert_eq!(shelf.take().capacity(), 0);
        // one with no room does not take the slot
        shelf.put(Vec::new());
        shelf.put(Vec::with_capacity(128));
        assert_eq!(shelf.take().capacity(), 128);
    }

    #[test]
    fn a_shelf_of_one_keeps_the_last_vector_put() {
        let shelf: Shelf<u64> = Shelf::new(1..=usize::MAX);
        shelf.put(Vec::with_capacity(3));
        shelf.put(Vec::with_capacity(5));
        assert_eq!(shelf.take().capacity(), 5);
        assert_eq!(shelf.take().capacity(), 0);
    }

    #[test]
    fn a_shelf_keeps_up_to_n_vectors_the_last_put_first() {
        let shelf: Shelf<u64, 2> = Shelf::new(1..=usize::MAX);
        shelf.put(Vec::with_capacity(3));
        shelf.put(Vec::with_capacity(5));
        shelf.put(Vec::with_capacity(7)); // the shelf is full: let go
        assert_eq!(shelf.take().capacity(), 5);
        assert_eq!(shelf.take().capacity(), 3);
        assert_eq!(shelf.take().capacity(), 0);
    }

    #[test]
    fn a_put_back_vectors_elements_are_dropped_at_once() {
        let shelf: Shelf<Rc<()>> = Shelf::new(1..=usize::MAX);
        let counted = Rc::new(());
        let mut v = shelf.take();
        v.push(Rc::clone(&counted));
        shelf.put(v);
        assert_eq!(Rc::strong_count(&counted), 1);
        assert!(shelf.take().capacity() > 0);
    }
}
