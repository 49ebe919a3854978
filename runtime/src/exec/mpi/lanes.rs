//! Small collectives' messages through the group's shared-memory window, on one host.
//!
//! An exchange of small collectives (see `eager`) is a handful of short messages: each member
//! sends every other member its header and the data that member needs. Through MPI each one is
//! a request posted, matched and tested, about a quarter of a microsecond apiece on this host —
//! more than the bytes themselves cost. When the group has a window (see `shm`), each ordered
//! pair of members has a *lane* in it instead, in the receiver's region: written by the sender
//! alone, read by the receiver alone.
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
//! A lane has [`ENTRIES`] fixed entries of one line each and a ring of [`RING`] bytes.
//!
//! * Message `m` (counted from 0 per lane) is announced in entry `m % ENTRIES`: its length,
//!   and where its bytes are. A message of at most [`INLINE`] bytes (a small call's header and
//!   data) sits in the entry itself, so it moves as one cache line. A longer one goes into the
//!   ring, contiguous (it starts over at the ring's beginning rather than wrap). Then the
//!   sender stores `ready = m + 1` in the entry, with release ordering.
//! * The receiver takes message `m` once it reads `ready == m + 1` (acquire). It reads the
//!   bytes where they are, and once it is done with them publishes in the lane's control line
//!   how many messages it has taken and where in the ring its taking ended (release).
//! * Senders write a message straight into its place when the lane has room for it, and
//!   receivers read it there ([`Lanes::reserve`], [`Lanes::take`]): each byte crosses shared
//!   memory once, as the lone copy of MPI's single-copy transfers does. (Copying it in from a
//!   send buffer and out into a receive buffer, as this module first did, put a 64 KiB
//!   broadcast at 0.6–2.2× raw MPI; see `docs/decisions.md`.)
//! * The sender writes an entry, or ring bytes, only once the receiver's counts say it is done
//!   with what they held. It reads those counts only when its own say the lane may be full, so
//!   a lane that keeps up costs the sender no read of the receiver's lines.
//!
//! Only entries carry `ready` words, and entries only ever hold announcements. So a `ready`
//! word is never a stale byte of an earlier message's data that happens to look like one, and
//! message numbers only grow, so an entry's old announcement is never taken for a new one.
//!
//! Sending never blocks: a message that does not fit yet stays in the exchange's buffer and is
//! placed when the driver polls again, after every earlier message of that lane (each message
//! gets its number when it is posted). Members therefore progress in any order, as with MPI's
//! non-blocking sends. A lane holds hundreds of small messages, so a root of small one-way
//! broadcasts runs ahead of its members as far as MPI's eager buffers let it; a lane that
//! stays full makes the sender wait the way a rendezvous send does, which the verifier's model
//! (collectives synchronise) already allows for.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::exec::copy::copy_to_shared;

/// Members a group may have and still have lanes (the most that exchange small collectives'
/// messages, see `eager`).
pub(super) const MAX_MEMBERS: usize = 8;
/// The longest message a lane carries: a header and one exchange's full payload (`eager`
/// checks that its messages fit).
pub(super) const MSG_MAX: usize = 64 * 1024 + 128;

/// Lines of 128 bytes: the adjacent-line prefetch of the control line never pulls in an entry.
const LINES: usize = 128;
/// The control line: messages taken, and where in the ring the last taken one ended (both
/// absolute counts that only grow).
const TAKEN: usize = 0;
const TAKEN_BYTES: usize = 8;
/// Entries per lane: how many messages a sender may have placed that the receiver has not
/// taken.
pub(super) const ENTRIES: usize = 256;
/// An entry: `ready`, the length, where in the ring the bytes are, then the bytes themselves
/// when they fit the rest of the line.
const ENTRY: usize = 64;
const READY: usize = 0;
const LEN: usize = 8;
const AT: usize = 16;
const BODY: usize = 24;
pub(super) const INLINE: usize = ENTRY - BODY;
/// Ring bytes per lane: room for four of the longest messages.
pub(super) const RING: usize = 4 * MSG_MAX.next_multiple_of(ENTRY);
const ENTRIES_AT: usize = LINES;
const RING_AT: usize = ENTRIES_AT + ENTRIES * ENTRY;
const LANE: usize = RING_AT + RING;
/// Bytes of one member's lanes: one per possible sender (its own unused).
pub(super) const BYTES: usize = MAX_MEMBERS * LANE;
const _: () = assert!(RING.is_multiple_of(ENTRY) && LANE.is_multiple_of(ENTRY));

