//! How the processes of a job started by `torchrun` (or any launcher that sets `RANK`,
//! `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`) meet: rank 0 listens on the master address,
//! every other rank connects and says who it is (with a few bytes of its own: its GPU), and
//! rank 0 checks what everyone sent and hands every rank the same bytes — NCCL's unique id,
//! which every rank needs to create the communicator — or the problem it found.
//!
//! Every failure is an `Err` naming what to fix, within the timeout, on every rank that can be
//! told: a wrong address (nobody listens), a rank that never arrives (rank 0 names the missing
//! ranks, and tells the others), world sizes that disagree, two processes claiming one rank.
//!
//! The wire format is rankwise's own and fixed: a hello of 16 bytes (`RWBOOT02`, the world size
//! and the rank, little-endian u32s) followed by the rank's contribution (a u32 length and at
//! most 4 KiB), and a reply (a status byte, a u32 length, then the payload or the error's text).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"RWBOOT02";
/// The most bytes a reply carries (an id is 128; error texts are short).
const MAX_PAYLOAD: usize = 1 << 16;
/// The most bytes a rank contributes (a GPU's identity is 16).
const MAX_CONTRIBUTION: usize = 4096;
/// How long to wait between attempts to reach rank 0.
const RETRY: Duration = Duration::from_millis(50);

/// Where and as whom this process meets the others.
#[derive(Clone, Debug)]
pub struct Rendezvous {
    /// Rank 0's address (`MASTER_ADDR:MASTER_PORT`).
    pub addr: String,
    /// This process's rank (`RANK`).
    pub rank: usize,
    /// The number of processes (`WORLD_SIZE`).
    pub world: usize,
    /// How long to wait for the others (`RANKWISE_BOOTSTRAP_TIMEOUT` in seconds; 60 by
    /// default).
    pub timeout: Duration,
}

