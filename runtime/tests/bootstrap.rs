//! The TCP bootstrap across real processes: four processes, started as torchrun would start
//! them (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), meet, and rank 0's real NCCL unique
//! id (from the NCCL library `nccl-sys` finds, no GPU needed) reaches every one intact.
//!
//! The test runs this same test binary as each rank (`BOOTSTRAP_CHILD` set). Without an NCCL
//! library the id is rank 0's own bytes instead, so the transport is still tested; CI installs
//! the wheel and sets `RANKWISE_NCCL_REQUIRED=1`, which makes the real id mandatory.

use std::process::{Command, Stdio};
use std::time::Duration;

use rankwise_runtime::bootstrap::Rendezvous;

const CHILD: &str = "BOOTSTRAP_CHILD";

/// One rank's part: make (rank 0) or receive the id, print it in hex.
fn child() {
    let r = match Rendezvous::from_env() {
        Ok(Some(r)) => r,
        other => panic!("a child without its rendezvous: {other:?}"),
    };
    let id = if r.rank == 0 { Some(unique_id()) } else { None };
    match r.share(id.as_deref()) {
        Ok(bytes) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            // On a line of its own: the test harness has printed the test's name without one.
            println!("\nid {hex}");
        }
        Err(e) => {
            println!("\nerror {e}");
            std::process::exit(1);
        }
    }
}

/// NCCL's unique id from the library found, or (no library, not required) a stand-in.
fn unique_id() -> Vec<u8> {
    match nccl_sys::Nccl::load() {
        Ok(nccl) => {
            let get = nccl.api.ncclGetUniqueId.expect("ncclGetUniqueId");
            let mut id = nccl_sys::ncclUniqueId { internal: [0; 128] };
            // SAFETY: writes one ncclUniqueId; needs no GPU.
            let code = unsafe { get(&mut id) };
            assert_eq!(code, nccl_sys::ncclSuccess, "ncclGetUniqueId");
            id.internal.iter().map(|&c| c as u8).collect()
        }
        Err(e) => {
            assert!(
                std::env::var_os("RANKWISE_NCCL_REQUIRED").is_none(),
                "NCCL is required: {e}"
            );
            (0..128).map(|i| (i * 7 + 3) as u8).collect()
        }
    }
}

#[test]
fn four_processes_receive_rank_zeros_unique_id() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let port = rankwise_runtime::bootstrap::free_port().expect("a free port");
    let exe = std::env::current_exe().expect("the test binary");
    // Rank 0 last: the others wait for it.
    let children: Vec<_> = (0..4)
        .rev()
        .map(|rank| {
            if rank == 0 {
                std::thread::sleep(Duration::from_millis(200));
            }
            Command::new(&exe)
                .args(["four_processes_receive_rank_zeros_unique_id", "--exact"])
                .args(["--nocapture", "--test-threads=1"])
                .env(CHILD, "1")
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "4")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("RANKWISE_BOOTSTRAP_TIMEOUT", "20")
                .stdout(Stdio::piped())
                .spawn()
                .map(|c| (rank, c))
        })
        .collect();
    let mut ids = Vec::new();
    for c in children {
        let (rank, child) = c.expect("a child starts");
        let out = child.wait_with_output().expect("a child ends");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "rank {rank}: {text}");
        let id = text
            .lines()
            .find_map(|l| l.strip_prefix("id "))
            .unwrap_or_else(|| panic!("rank {rank} printed no id: {text}"))
            .to_string();
        ids.push(id);
    }
    assert_eq!(ids[0].len(), 256, "128 bytes");
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:#?}");
    assert!(ids[0].chars().any(|c| c != '0'), "an id of zeros");
}
