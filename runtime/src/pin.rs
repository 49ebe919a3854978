//! Pinning rank threads to cores (`Options::pin`, `RANKWISE_PIN=1`).
//!
//! The threads backend's ranks hand cache lines to each other; a rank thread the scheduler
//! moves — or puts on its peer's core — pays for it in every call. Pinning rank `r` to the
//! `r`-th core this process may use (round robin when ranks outnumber them) is what MPI
//! launchers do by default. Opt-in here: a process that runs several worlds at once (a test
//! suite) or shares its cores with other work is better left to the scheduler. Pinning is a
//! hint: where it is unsupported or refused, ranks run unpinned.

/// The CPUs the calling thread may run on, in increasing order (empty if unknown); called
/// before the ranks start, the process's.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    imp::allowed_cpus()
}

/// Pins the calling thread to `cpu`; whether it took effect.
pub(crate) fn pin_current_thread(cpu: usize) -> bool {
    imp::pin_current_thread(cpu)
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

    pub(super) fn pin_current_thread(cpu: usize) -> bool {
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return false;
        }
        // SAFETY: as in `mask`; `CPU_SET` sets bit `cpu`, checked above to be within the set;
        // `sched_setaffinity` only reads the set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
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
        // Unpinned ranks keep the process's whole mask.
        let free = spawn_with(2, Options::default(), |_| Ok(super::allowed_cpus())).unwrap();
        assert_eq!(free, vec![cpus.clone(), cpus]);
    }
}