/// Where, within a lane, message `m`'s entry lies.
fn entry_at(m: u64) -> usize {
    ENTRIES_AT + (m % ENTRIES as u64) as usize * ENTRY
}

/// A sender's view of one lane.
#[derive(Default)]
struct Out {
    /// Messages numbered (posted), placed.
    numbered: Cell<u64>,
    placed: Cell<u64>,
    /// Where the next ring bytes go (absolute).
    ring_at: Cell<u64>,
    /// The receiver's counts when this member last read them.
    seen_taken: Cell<u64>,
    seen_bytes: Cell<u64>,
}

/// A receiver's view of one lane.
#[derive(Default)]
struct In {
    /// Receives numbered (posted), messages taken.
    numbered: Cell<u64>,
    taken: Cell<u64>,
}

/// The lanes of one group, as this member sees them, and its counts of every lane it uses.
pub(super) struct Lanes {
    /// Each member's lanes ([`BYTES`] bytes, 64-byte aligned), in member order.
    bases: Vec<*mut u8>,
    me: usize,
    /// Per peer: the lane this member writes in its lanes, and the one it reads in its own.
    out: [Out; MAX_MEMBERS],
    from: [In; MAX_MEMBERS],
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
            out: Default::default(),
            from: Default::default(),
        })
    }

    /// Zeroes this member's lanes' control words (the counts and every `ready`).
    pub(super) fn clear_own(&self) {
        for from in 0..self.bases.len() {
            self.word(self.me, from, TAKEN).store(0, Ordering::Relaxed);
            self.word(self.me, from, TAKEN_BYTES)
                .store(0, Ordering::Relaxed);
            for e in 0..ENTRIES {
                self.word(self.me, from, entry_at(e as u64) + READY)
                    .store(0, Ordering::Relaxed);
            }
        }
    }

    /// Byte `at` of the lane from `from` in `member`'s lanes.
    fn at(&self, member: usize, from: usize, at: usize) -> *mut u8 {
        debug_assert!(from < self.bases.len() && at < LANE);
        // SAFETY: `from` is a member index (< MAX_MEMBERS) and `at` is within a lane, so the
        // address lies within the member's BYTES (`new`'s contract).
        unsafe { self.bases[member].add(from * LANE + at) }
    }

    /// The word at `at` of the lane from `from` in `member`'s lanes.
    fn word(&self, member: usize, from: usize, at: usize) -> &AtomicU64 {
        // SAFETY: in bounds (`at`), 8-byte aligned (bases are 64-byte aligned, lanes, entries
        // and their words at multiples of 8); shared words are only ever accessed atomically.
        unsafe { &*(self.at(member, from, at) as *const AtomicU64) }
    }

    /// The number of the next message to `peer` (a send being posted).
    pub(super) fn number_out(&self, peer: usize) -> u64 {
        let c = &self.out[peer].numbered;
        c.set(c.get() + 1);
        c.get() - 1
    }

    /// The number of the next message from `peer` (a receive being posted).
    pub(super) fn number_in(&self, peer: usize) -> u64 {
        let c = &self.from[peer].numbered;
        c.set(c.get() + 1);
        c.get() - 1
    }

    /// Places message `m` to `peer` (`len` bytes at `src`) if every earlier one is placed and
    /// the lane has room; says whether it did. A message longer than [`MSG_MAX`] is an error.
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
        let Some(room) = self.reserve(peer, m, len)? else {
            return Ok(false);
        };
        // SAFETY: the caller's contract, and `reserve`'s: `room.dst` has `len` bytes.
        unsafe { copy_to_shared(room.dst, src, len) };
        self.publish(room);
        Ok(true)
    }

    /// Room for message `m` to `peer`, `len` bytes, if every earlier one is placed and the
    /// lane has it: the caller writes the message at `dst` and then [`Lanes::publish`]es it
    /// (so a message is written once, straight where the receiver reads it). A message
    /// longer than [`MSG_MAX`] is an error.
    pub(super) fn reserve(&self, peer: usize, m: u64, len: usize) -> Result<Option<Room>> {
        if len > MSG_MAX {
            return Err(Error::Internal(format!(
                "a message of {len} bytes for a shared-memory lane, where at most {MSG_MAX} fit"
            )));
        }
        let (o, me) = (&self.out[peer], self.me);
        if o.placed.get() != m {
            return Ok(None);
        }
        if m - o.seen_taken.get() >= ENTRIES as u64 {
            o.seen_taken
                .set(self.word(peer, me, TAKEN).load(Ordering::Acquire));
            if m - o.seen_taken.get() >= ENTRIES as u64 {
                return Ok(None);
            }
        }
        let entry = entry_at(m);
        let (ring, size) = (RING as u64, len.next_multiple_of(ENTRY) as u64);
        let dst = if len <= INLINE {
            self.at(peer, me, entry + BODY)
        } else {
            // Contiguous: a message that would run past the ring's end starts at its beginning.
            let mut at = o.ring_at.get();
            if at % ring + size > ring {
                at += ring - at % ring;
            }
            if at + size - o.seen_bytes.get() > ring {
                o.seen_bytes
                    .set(self.word(peer, me, TAKEN_BYTES).load(Ordering::Acquire));
                if at + size - o.seen_bytes.get() > ring {
                    return Ok(None);
                }
            }
            o.ring_at.set(at + size);
            // SAFETY: AT lies within the entry, which the receiver is done with (its counts
            // say so) and reads again only after `ready` says so.
            unsafe { (self.at(peer, me, entry + AT) as *mut u64).write(at + size) };
            self.at(peer, me, RING_AT + (at % ring) as usize)
        };
        // The entry, and the ring bytes `dst..dst + len` (contiguous, within the ring), lie in
        // the peer's lane from this member; the receiver is done with both (its counts, read
        // with acquire ordering, say so) and reads them again only after `ready` says so.
        Ok(Some(Room { peer, m, len, dst }))
    }

    /// Announces the message written into `room` to its receiver.
    pub(super) fn publish(&self, room: Room) {
        let Room { peer, m, len, .. } = room;
        let entry = entry_at(m);
        // SAFETY: LEN lies within the entry, which is this member's to write until `ready`
        // (see `reserve`).
        unsafe { (self.at(peer, self.me, entry + LEN) as *mut u64).write(len as u64) };
        self.word(peer, self.me, entry + READY)
            .store(m + 1, Ordering::Release);
        self.out[peer].placed.set(m + 1);
    }

    /// Takes message `m` from `peer` into `dst` if it is there (and every earlier one was
    /// taken): its length. A message longer than `cap`, or announced outside the ring, is an
    /// error (nothing is copied).
    ///
    /// (The lanes' own tests receive this way; exchanges read in place, see [`Lanes::take`].)
    ///
    /// # Safety
    /// `dst` is valid for `cap` bytes of writes.
    #[cfg(test)]
    pub(super) unsafe fn receive(
        &self,
        peer: usize,
        m: u64,
        dst: *mut u8,
        cap: usize,
    ) -> Result<Option<usize>> {
        let Some(held) = self.take(peer, m, cap)? else {
            return Ok(None);
        };
        // SAFETY: `held` is valid until released (see `take`); `dst` has room for
        // `len ≤ cap` bytes (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(held.src, dst, held.len) };
        let len = held.len;
        self.release(held);
        Ok(Some(len))
    }

    /// Takes message `m` from `peer` if it is there (and every earlier one was taken) but
    /// leaves its bytes in the lane, so that the receiver reads them where they are: they stay
    /// valid and unchanged until [`Lanes::release`]. A message longer than `cap` (or than
    /// [`MSG_MAX`]), or announced outside the ring, is an error.
    ///
    /// Releases are cumulative: releasing a later message from `peer` releases every earlier
    /// one too, so a message is held at most until the next one from its sender is released.
    pub(super) fn take(&self, peer: usize, m: u64, cap: usize) -> Result<Option<Held>> {
        let (i, me) = (&self.from[peer], self.me);
        if i.taken.get() != m {
            return Ok(None);
        }
        let entry = entry_at(m);
        if self.word(me, peer, entry + READY).load(Ordering::Acquire) != m + 1 {
            return Ok(None);
        }
        // SAFETY: `ready` (acquire) says the sender wrote the entry and the bytes before it,
        // and it writes them again only after this member's counts say it is done with them.
        let (len, end) = unsafe {
            (
                (self.at(me, peer, entry + LEN) as *const u64).read(),
                (self.at(me, peer, entry + AT) as *const u64).read(),
            )
        };
        let room = cap.min(MSG_MAX);
        let bad = |what: String| {
            Error::Internal(format!(
                "member {peer}'s message {m} in a shared-memory lane {what}"
            ))
        };
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= room)
            .ok_or_else(|| bad(format!("has {len} bytes, where at most {room} fit")))?;
        let (src, end) = if len <= INLINE {
            (self.at(me, peer, entry + BODY), None)
        } else {
            let (ring, size) = (RING as u64, len.next_multiple_of(ENTRY) as u64);
            let start = end.wrapping_sub(size);
            if end < size || start % ring + size > ring {
                return Err(bad(format!("ends at {end}, outside the ring")));
            }
            (
                self.at(me, peer, RING_AT + (start % ring) as usize),
                Some(end),
            )
        };
        i.taken.set(m + 1);
        Ok(Some(Held {
            src,
            len,
            peer,
            m,
            end,
        }))
    }

    /// Gives `held`'s bytes (and its entry) back to its sender.
    pub(super) fn release(&self, held: Held) {
        let Held { peer, m, end, .. } = held;
        if let Some(end) = end {
            self.word(self.me, peer, TAKEN_BYTES)
                .store(end, Ordering::Release);
        }
        self.word(self.me, peer, TAKEN)
            .store(m + 1, Ordering::Release);
    }
}

