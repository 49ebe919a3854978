//! Small collectives' messages through the group's shared-memory window, on one host.
//!
//! An exchange of small collectives (see `eager`) is a handful of short messages: each member
//! sends every other member its header and the data that member needs. Through MPI each one is
//! a request posted, matched and tested, about a quarter of a microsecond apiece on this host —
//! more than the bytes themselves cost. When the group has a window (see `shm`), each ordered
//! pair of members has a *lane* in it instead: a ring of [`DEPTH`] slots in the receiver's
//! region, written by the sender alone, read by the receiver alone.
//!
//! A message is the same bytes the MPI path sends, so everything `eager` decides from them —
//! agreement, the packed run, the data — is unchanged, and so is the order in which they meet:
//! a lane is first in, first out, like MPI's messages from one member with one tag on one
//! communicator. A member that posts a message the receiver does not expect (the members
//! disagree) leaves it in the lane, and the receiver's next exchange reads it and reports the
//! disagreement, exactly as a leftover MPI message would be.
//!
//! # One lane (sender `s`, receiver `r`)
//!
//! * Message `m` (counted from 0 per lane) goes into slot `m % DEPTH`: its length and bytes,
//!   then `ready = m + 1`, stored with release ordering. The numbers only grow, so a slot's old
//!   contents are never taken for a new message.
//! * The receiver takes message `m` once it reads `ready == m + 1` (acquire): it copies the
//!   bytes out and then publishes `taken = m + 1` in the lane's control line (release).
//! * The sender may write message `m` only once `taken ≥ m + 1 − DEPTH`: the receiver has
//!   copied out the message the slot held. It reads `taken` only when its own count says the
//!   ring may be full, so a lane that keeps up costs the sender no read of the receiver's
//!   lines.
//!
//! Sending never blocks: a message whose slot is not free yet stays in the exchange's buffer
//! and is placed when the driver polls again, after every earlier message of that lane (each
//! message gets its number when it is posted). Members therefore progress in any order, as with
//! MPI's non-blocking sends; a ring that stays full makes a sender wait the way a rendezvous
//! send does, which the verifier's model (collectives synchronise) already allows for.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::eager::{MAX_MEMBERS, MSG_MAX};
use crate::error::{Error, Result};

/// Slots per lane: how many messages a sender may have placed that the receiver has not taken.
/// A member has at most two exchanges' messages in flight to a peer on one communicator (it
/// starts the next only once every message of the last has arrived) unless it sends one way
/// (a small rooted collective without the check); four leave room for that.
pub(super) const DEPTH: usize = 4;
/// A slot: `ready` and the length in its first line, the message right after (a small call's
/// whole message shares that line).
const READY: usize = 0;
const LEN: usize = 8;
const BODY: usize = 16;
/// Lines of 128 bytes: the adjacent-line prefetch of one slot never pulls in the next.
const LINES: usize = 128;
const SLOT: usize = (BODY + MSG_MAX).next_multiple_of(LINES);
/// A lane: its control line (`taken`), then its slots.
const TAKEN: usize = 0;
const LANE: usize = LINES + DEPTH * SLOT;
/// Bytes of one member's lanes: one per possible sender (its own unused).
pub(super) const BYTES: usize = MAX_MEMBERS * LANE;

/// The lanes of one group, as this member sees them, and its counts of every lane it uses.
pub(super) struct Lanes {
    /// Each member's lanes ([`BYTES`] bytes, 64-byte aligned), in member order.
    bases: Vec<*mut u8>,
    me: usize,
    /// Per peer: messages numbered for it (posted), placed in its lane, and how many of them
    /// it had taken when this member last looked.
    numbered_out: [Cell<u64>; MAX_MEMBERS],
    placed: [Cell<u64>; MAX_MEMBERS],
    seen_taken: [Cell<u64>; MAX_MEMBERS],
    /// Per peer: receives numbered (posted), and messages taken from its lane.
    numbered_in: [Cell<u64>; MAX_MEMBERS],
    taken: [Cell<u64>; MAX_MEMBERS],
}

impl Lanes {
    /// The lanes at `bases` (member order), this member being `me`.
    ///
    /// # Safety
    /// Every base must point to [`BYTES`] bytes, 64-byte aligned, shared with the members and
    /// valid as long as this value lives; every member must zero its own lanes
    /// ([`Lanes::clear_own`]) before any member sends, and use them only as this module does.
    pub(super) unsafe fn new(bases: Vec<*mut u8>, me: usize) -> Result<Lanes> {
        if me >= bases.len()
            || bases.len() > MAX_MEMBERS
            || bases
                .iter()
                .any(|b| b.is_null() || !(*b as usize).is_multiple_of(64))
        {
            return Err(Error::Internal(format!(
                "shared-memory lanes for member {me} of {} are not usable",
                bases.len()
            )));
        }
        Ok(Lanes {
            bases,
            me,
            numbered_out: Default::default(),
            placed: Default::default(),
            seen_taken: Default::default(),
            numbered_in: Default::default(),
            taken: Default::default(),
        })
    }