impl Rendezvous {
    /// The rendezvous the launcher's variables describe, `None` when `RANK` is not set (not
    /// started by such a launcher); an `Err` when they are present but unusable.
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`Self::from_env`] over any source of variables.
    fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let Some(rank) = var("RANK") else {
            return Ok(None);
        };
        let need = |k: &str| {
            var(k).ok_or_else(|| bad(format!("RANK is set but {k} is not: start the job with torchrun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")))
        };
        let number = |k: &str, v: String| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| bad(format!("{k}={v:?} is not a number")))
        };
        let rank = number("RANK", rank)?;
        let world = number("WORLD_SIZE", need("WORLD_SIZE")?)?;
        let addr = format!("{}:{}", need("MASTER_ADDR")?, need("MASTER_PORT")?);
        let timeout = match var("RANKWISE_BOOTSTRAP_TIMEOUT") {
            Some(v) => seconds(&v).ok_or_else(|| {
                bad(format!(
                    "RANKWISE_BOOTSTRAP_TIMEOUT={v:?} is not a number of seconds"
                ))
            })?,
            None => Duration::from_secs(60),
        };
        let r = Rendezvous {
            addr,
            rank,
            world,
            timeout,
        };
        r.validate()?;
        Ok(Some(r))
    }

    fn validate(&self) -> Result<()> {
        if self.world == 0 || self.rank >= self.world {
            return Err(bad(format!(
                "rank {} is not a rank of a world of {}",
                self.rank, self.world
            )));
        }
        if self.world > u32::MAX as usize {
            return Err(bad(format!("a world of {} is too large", self.world)));
        }
        Ok(())
    }

    /// Shares `payload` (given on rank 0, `None` elsewhere) with every rank: each returns rank
    /// 0's bytes once every rank has arrived.
    pub fn share(&self, payload: Option<&[u8]>) -> Result<Vec<u8>> {
        match (self.rank, payload) {
            (0, None) => Err(bad("rank 0 must provide the bytes to share".into())),
            (_, p) => self.exchange(&[], |_| Ok(p.unwrap_or_default().to_vec())),
        }
    }

    /// Every rank sends `mine` (at most 4 KiB) to rank 0; once all have arrived, rank 0 calls
    /// `decide` with every rank's bytes in rank order and hands what it returns to every rank —
    /// or, if it returns `Err(text)`, fails on every rank with that text. `decide` runs on rank
    /// 0 only.
    pub fn exchange(
        &self,
        mine: &[u8],
        decide: impl FnOnce(&[Vec<u8>]) -> std::result::Result<Vec<u8>, String>,
    ) -> Result<Vec<u8>> {
        self.validate()?;
        if mine.len() > MAX_CONTRIBUTION {
            return Err(bad(format!(
                "{} bytes is more than a rank may contribute ({MAX_CONTRIBUTION})",
                mine.len()
            )));
        }
        if self.rank == 0 {
            self.serve(mine, decide)
        } else {
            self.join(mine)
        }
    }

    /// Rank 0: waits for every other rank, checks them, answers all.
    fn serve(
        &self,
        mine: &[u8],
        decide: impl FnOnce(&[Vec<u8>]) -> std::result::Result<Vec<u8>, String>,
    ) -> Result<Vec<u8>> {
        let listener = TcpListener::bind(self.listen_addr()?).map_err(|e| {
            bad(format!(
                "rank 0 cannot listen on {}: {e} (is MASTER_ADDR this host, and MASTER_PORT free?)",
                self.addr
            ))
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| bad(format!("cannot poll the listening socket: {e}")))?;
        let deadline = Instant::now() + self.timeout;
        let mut peers: Vec<Option<TcpStream>> = (0..self.world).map(|_| None).collect();
        let mut sent: Vec<Vec<u8>> = vec![Vec::new(); self.world];
        sent[0] = mine.to_vec();
        let mut problem: Option<String> = None;
        while peers.iter().skip(1).any(Option::is_none) && problem.is_none() {
            match listener.accept() {
                Ok((mut s, from)) => match self.hello(&mut s, deadline) {
                    Ok((rank, _)) if peers[rank].is_some() => {
                        problem =
                            Some(format!("two processes claim rank {rank} (one from {from})"));
                        peers.push(Some(s)); // told below, with the others
                    }
                    Ok((rank, bytes)) => {
                        peers[rank] = Some(s);
                        sent[rank] = bytes;
                    }
                    Err(Hello::Mismatch(text)) => {
                        problem = Some(text);
                        peers.push(Some(s));
                    }
                    // Not one of ours (a port scanner, a stray client): ignored.
                    Err(Hello::Garbage) => {}
                },
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let missing: Vec<usize> =
                            (1..self.world).filter(|&r| peers[r].is_none()).collect();
                        problem = Some(format!(
                            "rank(s) {missing:?} did not arrive within {:?} (started? the same \
                             MASTER_ADDR and MASTER_PORT? raise RANKWISE_BOOTSTRAP_TIMEOUT for \
                             slow starts)",
                            self.timeout
                        ));
                    } else {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                Err(e) => problem = Some(format!("accepting a connection failed: {e}")),
            }
        }
        let payload = match problem {
            Some(_) => Vec::new(),
            None => match decide(&sent) {
                Ok(p) if p.len() <= MAX_PAYLOAD => p,
                Ok(p) => {
                    problem = Some(format!("{} bytes is too much to share", p.len()));
                    Vec::new()
                }
                Err(text) => {
                    problem = Some(text);
                    Vec::new()
                }
            },
        };
        let reply = match &problem {
            None => (0u8, payload.clone()),
            Some(text) => (1u8, text.clone().into_bytes()),
        };
        for s in peers.iter_mut().flatten() {
            // A rank that already left cannot be told; the others still are.
            let _ = send_reply(s, reply.0, &reply.1);
        }
        match problem {
            None => Ok(payload),
            Some(text) => Err(bad(format!("rank 0: {text}"))),
        }
    }

    /// Reads and checks a hello; the sender's rank and contribution.
    fn hello(
        &self,
        s: &mut TcpStream,
        deadline: Instant,
    ) -> std::result::Result<(usize, Vec<u8>), Hello> {
        let _ = s.set_nonblocking(false);
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(RETRY);
        let _ = s.set_read_timeout(Some(left));
        let mut h = [0u8; 20];
        s.read_exact(&mut h).map_err(|_| Hello::Garbage)?;
        if &h[..8] != MAGIC {
            return Err(Hello::Garbage);
        }
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as usize;
        let (world, rank, len) = (word(8), word(12), word(16));
        if len > MAX_CONTRIBUTION {
            return Err(Hello::Garbage);
        }
        let mut bytes = vec![0u8; len];
        s.read_exact(&mut bytes).map_err(|_| Hello::Garbage)?;
        if world != self.world {
            return Err(Hello::Mismatch(format!(
                "rank {rank} was started with WORLD_SIZE={world}, rank 0 with {}",
                self.world
            )));
        }
        if rank == 0 || rank >= self.world {
            return Err(Hello::Mismatch(format!(
                "a process claims rank {rank} in a world of {world}"
            )));
        }
        Ok((rank, bytes))
    }

    /// Every other rank: reaches rank 0 (retrying until the timeout: it may start later),
    /// says who it is, and reads the answer.
    fn join(&self, mine: &[u8]) -> Result<Vec<u8>> {
        let deadline = Instant::now() + self.timeout;
        let mut s = loop {
            let last = match self.connect_once() {
                Ok(s) => break s,
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(bad(format!(
                    "rank {} could not reach rank 0 at {} within {:?}: {last} (is rank 0 \
                     running, and MASTER_ADDR/MASTER_PORT the same for every rank?)",
                    self.rank, self.addr, self.timeout
                )));
            }
            std::thread::sleep(RETRY);
        };
        let mut h = Vec::with_capacity(20 + mine.len());
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&(self.world as u32).to_le_bytes());
        h.extend_from_slice(&(self.rank as u32).to_le_bytes());
        h.extend_from_slice(&(mine.len() as u32).to_le_bytes());
        h.extend_from_slice(mine);
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(RETRY);
        let io = |e: std::io::Error| {
            bad(format!(
                "rank {}: the connection to rank 0 at {} failed: {e} (rank 0 waited for the \
                 other ranks longer than RANKWISE_BOOTSTRAP_TIMEOUT allows?)",
                self.rank, self.addr
            ))
        };
        s.set_write_timeout(Some(left)).map_err(io)?;
        // Rank 0 answers only once every rank has arrived, which may take the whole timeout.
        s.set_read_timeout(Some(left + self.timeout)).map_err(io)?;
        s.write_all(&h).map_err(io)?;
        let mut head = [0u8; 5];
        s.read_exact(&mut head).map_err(io)?;
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(bad(format!(
                "rank {}: {} answered with {len} bytes: is it a rankwise job's rank 0?",
                self.rank, self.addr
            )));
        }
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).map_err(io)?;
        match head[0] {
            0 => Ok(body),
            _ => Err(bad(format!(
                "rank {}: rank 0 refused the job: {}",
                self.rank,
                String::from_utf8_lossy(&body)
            ))),
        }
    }

    fn connect_once(&self) -> std::result::Result<TcpStream, String> {
        let addrs: Vec<SocketAddr> = self
            .addr
            .to_socket_addrs()
            .map_err(|e| format!("{} does not resolve: {e}", self.addr))?
            .collect();
        let mut last = format!("{} has no address", self.addr);
        for a in addrs {
            match TcpStream::connect_timeout(&a, RETRY.max(Duration::from_millis(200))) {
                Ok(s) => return Ok(s),
                Err(e) => last = format!("{a}: {e}"),
            }
        }
        Err(last)
    }

    /// Where rank 0 listens: the master address's port on every interface of its family (the
    /// name may resolve to an address this host does not own under NAT or in containers).
    fn listen_addr(&self) -> Result<SocketAddr> {
        let a = self
            .addr
            .to_socket_addrs()
            .map_err(|e| bad(format!("{} does not resolve: {e}", self.addr)))?
            .next()
            .ok_or_else(|| bad(format!("{} has no address", self.addr)))?;
        Ok(match a {
            SocketAddr::V4(v) => SocketAddr::from(([0, 0, 0, 0], v.port())),
            SocketAddr::V6(v) => SocketAddr::from(([0u16; 8], v.port())),
        })
    }
}

