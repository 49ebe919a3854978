//! Renders a rankwise trace (`RANKWISE_TRACE=t.json cargo run --example …`) as an SVG picture:
//! one lane per rank, one box per call (in the order its rank made them), coloured by kind and
//! labelled with what it did; arrows join each send to the receive that took it.
//!
//! ```sh
//! RANKWISE_TRACE=ring.json cargo run --example ring_allreduce
//! cargo run --example trace_svg -- ring.json ring.svg      # the first world the run started
//! ```
//!
//! Columns are steps, not times: the k-th call of every rank sits in column k, so a collective
//! that every rank calls at the same point lines up across the lanes, and the picture of a
//! program is the same on every run (the book's pictures are checked to be current). For the
//! times, to scale, open the trace in Perfetto.

use std::fmt::Write as _;

use serde_json::Value;

/// One call on one lane.
pub struct Call {
    rank: u64,
    name: String,
    args: Value,
    start: f64,
}

const LANE: f64 = 50.0;
const BOX: f64 = 36.0;
const LEFT: f64 = 70.0;
/// Width of one step's column.
const STEP: f64 = 150.0;
/// Space between one step's boxes and the next, where the message arrows run.
const GAP: f64 = 34.0;

fn colour(name: &str) -> &'static str {
    match name {
        "send" | "recv" => "#9ecae1",
        "all_reduce" | "reduce" | "reduce_scatter" => "#fdae6b",
        "broadcast" | "scatter" => "#a1d99b",
        "all_gather" | "gather" | "all_to_all" => "#bcbddc",
        _ => "#d9d9d9",
    }
}

/// What the box says: the kind and its peer or root.
fn label(c: &Call) -> String {
    let a = &c.args;
    let mut s = c.name.clone();
    if let Some(p) = a.get("peer").and_then(Value::as_u64) {
        let arrow = if c.name == "send" { "→" } else { "←" };
        let _ = write!(s, " {arrow} {p}");
    } else if let Some(r) = a.get("root").and_then(Value::as_u64) {
        let _ = write!(s, " root {r}");
    }
    s
}

/// The second line of a box: what the call moved (dtype and shape, and dim, op or root).
fn detail(c: &Call) -> String {
    let a = &c.args;
    let shape: Vec<String> = a["shape"]
        .as_array()
        .map(|d| d.iter().map(|x| x.to_string()).collect())
        .unwrap_or_default();
    let mut s = format!("{}[{}]", a["dtype"].as_str().unwrap_or(""), shape.join(","));
    if let Some(d) = a.get("dim").and_then(Value::as_u64) {
        let _ = write!(s, " dim {d}");
    }
    if let Some(op) = a.get("op").and_then(Value::as_str) {
        let _ = write!(s, " {op}");
    }
    s
}