/// Room in a lane for one message, from [`Lanes::reserve`]: `len` bytes at `dst`, this
/// member's to write until it is published.
#[must_use = "a reserved message must be published, or its lane stops"]
pub(super) struct Room {
    peer: usize,
    m: u64,
    len: usize,
    /// Where the message's bytes go.
    pub(super) dst: *mut u8,
}

/// A message taken but left in its lane ([`Lanes::take`]): `len` bytes at `src`, unchanged
/// until [`Lanes::release`]d.
#[must_use = "a held message must be released, or its lane stops"]
pub(super) struct Held {
    /// Where the message's bytes are.
    pub(super) src: *const u8,
    pub(super) len: usize,
    peer: usize,
    m: u64,
    /// Where in the ring its bytes end (none when they sit in the entry).
    end: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes for `n` members in plain memory (threads stand in for processes).
    struct Shared(Vec<u64>, usize);

    /// A member's lanes, handed to the thread that stands in for it.
    #[derive(Clone, Copy)]
    struct Base(*mut u8);
    // SAFETY: the memory outlives the threads (scoped), and the lanes' protocol orders every
    // access to it.
    unsafe impl Send for Base {}
    // SAFETY: as for `Send`: a `Base` is only an address.
    unsafe impl Sync for Base {}

    impl Shared {
        fn new(n: usize) -> Shared {
            Shared(vec![0u64; (n * BYTES + 64) / 8], n)
        }
        fn bases(&mut self) -> Vec<Base> {
            let all = self.0.as_mut_ptr().cast::<u8>();
            // SAFETY: the first 64-byte boundary is at most 63 bytes in, and n · BYTES follow.
            let first = unsafe { all.add(all.align_offset(64)) };
            // SAFETY: as above.
            (0..self.1)
                .map(|j| Base(unsafe { first.add(j * BYTES) }))
                .collect()
        }
    }