enum Hello {
    /// Not a rankwise hello.
    Garbage,
    /// A rankwise rank that does not fit this job.
    Mismatch(String),
}

fn send_reply(s: &mut TcpStream, status: u8, body: &[u8]) -> std::io::Result<()> {
    let mut msg = Vec::with_capacity(5 + body.len());
    msg.push(status);
    msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    msg.extend_from_slice(body);
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    s.write_all(&msg)
}

/// A number of seconds as a variable gives it (`2.5`); `None` for anything else — negative, NaN or
/// too large included (`Duration::from_secs_f64` would panic on those).
pub(crate) fn seconds(v: &str) -> Option<Duration> {
    v.trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

fn bad(detail: String) -> Error {
    Error::Backend {
        backend: "tcp bootstrap",
        detail,
    }
}

/// A TCP port of 127.0.0.1 that nothing listens on, for `MASTER_PORT` when every rank runs on
/// this host (tests, single-machine jobs started by hand).
///
/// Chosen *below* the system's range of ephemeral ports (`ip_local_port_range`), never by
/// binding port 0: a port the kernel hands out that way is also handed to outgoing
/// connections, so a connection made meanwhile (by another rank, another test) may take it
/// before rank 0 listens on it — "address already in use", seen in CI. Candidates start at an
/// offset taken from the process id and step by a per-process counter, so concurrent callers
/// in one process or several rarely try the same one, and each is checked by binding it.
pub fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = u32::from(ephemeral_low()).max(2048);
    let base = (low / 2).max(1024);
    let span = low - base;
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..span.min(4096) {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = base + start.wrapping_add(k.wrapping_mul(97)) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(bad(format!(
        "no free TCP port on 127.0.0.1 between {base} and {low}"
    )))
}

/// The lowest port the kernel hands to outgoing connections (Linux's default when unknown).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

// Sockets are not available under Miri (and this module has no unsafe code to check).
#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;

    /// A free port on the loopback interface.
    fn port() -> u16 {
        super::free_port().expect("a free port")
    }

    fn at(port: u16, rank: usize, world: usize, secs: f64) -> Rendezvous {
        Rendezvous {
            addr: format!("127.0.0.1:{port}"),
            rank,
            world,
            timeout: Duration::from_secs_f64(secs),
        }
    }

    /// Runs ranks `0..world` (rank 0 sharing `id`) on threads, each with its own view.
    fn run(views: Vec<Rendezvous>, id: &[u8]) -> Vec<Result<Vec<u8>>> {
        let handles: Vec<_> = views
            .into_iter()
            .map(|r| {
                let id = id.to_vec();
                std::thread::spawn(move || r.share((r.rank == 0).then_some(&id[..])))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    }

    #[test]
    fn free_ports_are_listenable_distinct_and_never_ephemeral() {
        let low = super::ephemeral_low();
        let ports: Vec<u16> = (0..20).map(|_| port()).collect();
        for &p in &ports {
            assert!(p < low, "port {p} is in the ephemeral range (from {low})");
            TcpListener::bind(("127.0.0.1", p)).expect("listenable");
        }
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "{ports:?}");
    }

    #[test]
    fn every_rank_gets_rank_zeros_bytes() {
        let p = port();
        let id: Vec<u8> = (0..128u8).collect();
        // Rank 0 starts last: the others retry until it listens.
        let views: Vec<Rendezvous> = (0..4).rev().map(|r| at(p, r, 4, 10.0)).collect();
        for got in run(views, &id) {
            assert_eq!(got.expect("shared"), id);
        }
    }

    #[test]
    fn a_missing_rank_is_named_on_every_rank_that_came() {
        let p = port();
        let views = vec![at(p, 0, 3, 0.5), at(p, 1, 3, 0.5)];
        let got = run(views, b"id");
        let e0 = got[0].as_ref().expect_err("rank 0 fails").to_string();
        assert!(e0.contains("rank(s) [2] did not arrive"), "{e0}");
        let e1 = got[1].as_ref().expect_err("rank 1 fails").to_string();
        assert!(
            e1.contains("rank 0 refused the job") && e1.contains("[2]"),
            "{e1}"
        );
    }

    #[test]
    fn disagreeing_world_sizes_are_refused() {
        let p = port();
        let views = vec![at(p, 0, 2, 5.0), at(p, 1, 3, 5.0)];
        let got = run(views, b"id");
        for g in &got {
            let e = g.as_ref().expect_err("refused").to_string();
            assert!(
                e.contains("rank 1 was started with WORLD_SIZE=3, rank 0 with 2"),
                "{e}"
            );
        }
    }

    #[test]
    fn two_processes_with_one_rank_are_refused() {
        let p = port();
        let views = vec![at(p, 0, 3, 5.0), at(p, 1, 3, 5.0), at(p, 1, 3, 5.0)];
        let got = run(views, b"id");
        let e0 = got[0].as_ref().expect_err("refused").to_string();
        assert!(e0.contains("two processes claim rank 1"), "{e0}");
    }

    #[test]
    fn nobody_listening_is_an_error_within_the_timeout() {
        let p = port();
        let start = Instant::now();
        let e = at(p, 1, 2, 0.3).share(None).expect_err("nobody listens");
        assert!(start.elapsed() < Duration::from_secs(5));
        let e = e.to_string();
        assert!(e.contains("could not reach rank 0 at 127.0.0.1"), "{e}");
    }

    #[test]
    fn a_stray_connection_is_ignored() {
        let p = port();
        let stray = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", p)) {
                let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
            }
        });
        let got = run(vec![at(p, 0, 2, 5.0), at(p, 1, 2, 5.0)], b"the id");
        let _ = stray.join();
        for g in got {
            assert_eq!(g.expect("shared"), b"the id");
        }
    }

    #[test]
    fn the_launchers_variables_are_read_and_checked() {
        let vars = |pairs: &[(&str, &str)]| {
            let m: std::collections::HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Rendezvous::from_vars(move |k| m.get(k).cloned())
        };
        assert!(vars(&[]).expect("no launcher").is_none());
        let r = vars(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "node1"),
            ("MASTER_PORT", "29500"),
            ("RANKWISE_BOOTSTRAP_TIMEOUT", "2.5"),
        ])
        .expect("valid")
        .expect("a launcher");
        assert_eq!((r.addr.as_str(), r.rank, r.world), ("node1:29500", 2, 4));
        assert_eq!(r.timeout, Duration::from_millis(2500));
        let e = vars(&[("RANK", "0"), ("WORLD_SIZE", "2")]).expect_err("no address");
        assert!(e.to_string().contains("MASTER_ADDR is not"), "{e}");
        let e = vars(&[
            ("RANK", "4"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ])
        .expect_err("rank out of range");
        assert!(
            e.to_string()
                .contains("rank 4 is not a rank of a world of 4"),
            "{e}"
        );
        let e = vars(&[("RANK", "one")]).expect_err("not a number");
        assert!(
            e.to_string().contains("RANK=\"one\" is not a number"),
            "{e}"
        );
    }

    #[test]
    fn rank_zero_decides_from_every_ranks_contribution() {
        let p = port();
        let handles: Vec<_> = (0..4)
            .map(|rank| {
                let r = at(p, rank, 4, 10.0);
                std::thread::spawn(move || {
                    r.exchange(&[rank as u8; 3], |all| {
                        // Runs on rank 0 only, with every rank's bytes in rank order.
                        assert_eq!(all.len(), 4);
                        Ok(all.iter().map(|b| b[0] * 10 + b.len() as u8).collect())
                    })
                })
            })
            .collect();
        for h in handles {
            assert_eq!(
                h.join().expect("no panic").expect("ok"),
                vec![3, 13, 23, 33]
            );
        }
    }

    #[test]
    fn a_refusal_by_rank_zero_reaches_every_rank() {
        let p = port();
        let handles: Vec<_> = (0..3)
            .map(|rank| {
                let r = at(p, rank, 3, 10.0);
                std::thread::spawn(move || {
                    r.exchange(b"same gpu", |_| Err("ranks 1 and 2 share a GPU".into()))
                })
            })
            .collect();
        for h in handles {
            let e = h
                .join()
                .expect("no panic")
                .expect_err("refused")
                .to_string();
            assert!(e.contains("ranks 1 and 2 share a GPU"), "{e}");
        }
        let big = at(port(), 1, 2, 0.2).exchange(&[0; MAX_CONTRIBUTION + 1], |_| Ok(vec![]));
        let e = big.expect_err("too much").to_string();
        assert!(e.contains("more than a rank may contribute"), "{e}");
    }

    #[test]
    fn bad_variables_are_errors_not_panics() {
        for t in ["-1", "NaN", "1e300", "soon"] {
            let e = Rendezvous::from_vars(|k| {
                Some(
                    match k {
                        "RANK" => "0",
                        "WORLD_SIZE" => "2",
                        "MASTER_ADDR" => "h",
                        "MASTER_PORT" => "1",
                        "RANKWISE_BOOTSTRAP_TIMEOUT" => t,
                        _ => return None,
                    }
                    .to_string(),
                )
            })
            .expect_err("a bad timeout");
            assert!(
                e.to_string().contains("is not a number of seconds"),
                "{t}: {e}"
            );
        }
        let r = at(1, 3, 2, 1.0);
        assert!(r.share(None).is_err());
        let r0 = at(1, 0, 2, 1.0);
        assert!(r0.share(None).is_err());
    }
}
