//! An opt-in record of every communication call, written as Chrome trace-event JSON.
//!
//! Set `RANKWISE_TRACE=path.json` (or [`Options::trace`](crate::Options::trace)) and every
//! rank records, for each call: its kind, peer or root, group, dtype, shape, dim, reduce op,
//! call site, the batch it was part of, whether it succeeded, and when it started and ended.
//! The file opens in Perfetto (<https://ui.perfetto.dev>) or `chrome://tracing`: one lane per
//! rank, one box per call. Under the threads backend one file holds every rank (and every world
//! the process starts, one Chrome "process" each, in order); under MPI each process writes its
//! own, with `{rank}` in the path replaced by its rank (or `.rank<N>` appended when the path
//! has none).
//!
//! Off, it costs one branch per call: the context holds no recorder.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::model::OpDesc;

/// The environment variable that turns tracing on.
pub(crate) const TRACE_VAR: &str = "RANKWISE_TRACE";

/// One recorded call.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub(crate) desc: OpDesc,
    /// The members of the call's group (empty for point-to-point).
    pub(crate) members: Arc<[usize]>,
    /// The batch the call was posted in, numbered per rank from 0 (`None`: a single call).
    pub(crate) batch: Option<u32>,
    pub(crate) start: Duration,
    pub(crate) end: Duration,
    pub(crate) ok: bool,
}

/// One rank's recorder, held by its context while tracing is on.
#[derive(Debug)]
pub(crate) struct Recorder {
    epoch: Instant,
    batches: u32,
    pub(crate) events: Vec<Event>,
}

impl Recorder {
    /// A recorder whose times count from `epoch` (shared by every rank of a process, so their
    /// lanes line up).
    pub(crate) fn new(epoch: Instant) -> Self {
        Recorder {
            epoch,
            batches: 0,
            events: Vec::new(),
        }
    }

    /// Time since the epoch: when a call starts.
    pub(crate) fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Records a single call (`batch = false`) or every call of one batch.
    pub(crate) fn record<'d>(
        &mut self,
        calls: impl IntoIterator<Item = (&'d OpDesc, Arc<[usize]>)>,
        batch: bool,
        start: Duration,
        ok: bool,
    ) {
        let end = self.now();
        let batch = batch.then(|| {
            self.batches += 1;
            self.batches - 1
        });
        for (desc, members) in calls {
            self.events.push(Event {
                desc: desc.clone(),
                members,
                batch,
                start,
                end,
                ok,
            });
        }
    }
}

/// The path the environment asks for, if any.
pub(crate) fn path_from_env() -> Option<String> {
    std::env::var(TRACE_VAR).ok().filter(|p| !p.is_empty())
}

/// The path of one process's file when every process writes its own (MPI).
#[cfg_attr(not(any(feature = "mpi", feature = "nccl")), allow(dead_code))]
pub(crate) fn per_process(path: &str, rank: usize) -> String {
    if path.contains("{rank}") {
        path.replace("{rank}", &rank.to_string())
    } else {
        format!("{path}.rank{rank}")
    }
}

/// Under MPI or torchrun: writes this process's trace, if `RANKWISE_TRACE` asked for one.
#[cfg_attr(not(any(feature = "mpi", feature = "nccl")), allow(dead_code))]
pub(crate) fn write_process(ctx: &mut crate::Ctx, path: Option<&str>, rank: usize) -> Result<()> {
    match (path, ctx.take_trace()) {
        (Some(path), Some(events)) => write(&per_process(path, rank), vec![(rank, events)]),
        _ => Ok(()),
    }
}

/// Every world a process has traced to each path: a program that spawns several worlds (or
/// tests that do) gets one file holding all of them, one Chrome "process" per world, rather
/// than each world overwriting the last.
static WRITTEN: Mutex<Vec<(String, Vec<World>)>> = Mutex::new(Vec::new());

/// One world's events: each rank's, by rank.
type World = Vec<(usize, Vec<Event>)>;

/// Adds one world's events to the file at `path` (see [`WRITTEN`]) and rewrites it.
pub(crate) fn write(path: &str, ranks: World) -> Result<()> {
    let mut written = WRITTEN.lock().unwrap_or_else(|p| p.into_inner());
    let i = match written.iter().position(|(p, _)| p == path) {
        Some(i) => i,
        None => {
            written.push((path.to_string(), Vec::new()));
            written.len() - 1
        }
    };
    written[i].1.push(ranks);
    let json = to_json(&written[i].1);
    let failed = |e: std::io::Error| Error::Trace {
        path: path.to_string(),
        detail: e.to_string(),
    };
    let mut f = std::fs::File::create(path).map_err(failed)?;
    f.write_all(json.as_bytes()).map_err(failed)
}

/// The JSON text: for each world (a Chrome "process", `pid` its index), its name and its
/// lanes' names, then one complete (`"X"`) event per call (`tid` the rank).
pub(crate) fn to_json(worlds: &[World]) -> String {
    let mut out = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    let mut first = true;
    let mut sep = |out: &mut String| {
        if !first {
            out.push_str(",\n");
        }
        first = false;
    };
    for (pid, ranks) in worlds.iter().enumerate() {
        sep(&mut out);
        let _ = write!(
            out,
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":\"world of {} (#{pid})\"}}}}",
            ranks.len()
        );
        for (rank, _) in ranks {
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{rank},\"args\":{{\"name\":\"rank {rank}\"}}}}"
            );
        }
        for (rank, events) in ranks {
            for e in events {
                sep(&mut out);
                event(&mut out, pid, *rank, e);
            }
        }
    }
    out.push_str("\n]}\n");
    out
}

fn event(out: &mut String, pid: usize, rank: usize, e: &Event) {
    let d = &e.desc;
    let micros = |t: Duration| t.as_secs_f64() * 1e6;
    let cat = if d.kind.is_p2p() { "p2p" } else { "collective" };
    let _ = write!(
        out,
        "{{\"name\":\"{}\",\"cat\":\"{cat}\",\"ph\":\"X\",\"pid\":{pid},\"tid\":{rank},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{",
        d.kind.name(),
        micros(e.start),
        micros(e.end.saturating_sub(e.start)),
    );
    let _ = write!(
        out,
        "\"dtype\":\"{}\",\"shape\":{:?}",
        d.dtype,
        &d.shape[..]
    );
    if d.kind.is_p2p() {
        let _ = write!(out, ",\"peer\":{}", d.peer.unwrap_or_default());
    } else {
        let _ = write!(out, ",\"group\":{:?}", &e.members[..]);
        if let Some(root) = d.peer {
            let _ = write!(out, ",\"root\":{root}");
        }
    }
    if d.kind.has_dim() {
        let _ = write!(out, ",\"dim\":{}", d.dim);
    }
    if let Some(op) = d.op {
        let _ = write!(out, ",\"op\":\"{op}\"");
    }
    let _ = write!(out, ",\"site\":\"{}\"", escape(&d.site.to_string()));
    if let Some(b) = e.batch {
        let _ = write!(out, ",\"batch\":{b}");
    }
    let _ = write!(out, ",\"ok\":{}}}}}", e.ok);
}

/// A JSON string's contents.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\u000ad");
    }

    #[test]
    fn per_process_paths() {
        assert_eq!(per_process("t-{rank}.json", 3), "t-3.json");
        assert_eq!(per_process("t.json", 3), "t.json.rank3");
    }
}
