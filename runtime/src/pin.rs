//! Pinning rank threads to cores (`Options::pin`, `RANKWISE_PIN=1`).
//!
//! The threads backend's ranks hand cache lines to each other; a rank thread the scheduler
//! moves — or puts on its peer's core — pays for it in every call. Pinning rank `r` to the
//! `r`-th core this process may use (round robin when ranks outnumber them) is what MPI
//! launchers do by default. Opt-in here: a process that runs several worlds at once (a test
//! suite) or shares its cores with other work is better left to the scheduler. Pinning is a
//! hint: where it is unsupported or refused, ranks run unpinned.
//!
//! Unpinned ranks still *start* spread over those cores ([`start_on`]), each world from the
//! core after the last world's, go back to their core when they wake from a sleep
//! ([`back_home`]), and are otherwise free to move. Left to the scheduler, four ranks on two
//! cores were placed three to a core in some worlds, for the world's whole life, and every
//! 1 MiB call was half again slower (`docs/decisions.md`, session 43).

use std::sync::Arc;

/// The CPUs the calling thread may run on, in increasing order (empty if unknown); called
/// before the ranks start, the process's.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // Under Miri, which runs the threads itself, ranks are neither pinned nor placed.
    if cfg!(miri) {
        return Vec::new();
    }
    imp::allowed_cpus()
}

/// Pins the calling thread to `cpu`; whether it took effect.
pub(crate) fn pin_current_thread(cpu: usize) -> bool {
    imp::pin_current_thread(cpu)
}

/// Moves the calling thread to `cpu`, then lets it run on any of `allowed` again (the mask it
/// had): where an unpinned rank starts, not where it must stay. Should giving the mask back
/// fail, the thread stays on `cpu`, as a pinned rank would.
///
/// `allowed` is shared with the world's other rank threads, not copied for each.
///
/// Returns the CPU the thread was on while it was pinned there, if it was.
pub(crate) fn start_on(cpu: usize, allowed: &Arc<[usize]>) -> Option<usize> {
    HOME.with(|h| *h.borrow_mut() = Some((cpu, Arc::clone(allowed))));
    move_to(cpu, allowed)
}

/// After a sleep, moves the calling rank thread back to the CPU it started on, if it was
/// started on one ([`start_on`]) and its mask is still the one it started with (a program that
/// set its rank thread's affinity itself keeps it). A rank that slept is woken wherever the
/// scheduler finds room, often on its waker's core; a long wait in a world with more ranks
/// than cores then left three ranks on one core for the rest of the world's life. Returns the
/// CPU the thread was on while pinned there, if it moved.
pub(crate) fn back_home() -> Option<usize> {
    HOME.with(|h| {
        let home = h.borrow();
        let (cpu, allowed) = home.as_ref()?;
        if imp::allowed_cpus()[..] != allowed[..] {
            return None;
        }
        move_to(*cpu, allowed)
    })
}

thread_local! {
    /// The CPU this rank thread started on and the CPUs it may use ([`start_on`]).
    static HOME: std::cell::RefCell<Option<(usize, Arc<[usize]>)>> =
        const { std::cell::RefCell::new(None) };
}

/// [`start_on`]'s move: pinned to `cpu`, then free on `allowed` again.
fn move_to(cpu: usize, allowed: &[usize]) -> Option<usize> {
    if !imp::pin_current_thread(cpu) {
        return None;
    }
    let on = imp::current_cpu();
    imp::allow(allowed);
    on
}

