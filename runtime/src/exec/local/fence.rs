//! Asymmetric fences for the two store-then-load handshakes of a world: a rank that publishes
//! progress and then looks for sleepers to wake (`WorldState::wake`), against a rank that says
//! it will sleep and then looks for progress once more (`WorldState::announce`); and a rank
//! entering a progress pass and then looking for an abort (`WorldState::enter`), against a rank
//! that saw the abort and then waits for passes to end (`WorldState::quiesce`).
//!
//! Each handshake needs a store-load fence on both sides, or a sleeper could miss its wake-up
//! (and a quiescing rank a pass that is about to touch its buffers). But one side runs on every
//! call and the other almost never: a rank announces sleep only after yielding for hundreds of
//! microseconds, and quiesces only when the world stops. A full fence on the hot side waits for
//! the store buffer to drain — including the store that hands the step's data to another core;
//! the two were a fifth of a small broadcast at world 2. So, where Linux offers it, the hot side
//! only keeps the compiler from reordering ([`light`]) and the rare side makes every running
//! thread of the process execute a full barrier (`membarrier`, [`heavy`]), as user-space RCU
//! and Folly's asymmetric barriers do. Elsewhere (other systems, kernels before 4.14, sandboxes
//! that refuse the call, Miri) both sides are full fences.
//!
//! Why it is enough: `heavy` returns only after every thread of the process that was running
//! has passed a full barrier at some point P during the call (a thread that was not running
//! passed one when it was switched out). Let the hot side store S, then load L; the rare side
//! store S', call `heavy`, then load L'. If P falls before S, then S' (visible before the call)
//! is visible to L, which comes after P. If P falls after S, S is visible at P, before L' runs.
//! Either way one side sees the other's store — what a fence on both sides guarantees.

use std::sync::OnceLock;
use std::sync::atomic::{Ordering, compiler_fence, fence};

/// Whether the asymmetric form is in use: decided once per process, before the first world's
/// threads start ([`init`]), and the same for both sides from then on.
static ASYMMETRIC: OnceLock<bool> = OnceLock::new();

/// Decides the form (registering with the kernel if it is asymmetric). Called when a world is
/// created, before any of its threads runs either side.
pub(crate) fn init() {
    ASYMMETRIC.get_or_init(sys::register);
}

/// Whether [`init`] chose the asymmetric form.
#[inline(always)]
fn asymmetric() -> bool {
    ASYMMETRIC.get().copied().unwrap_or(false)
}

