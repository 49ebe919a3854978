//! The broadcast steps a rank left early as their root and has not checked yet (see `eager`):
//! a queue of step numbers, oldest first, kept as runs of consecutive steps.
//!
//! A root that loops over small broadcasts leaves every step of its communicator, one per call,
//! and checks them a few hundred at a time. A queue of single steps cost that loop a push and,
//! later, a pop per call (a sixth of a world-1 broadcast's instructions); as runs, a step left
//! right after the last one only moves the newest run's end, and the steps every member has
//! finished go in one cut.

use std::collections::VecDeque;
use std::ops::Range;

/// Steps left early and not yet checked, in increasing order.
#[derive(Default, Debug)]
pub(crate) struct Left {
    /// The runs before the newest, oldest first; none is empty.
    older: VecDeque<Range<u64>>,
    /// The newest run (empty when there are no steps), outside the deque so that the common
    /// push touches two plain fields.
    newest: Range<u64>,
    /// How many steps all the runs hold.
    count: u64,
}

impl Left {
    /// Appends step `k`, which is later than every step held.
    #[inline(always)]
    pub(crate) fn push(&mut self, k: u64) {
        debug_assert!(self.newest.is_empty() || k >= self.newest.end);
        self.count += 1;
        if self.newest.end == k && !self.newest.is_empty() {
            self.newest.end += 1;
        } else {
            self.start_run(k);
        }
    }

    /// [`Left::push`] of a step that does not extend the newest run: it starts one. (Out of
    /// line, so that the common push writes two fields rather than a whole run.)
    #[inline(never)]
    fn start_run(&mut self, k: u64) {
        let last = std::mem::replace(&mut self.newest, k..k + 1);
        if !last.is_empty() {
            self.older.push_back(last);
        }
    }

    /// How many steps are held.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.count
    }

    /// The oldest step held.
    #[inline]
    pub(crate) fn front(&self) -> Option<u64> {
        match self.older.front() {
            Some(r) => Some(r.start),
            None if !self.newest.is_empty() => Some(self.newest.start),
            None => None,
        }
    }

    /// Removes the oldest step.
    pub(crate) fn pop_front(&mut self) {
        if let Some(k) = self.front() {
            self.drop_below(k + 1);
        }
    }

    /// Removes every step before `bound`.
    pub(crate) fn drop_below(&mut self, bound: u64) {
        loop {
            let run = match self.older.front_mut() {
                Some(r) => r,
                None if !self.newest.is_empty() => &mut self.newest,
                None => return,
            };
            if run.start >= bound {
                return;
            }
            let cut = bound.min(run.end);
            self.count -= cut - run.start;
            run.start = cut;
            if !run.is_empty() {
                return;
            }
            self.drop_empty_front();
        }
    }

    /// Drops the oldest run, which has just become empty.
    fn drop_empty_front(&mut self) {
        if self.older.pop_front().is_none() {
            self.newest = 0..0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn consecutive_steps_make_one_run() {
        let mut l = Left::default();
        assert_eq!((l.front(), l.len()), (None, 0));
        for k in 5..9 {
            l.push(k);
        }
        assert!(l.older.is_empty());
        assert_eq!((l.front(), l.len()), (Some(5), 4));
        l.push(20);
        assert_eq!(l.older.len(), 1);
        l.drop_below(7);
        assert_eq!((l.front(), l.len()), (Some(7), 3));
        l.drop_below(100);
        assert_eq!((l.front(), l.len()), (None, 0));
        // Empty again: the next push starts a fresh run, even at step 0.
        l.push(0);
        assert_eq!((l.front(), l.len()), (Some(0), 1));
    }

    proptest! {
        /// Any sequence of pushes, pops and cuts leaves exactly what a plain queue of steps
        /// holds.
        #[test]
        #[cfg_attr(miri, ignore)] // thousands of cases, no unsafe code
        fn behaves_as_a_queue_of_steps(
            actions in prop::collection::vec((0u8..3, 0u64..4), 0..200),
        ) {
            let mut l = Left::default();
            let mut reference: VecDeque<u64> = VecDeque::new();
            let mut next = 0u64;
            for (what, x) in actions {
                match what {
                    0 => {
                        next += x; // 0: consecutive, more: a gap
                        l.push(next);
                        reference.push_back(next);
                        next += 1;
                    }
                    1 => {
                        l.pop_front();
                        reference.pop_front();
                    }
                    _ => {
                        let bound = reference.front().map_or(next, |&f| f + x * 2);
                        l.drop_below(bound);
                        reference.retain(|&k| k >= bound);
                    }
                }
                prop_assert_eq!(l.len(), reference.len() as u64);
                prop_assert_eq!(l.front(), reference.front().copied());
            }
        }
    }
}