#[cfg(target_os = "linux")]
mod imp {
    /// The calling thread's affinity mask, if the kernel reports it.
    fn mask() -> Option<libc::cpu_set_t> {
        // SAFETY: `cpu_set_t` is a plain bit array, valid when zeroed; `sched_getaffinity`
        // writes at most `size_of::<cpu_set_t>()` bytes into it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let ok = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            (ok == 0).then_some(set)
        }
    }

    pub(super) fn allowed_cpus() -> Vec<usize> {
        let Some(set) = mask() else {
            return Vec::new();
        };
        let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `CPU_ISSET` reads bit `c` of the set; `c` is below its size in bits.
        (0..max)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    }

    /// The CPU the calling thread runs on, if the kernel says.
    pub(super) fn current_cpu() -> Option<usize> {
        // SAFETY: `sched_getcpu` takes nothing and returns a number or -1.
        usize::try_from(unsafe { libc::sched_getcpu() }).ok()
    }

    /// Lets the calling thread run on any of `cpus` (those beyond the set's size left out);
    /// whether it took effect.
    pub(super) fn allow(cpus: &[usize]) -> bool {
        let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: as in `mask`; `CPU_SET` sets bits below the set's size (filtered);
        // `sched_setaffinity` only reads the set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in cpus.iter().filter(|&&c| c < max) {
                libc::CPU_SET(cpu, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    pub(super) fn pin_current_thread(cpu: usize) -> bool {
        // A CPU beyond the set's size would leave it empty: refused before asking.
        cpu < 8 * std::mem::size_of::<libc::cpu_set_t>() && allow(&[cpu])
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn allowed_cpus() -> Vec<usize> {
        Vec::new()
    }

    pub(super) fn pin_current_thread(_cpu: usize) -> bool {
        false
    }

    pub(super) fn allow(_cpus: &[usize]) -> bool {
        false
    }

    pub(super) fn current_cpu() -> Option<usize> {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use crate::{Options, spawn_with};

    #[test]
    #[cfg_attr(miri, ignore = "calls sched_setaffinity")]
    fn each_rank_runs_on_its_own_core_round_robin() {
        let cpus = super::allowed_cpus();
        assert!(!cpus.is_empty(), "this process may run on no CPU?");
        // One rank more than CPUs (so that pinning wraps), unless that is a crowd.
        let world = if cpus.len() <= 32 { cpus.len() + 1 } else { 3 };
        let got = spawn_with(world, Options::default().pin(true), |ctx| {
            ctx.barrier()?;
            Ok(super::allowed_cpus())
        })
        .unwrap();
        for (rank, mask) in got.iter().enumerate() {
            assert_eq!(mask, &vec![cpus[rank % cpus.len()]], "rank {rank}");
        }
        // Unpinned ranks keep the process's whole mask: they only start spread, as many ranks
        // as CPUs and more.
        for world in [2, cpus.len() + 1] {
            let free = spawn_with(world, Options::default(), |_| Ok(super::allowed_cpus()));
            assert_eq!(free.unwrap(), vec![cpus.clone(); world], "world {world}");
        }
    }

    /// A thread started on a CPU was there while pinned, and may then run on every CPU it was
    /// allowed before.
    #[test]
    #[cfg_attr(miri, ignore = "calls sched_setaffinity")]
    fn a_started_thread_begins_on_its_cpu_and_keeps_its_mask() {
        let cpus = super::allowed_cpus();
        let last = *cpus.last().expect("some CPU");
        let (on, mask) = std::thread::spawn(move || {
            let allowed = super::allowed_cpus().into();
            (super::start_on(last, &allowed), super::allowed_cpus())
        })
        .join()
        .unwrap();
        assert_eq!(on, Some(last));
        assert_eq!(mask, cpus);
    }

    /// A started thread that was moved elsewhere goes back to its CPU after a sleep, again free
    /// to run anywhere after; a thread never started (the caller's own) stays as it is.
    #[test]
    #[cfg_attr(miri, ignore = "calls sched_setaffinity")]
    fn a_woken_rank_goes_back_to_its_cpu() {
        let cpus = super::allowed_cpus();
        let first = *cpus.first().expect("some CPU");
        let last = *cpus.last().expect("some CPU");
        let (back, mask) = std::thread::spawn(move || {
            let allowed = super::allowed_cpus().into();
            super::start_on(last, &allowed);
            super::move_to(first, &allowed); // where a wake-up might have put it
            (super::back_home(), super::allowed_cpus())
        })
        .join()
        .unwrap();
        assert_eq!(back, Some(last));
        assert_eq!(mask, cpus);
        let stays = std::thread::spawn(super::back_home).join().unwrap();
        assert_eq!(stays, None, "no home, no move");
        // A rank whose program bound it to a CPU of its own choosing stays bound there (with
        // one CPU, that is the whole mask: nothing to tell apart).
        if cpus.len() < 2 {
            return;
        }
        let (kept, mask) = std::thread::spawn(move || {
            let allowed = super::allowed_cpus().into();
            super::start_on(last, &allowed);
            super::pin_current_thread(first);
            (super::back_home(), super::allowed_cpus())
        })
        .join()
        .unwrap();
        assert_eq!(kept, None);
        assert_eq!(mask, vec![first]);
    }
}