fn tooltip(c: &Call) -> String {
    let a = &c.args;
    format!(
        "{} {}{} at {}",
        c.name,
        a["dtype"].as_str().unwrap_or(""),
        a["shape"],
        a["site"].as_str().unwrap_or("")
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Reads the complete events of world `pid` (each world a process started is one Chrome
/// process in the trace, numbered from 0).
pub fn calls(json: &Value, pid: u64) -> Result<Vec<Call>, String> {
    let events = json["traceEvents"]
        .as_array()
        .ok_or("not a trace: no `traceEvents` list")?;
    Ok(events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == pid)
        .map(|e| Call {
            rank: e["tid"].as_u64().unwrap_or(0),
            name: e["name"].as_str().unwrap_or("?").to_string(),
            args: e["args"].clone(),
            start: e["ts"].as_f64().unwrap_or(0.0),
        })
        .collect())
}

/// The column of each call: its index among its rank's calls, in start order.
fn columns(calls: &[Call]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by(|&a, &b| calls[a].start.total_cmp(&calls[b].start));
    let mut next: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut col = vec![0; calls.len()];
    for i in order {
        let n = next.entry(calls[i].rank).or_insert(0);
        col[i] = *n;
        *n += 1;
    }
    col
}

/// The picture: a lane per rank, a box per call in its step's column, an arrow per message.
pub fn render(calls: &[Call]) -> String {
    let ranks = calls.iter().map(|c| c.rank).max().map_or(0, |r| r + 1);
    let col = columns(calls);
    let steps = col.iter().max().map_or(0, |c| c + 1);
    let x = |i: usize| LEFT + col[i] as f64 * STEP;
    let mid = |rank: u64| 10.0 + rank as f64 * LANE + BOX / 2.0;
    let width = LEFT + steps as f64 * STEP + 10.0;
    let height = ranks as f64 * LANE + 20.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="monospace" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r##"<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#3182bd"/></marker></defs>"##
    );
    for r in 0..ranks {
        let _ = writeln!(
            svg,
            r##"<text x="8" y="{}">rank {r}</text><line x1="{LEFT}" y1="{}" x2="{width}" y2="{}" stroke="#eee"/>"##,
            mid(r) + 4.0,
            mid(r),
            mid(r)
        );
    }
    for (i, c) in calls.iter().enumerate() {
        let y = 10.0 + c.rank as f64 * LANE;
        let failed = c.args["ok"] == false;
        let _ = writeln!(
            svg,
            r#"<g class="call"><title>{}</title><rect x="{}" y="{y}" width="{}" height="{BOX}" rx="4" fill="{}" stroke="{}"/><text x="{}" y="{}">{}</text><text x="{}" y="{}" font-size="10">{}</text></g>"#,
            escape(&tooltip(c)),
            x(i),
            STEP - GAP,
            colour(&c.name),
            if failed { "#d62728" } else { "#636363" },
            x(i) + 5.0,
            y + 15.0,
            escape(&label(c)),
            x(i) + 5.0,
            y + 29.0,
            escape(&detail(c))
        );
    }
    // The k-th send from a to b meets the k-th receive at b from a.
    // Each rank's calls in its own order (so that the picture does not depend on how the
    // ranks' clocks interleaved).
    let in_rank_order = |kind: &str| {
        let mut v: Vec<usize> = (0..calls.len())
            .filter(|&i| calls[i].name == kind)
            .collect();
        v.sort_by_key(|&i| (calls[i].rank, col[i]));
        v
    };
    let (sends, recvs) = (in_rank_order("send"), in_rank_order("recv"));
    let peer = |c: &Call| c.args["peer"].as_u64().unwrap_or(u64::MAX);
    let mut used = vec![false; recvs.len()];
    for &s in &sends {
        let Some(k) = (0..recvs.len()).find(|&k| {
            let r = &calls[recvs[k]];
            !used[k] && r.rank == peer(&calls[s]) && peer(r) == calls[s].rank
        }) else {
            continue;
        };
        used[k] = true;
        let r = recvs[k];
        // A receive in a later column (a batch posted send-first): from the send box's right
        // edge to the receive box's left edge. Otherwise (blocking calls, whose columns need
        // not line up across ranks): from edge to edge vertically, near the boxes' left ends.
        let (sr, rr) = (calls[s].rank, calls[r].rank);
        let ((sx, sy), (rx, ry)) = if col[r] > col[s] {
            ((x(s) + STEP - GAP, mid(sr)), (x(r), mid(rr)))
        } else {
            let down = rr > sr;
            let edge = |rank: u64, top: bool| mid(rank) + if top { -BOX / 2.0 } else { BOX / 2.0 };
            (
                (x(s) + 24.0, edge(sr, !down)),
                (x(r) + 24.0, edge(rr, down)),
            )
        };
        let _ = writeln!(
            svg,
            r##"<line class="message" x1="{sx}" y1="{sy}" x2="{rx}" y2="{ry}" stroke="#3182bd" stroke-width="1.5" marker-end="url(#arrow)"/>"##
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: trace_svg <trace.json> <picture.svg> [world number, from 0]";
    let (input, output, pid) = match args.as_slice() {
        [i, o] => (i, o, 0),
        [i, o, p] => (i, o, p.parse().map_err(|_| usage.to_string())?),
        _ => return Err(usage.into()),
    };
    let text = std::fs::read_to_string(input).map_err(|e| format!("{input}: {e}"))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| format!("{input}: {e}"))?;
    let calls = calls(&json, pid)?;
    if calls.is_empty() {
        return Err(format!("{input}: world {pid} made no calls"));
    }
    let svg = render(&calls);
    std::fs::write(output, svg).map_err(|e| format!("{output}: {e}"))
}