    /// Zeroes this member's lanes' control words (every `taken` and `ready`).
    pub(super) fn clear_own(&self) {
        for from in 0..self.bases.len() {
            self.word(self.me, from, TAKEN).store(0, Ordering::Relaxed);
            for k in 0..DEPTH {
                self.word(self.me, from, LINES + k * SLOT + READY)
                    .store(0, Ordering::Relaxed);
            }
        }
    }

    /// The lane from `from` in `member`'s lanes, at byte `at`.
    fn at(&self, member: usize, from: usize, at: usize) -> *mut u8 {
        debug_assert!(from < self.bases.len() && at < LANE);
        // SAFETY: `from` is a member index (< MAX_MEMBERS) and `at` is within a lane, so the
        // address lies within the member's BYTES (`new`'s contract).
        unsafe { self.bases[member].add(from * LANE + at) }
    }

    /// The control word at `at` of the lane from `from` in `member`'s lanes.
    fn word(&self, member: usize, from: usize, at: usize) -> &AtomicU64 {
        // SAFETY: in bounds (`at`), 8-byte aligned (bases are 64-byte aligned, lanes, slots and
        // control words at multiples of 8); shared words are only ever accessed atomically.
        unsafe { &*(self.at(member, from, at) as *const AtomicU64) }
    }

    /// The number of the next message to `peer` (a send being posted).
    pub(super) fn number_out(&self, peer: usize) -> u64 {
        let m = self.numbered_out[peer].get();
        self.numbered_out[peer].set(m + 1);
        m
    }

    /// The number of the next message from `peer` (a receive being posted).
    pub(super) fn number_in(&self, peer: usize) -> u64 {
        let m = self.numbered_in[peer].get();
        self.numbered_in[peer].set(m + 1);
        m
    }

    /// Places message `m` to `peer` (`len` bytes at `src`) if every earlier one is placed and
    /// its slot is free; says whether it did. A message longer than a slot is an error.
    ///
    /// # Safety
    /// `src` is valid for `len` bytes.
    pub(super) unsafe fn send(
        &self,
        peer: usize,
        m: u64,
        src: *const u8,
        len: usize,
    ) -> Result<bool> {
        if len > MSG_MAX {
            return Err(Error::Internal(format!(
                "a message of {len} bytes for a shared-memory lane, where at most {MSG_MAX} fit"
            )));
        }
        if self.placed[peer].get() != m {
            return Ok(false);
        }
        if m - self.seen_taken[peer].get() >= DEPTH as u64 {
            let taken = self.word(peer, self.me, TAKEN).load(Ordering::Acquire);
            self.seen_taken[peer].set(taken);
            if m - taken >= DEPTH as u64 {
                return Ok(false);
            }
        }
        let slot = LINES + (m % DEPTH as u64) as usize * SLOT;
        // SAFETY: the slot lies in the peer's lane from this member; the receiver took the
        // message it held (`taken` above, acquire) and reads it again only after `ready` says
        // so; `len ≤ MSG_MAX` fits its body.
        unsafe {
            std::ptr::copy_nonoverlapping(src, self.at(peer, self.me, slot + BODY), len);
            (self.at(peer, self.me, slot + LEN) as *mut u64).write(len as u64);
        }
        self.word(peer, self.me, slot + READY)
            .store(m + 1, Ordering::Release);
        self.placed[peer].set(m + 1);
        Ok(true)
    }