    fn lanes(bases: &[Base], me: usize) -> Lanes {
        let bases = bases.iter().map(|b| b.0).collect();
        // SAFETY: the test's shared memory outlives the lanes; each is used as the module says.
        unsafe { Lanes::new(bases, me).unwrap() }
    }

    /// Every member sends every other one a stream of messages of changing lengths (some far
    /// longer than a line, one the largest that fits), and receives theirs, with no order
    /// between members: each ends with every message, whole and in order, although rings fill
    /// (members post many messages before they receive any).
    #[test]
    fn every_message_arrives_whole_and_in_order() {
        // (Under Miri, two and three members: lanes are per pair, and three show a member
        // serving several.)
        let worlds: &[usize] = if cfg!(miri) { &[2, 3] } else { &[2, 3, 4] };
        for &n in worlds {
            let mut shared = Shared::new(n);
            let bases = shared.bases();
            // (Fewer under Miri, still enough to go round the ring.)
            let messages: u64 = if cfg!(miri) { 12 } else { 64 };
            // (Under Miri, whose byte loops are slow, the longest is shorter.)
            let longest = if cfg!(miri) { 5000 } else { MSG_MAX };
            let body = |from: usize, to: usize, m: u64| -> Vec<u8> {
                let len = match m % 5 {
                    0 => 1,
                    1 => 40,
                    2 => 3000,
                    3 => longest,
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
                        for m in 0..messages {
                            for &j in &peers {
                                assert_eq!(l.number_out(j), m);
                                out.push((j, m, body(me, j, m)));
                            }
                        }
                        let mut want: Vec<(usize, u64)> = Vec::new();
                        for _ in 0..messages {
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
        let msg = [7u8; 30]; // an entry's message: the ring starts empty below
        // SAFETY: every source holds the bytes sent; every receive buffer the room given.
        unsafe {
            assert!(
                !a.send(1, 1, msg.as_ptr(), 30).unwrap(),
                "message 1 before 0"
            );
            let long = vec![0u8; MSG_MAX + 1];
            assert!(
                a.send(1, 0, long.as_ptr(), long.len()).is_err(),
                "longer than a slot"
            );
            assert!(a.send(1, 0, msg.as_ptr(), 30).unwrap());
            let mut buf = [0u8; 30];
            assert!(matches!(b.receive(0, 1, buf.as_mut_ptr(), 30), Ok(None)));
            assert!(b.receive(0, 0, buf.as_mut_ptr(), 29).is_err());
            assert_eq!(b.receive(0, 0, buf.as_mut_ptr(), 30).unwrap(), Some(30));
            assert_eq!(buf, msg);
            // Once taken, nothing more is there.
            assert!(matches!(b.receive(0, 1, buf.as_mut_ptr(), 30), Ok(None)));
        }
        // Entries run out: the sender waits for the receiver to take one.
        let last = ENTRIES as u64;
        for m in 1..=last {
            // SAFETY: as above.
            assert!(unsafe { a.send(1, m, msg.as_ptr(), 1) }.unwrap());
        }
        // SAFETY: as above.
        unsafe {
            assert!(!a.send(1, last + 1, msg.as_ptr(), 1).unwrap(), "no entry");
            let mut buf = [0u8; 1];
            assert_eq!(b.receive(0, 1, buf.as_mut_ptr(), 1).unwrap(), Some(1));
            assert!(a.send(1, last + 1, msg.as_ptr(), 1).unwrap());
            for m in 2..=last + 1 {
                assert_eq!(b.receive(0, m, buf.as_mut_ptr(), 1).unwrap(), Some(1));
            }
        }
        // The ring runs out: four of the longest messages fill it.
        let long = vec![3u8; MSG_MAX];
        let first = last + 2;
        for m in first..first + 4 {
            // SAFETY: as above.
            assert!(unsafe { a.send(1, m, long.as_ptr(), MSG_MAX) }.unwrap());
        }
        let mut buf = vec![0u8; MSG_MAX];
        // SAFETY: as above.
        unsafe {
            assert!(
                !a.send(1, first + 4, long.as_ptr(), MSG_MAX).unwrap(),
                "ring full"
            );
            // A short message behind it waits too, though its entry has room.
            assert!(
                !a.send(1, first + 5, msg.as_ptr(), 1).unwrap(),
                "in order only"
            );
            let got = b.receive(0, first, buf.as_mut_ptr(), MSG_MAX).unwrap();
            assert_eq!(got, Some(MSG_MAX));
            assert_eq!(buf, long);
            assert!(a.send(1, first + 4, long.as_ptr(), MSG_MAX).unwrap());
            assert!(a.send(1, first + 5, msg.as_ptr(), 1).unwrap());
        }
    }

    /// A message written in place (reserved, then published) reaches its receiver like a sent
    /// one; a message taken but held keeps its bytes, and its room, until it is released: the
    /// sender cannot place a message over it, and a release of a later message frees it too.
    #[test]
    fn held_messages_keep_their_room_until_released() {
        let mut shared = Shared::new(2);
        let bases = shared.bases();
        let (a, b) = (lanes(&bases, 0), lanes(&bases, 1));
        let long = |m: u64| vec![m as u8 + 1; MSG_MAX];
        // Four of the longest fill the ring; two written in place, two copied.
        for m in 0..4 {
            if m % 2 == 0 {
                let room = a.reserve(1, m, MSG_MAX).unwrap().expect("room");
                assert!(
                    a.reserve(1, m + 1, 1).unwrap().is_none(),
                    "not before {m} is published"
                );
                // SAFETY: the room has MSG_MAX bytes.
                unsafe { std::ptr::copy_nonoverlapping(long(m).as_ptr(), room.dst, MSG_MAX) };
                a.publish(room);
            } else {
                // SAFETY: the source holds MSG_MAX bytes.
                assert!(unsafe { a.send(1, m, long(m).as_ptr(), MSG_MAX) }.unwrap());
            }
        }
        let bytes = |h: &Held| {
            // SAFETY: a held message's bytes stay valid until it is released.
            unsafe { std::slice::from_raw_parts(h.src, h.len) }.to_vec()
        };
        assert!(b.take(0, 1, MSG_MAX).unwrap().is_none(), "in order only");
        assert!(b.take(0, 0, MSG_MAX - 1).is_err(), "longer than the room");
        let first = b.take(0, 0, MSG_MAX).unwrap().expect("message 0");
        let second = b.take(0, 1, MSG_MAX).unwrap().expect("message 1");
        assert_eq!(bytes(&first), long(0));
        assert_eq!(bytes(&second), long(1));
        // Both held: the ring is still full.
        assert!(a.reserve(1, 4, MSG_MAX).unwrap().is_none(), "ring held");
        assert_eq!(bytes(&first), long(0));
        // Releasing the second frees the first's room as well.
        b.release(second);
        assert!(
            a.reserve(1, 4, MSG_MAX).unwrap().is_some(),
            "room after release"
        );
        drop(first);
    }
}