/// The hot side's fence: between its store and its load.
#[inline(always)]
pub(crate) fn light() {
    if asymmetric() {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The rare side's fence: between its store and its load. `Err` carries the system's error if
/// the barrier could not be made although the kernel offers it and accepted a registration
/// (only a lasting shortage of kernel memory could cause that): the caller must then not rely
/// on the handshake.
pub(crate) fn heavy() -> Result<(), String> {
    if asymmetric() {
        sys::barrier()
    } else {
        fence(Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(all(target_os = "linux", not(miri)))]
mod sys {
    use std::ffi::c_long;

    // The commands of `membarrier(2)` (linux/membarrier.h).
    const QUERY: c_long = 0;
    const PRIVATE_EXPEDITED: c_long = 1 << 3;
    const REGISTER_PRIVATE_EXPEDITED: c_long = 1 << 4;

    fn membarrier(cmd: c_long) -> c_long {
        // SAFETY: `membarrier` takes two integers (and a CPU id only with a flag not given
        // here) and touches no memory of ours; an unknown command or kernel returns -1.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as c_long, 0 as c_long) }
    }

    /// Whether the kernel offers private expedited barriers and registered this process for
    /// them.
    pub(super) fn register() -> bool {
        let offered = membarrier(QUERY);
        offered > 0
            && offered & PRIVATE_EXPEDITED != 0
            && membarrier(REGISTER_PRIVATE_EXPEDITED) == 0
    }

    pub(super) fn barrier() -> Result<(), String> {
        let mut last = std::io::Error::from_raw_os_error(0);
        // The kernel allocates a CPU mask per call, which can fail for a moment (ENOMEM).
        for _ in 0..100 {
            if membarrier(PRIVATE_EXPEDITED) == 0 {
                return Ok(());
            }
            last = std::io::Error::last_os_error();
            match last.raw_os_error() {
                // A child made by `fork` shares our memory's contents (so it finds the
                // asymmetric form chosen) but not the registration, which belongs to the
                // parent's address space: it registers on its first barrier.
                Some(libc::EPERM) if membarrier(REGISTER_PRIVATE_EXPEDITED) == 0 => {}
                Some(libc::ENOMEM | libc::EAGAIN | libc::EINTR) => std::thread::yield_now(),
                _ => break,
            }
        }
        Err(format!(
            "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after registration: {last}"
        ))
    }
}

#[cfg(not(all(target_os = "linux", not(miri))))]
mod sys {
    pub(super) fn register() -> bool {
        false
    }

    /// Never called: without a registration both sides take full fences.
    pub(super) fn barrier() -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    /// Both sides of the handshake, many times over, on two threads: in every round at least
    /// one side must see the other's store (the guarantee a fence on both sides gives). Both
    /// sides start a round at the same instant on the clock, the rare side a little later in
    /// some rounds than in others, so that their stores and loads overlap. With the heavy
    /// side's barrier left out, this fails within the rounds on x86 in an optimised build
    /// (checked when it was written; debug code is too slow for the two sides to overlap, so CI
    /// also runs it optimised).
    #[test]
    fn one_side_always_sees_the_other() {
        use std::time::{Duration, Instant};
        init();
        let rounds: u64 = if cfg!(miri) { 20 } else { 20_000 };
        let base = Instant::now();
        let hot = Arc::new(AtomicU64::new(0));
        let rare = Arc::new(AtomicU64::new(0));
        // Round `r` starts at `base + start` nanoseconds; the hot side reports what it saw.
        let start = Arc::new(AtomicU64::new(u64::MAX));
        let seen = Arc::new(AtomicU64::new(u64::MAX));
        let spin_until = move |at: u64| {
            let at = base + Duration::from_nanos(at);
            while Instant::now() < at {
                std::hint::spin_loop();
            }
        };
        // Waits for the other side to set `cell`, and takes the value (leaving it unset).
        fn take(cell: &AtomicU64) -> u64 {
            loop {
                let v = cell.load(Ordering::Acquire);
                if v != u64::MAX {
                    cell.store(u64::MAX, Ordering::Relaxed);
                    return v;
                }
                std::hint::spin_loop();
            }
        }
        let t = {
            let (hot, rare, start, seen) = (hot.clone(), rare.clone(), start.clone(), seen.clone());
            std::thread::spawn(move || {
                for round in 1..=rounds {
                    spin_until(take(&start));
                    hot.store(round, Ordering::Relaxed);
                    light();
                    let r = rare.load(Ordering::Relaxed);
                    seen.store(r, Ordering::Release);
                }
            })
        };
        for round in 1..=rounds {
            // Far enough ahead for the hot side to be waiting (not under Miri, whose clock
            // moves with the instructions it interprets).
            let lead = if cfg!(miri) { 0 } else { 20_000 };
            let at = base.elapsed().as_nanos() as u64 + lead;
            start.store(at, Ordering::Release);
            spin_until(at);
            for _ in 0..round % 13 {
                std::hint::spin_loop();
            }
            rare.store(round, Ordering::Relaxed);
            heavy().expect("the barrier");
            let h = hot.load(Ordering::Relaxed);
            let r = take(&seen);
            assert!(
                h == round || r == round,
                "round {round}: neither side saw the other (hot saw {r}, rare saw {h})"
            );
        }
        t.join().expect("the hot side");
    }
}