    /// Takes message `m` from `peer` into `dst` if it is there (and every earlier one was
    /// taken): its length. A message longer than `cap` is an error (nothing is copied).
    ///
    /// # Safety
    /// `dst` is valid for `cap` bytes of writes.
    pub(super) unsafe fn receive(
        &self,
        peer: usize,
        m: u64,
        dst: *mut u8,
        cap: usize,
    ) -> Result<Option<usize>> {
        if self.taken[peer].get() != m {
            return Ok(None);
        }
        let slot = LINES + (m % DEPTH as u64) as usize * SLOT;
        if self
            .word(self.me, peer, slot + READY)
            .load(Ordering::Acquire)
            != m + 1
        {
            return Ok(None);
        }
        // SAFETY: `ready` (acquire) says the sender wrote the length and body before it, and it
        // writes the slot again only after `taken` says this member is done with it.
        let len = unsafe { (self.at(self.me, peer, slot + LEN) as *const u64).read() };
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= cap.min(MSG_MAX))
            .ok_or_else(|| {
                Error::Internal(format!(
                    "a message of {len} bytes from member {peer} in a shared-memory lane, where \
                     at most {} fit",
                    cap.min(MSG_MAX)
                ))
            })?;
        // SAFETY: as above; `dst` has room for `len ≤ cap` bytes (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(self.at(self.me, peer, slot + BODY), dst, len) };
        self.taken[peer].set(m + 1);
        self.word(self.me, peer, TAKEN)
            .store(m + 1, Ordering::Release);
        Ok(Some(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes for `n` members in plain memory (threads stand in for processes).
    struct Shared(Vec<u64>, usize);

    impl Shared {
        fn new(n: usize) -> Shared {
            Shared(vec![0u64; (n * BYTES + 64) / 8], n)
        }
        fn bases(&mut self) -> Vec<usize> {
            let first = (self.0.as_mut_ptr() as usize).div_ceil(64) * 64;
            (0..self.1).map(|j| first + j * BYTES).collect()
        }
    }

    fn lanes(bases: &[usize], me: usize) -> Lanes {
        let bases = bases.iter().map(|&b| b as *mut u8).collect();
        // SAFETY: the test's shared memory outlives the lanes; each is used as the module says.
        unsafe { Lanes::new(bases, me).unwrap() }
    }

    /// Every member sends every other one a stream of messages of changing lengths (some far
    /// longer than a line, one the largest that fits), and receives theirs, with no order
    /// between members: each ends with every message, whole and in order, although rings fill
    /// (members post many messages before they receive any).
    #[test]
    fn every_message_arrives_whole_and_in_order() {
        for n in [2, 3, 4] {
            let mut shared = Shared::new(n);
            let bases = shared.bases();
            const MESSAGES: u64 = 64;
            let body = |from: usize, to: usize, m: u64| -> Vec<u8> {
                let len = match m % 5 {
                    0 => 1,
                    1 => 40,
                    2 => 3000,
                    3 => MSG_MAX,
                    _ => 8,
                };
                (0..len)
                    .map(|i| (from * 31 + to * 7 + m as usize * 13 + i) as u8)
                    .collect()
            };
            std::thread::scope(|s| {
                for me in 0..n {
                    let bases = &bases;
                    s.spawn(move || {
                        let l = lanes(bases, me);
                        let peers: Vec<usize> = (0..n).filter(|&j| j != me).collect();
                        let mut out: Vec<(usize, u64, Vec<u8>)> = Vec::new();
                        for m in 0..MESSAGES {
                            for &j in &peers {
                                assert_eq!(l.number_out(j), m);
                                out.push((j, m, body(me, j, m)));
                            }
                        }
                        let mut want: Vec<(usize, u64)> = Vec::new();
                        for _ in 0..MESSAGES {
                            for &j in &peers {
                                want.push((j, l.number_in(j)));
                            }
                        }
                        let mut buf = vec![0u8; MSG_MAX];
                        while !out.is_empty() || !want.is_empty() {
                            // Newest first: a later message must wait for the earlier ones.
                            out.retain(|(j, m, b)| {
                                // SAFETY: `b` holds its bytes.
                                !unsafe { l.send(*j, *m, b.as_ptr(), b.len()) }.unwrap()
                            });
                            want.retain(|&(j, m)| {
                                // SAFETY: `buf` holds MSG_MAX bytes.
                                match unsafe { l.receive(j, m, buf.as_mut_ptr(), MSG_MAX) } {
                                    Ok(Some(len)) => {
                                        assert_eq!(
                                            &buf[..len],
                                            &body(j, me, m)[..],
                                            "{j}→{me} #{m}"
                                        );
                                        false
                                    }
                                    Ok(None) => true,
                                    Err(e) => panic!("{e}"),
                                }
                            });
                            std::thread::yield_now();
                        }
                    });
                }
            });
        }
    }

    /// A message longer than the receive's room is an error, not a partial copy; one not yet
    /// numbered, or one whose earlier message is still unplaced, is not sent.
    #[test]
    fn out_of_order_and_oversized_messages_are_refused() {
        let mut shared = Shared::new(2);
        let bases = shared.bases();
        let (a, b) = (lanes(&bases, 0), lanes(&bases, 1));
        let msg = [7u8; 100];
        // SAFETY: every source holds the bytes sent; every receive buffer the room given.
        unsafe {
            assert!(
                !a.send(1, 1, msg.as_ptr(), 100).unwrap(),
                "message 1 before 0"
            );
            let long = vec![0u8; MSG_MAX + 1];
            assert!(
                a.send(1, 0, long.as_ptr(), long.len()).is_err(),
                "longer than a slot"
            );
            assert!(a.send(1, 0, msg.as_ptr(), 100).unwrap());
            let mut buf = [0u8; 100];
            assert!(matches!(b.receive(0, 1, buf.as_mut_ptr(), 100), Ok(None)));
            assert!(b.receive(0, 0, buf.as_mut_ptr(), 99).is_err());
            assert_eq!(b.receive(0, 0, buf.as_mut_ptr(), 100).unwrap(), Some(100));
            assert_eq!(buf, msg);
            // Once taken, nothing more is there.
            assert!(matches!(b.receive(0, 1, buf.as_mut_ptr(), 100), Ok(None)));
        }
        // A full ring refuses until the receiver takes.
        for m in 1..=DEPTH as u64 {
            // SAFETY: as above.
            assert!(unsafe { a.send(1, m, msg.as_ptr(), 1) }.unwrap());
        }
        // SAFETY: as above.
        unsafe {
            assert!(
                !a.send(1, DEPTH as u64 + 1, msg.as_ptr(), 1).unwrap(),
                "ring full"
            );
            let mut buf = [0u8; 1];
            assert_eq!(b.receive(0, 1, buf.as_mut_ptr(), 1).unwrap(), Some(1));
            assert!(a.send(1, DEPTH as u64 + 1, msg.as_ptr(), 1).unwrap());
        }
    }
}
