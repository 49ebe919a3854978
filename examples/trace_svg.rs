//! Renders a rankwise trace (`RANKWISE_TRACE=t.json cargo run --example …`) as an SVG picture:
//! one lane per rank, one box per call (placed by its start and end), coloured by kind and
//! labelled with what it did; arrows join each send to the receive that took it.
//!
//! ```sh
//! RANKWISE_TRACE=ring.json cargo run --example ring_allreduce
//! cargo run --example trace_svg -- ring.json ring.svg      # the first world the run started
//! ```
//!
//! Time runs left to right but is not to scale between lanes' boxes: each call gets at least
//! the width of its label, so that short calls stay readable; the order of calls on a lane, and
//! which calls overlapped in time, are kept.

use std::fmt::Write as _;

use serde_json::Value;

/// One call on one lane.
pub struct Call {
    rank: u64,
    name: String,
    args: Value,
    start: f64,
    end: f64,
}

const LANE: f64 = 46.0;
const BOX: f64 = 30.0;
const LEFT: f64 = 70.0;
const MIN_WIDTH: f64 = 96.0;

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
        .map(|e| {
            let start = e["ts"].as_f64().unwrap_or(0.0);
            Call {
                rank: e["tid"].as_u64().unwrap_or(0),
                name: e["name"].as_str().unwrap_or("?").to_string(),
                args: e["args"].clone(),
                start,
                end: start + e["dur"].as_f64().unwrap_or(0.0),
            }
        })
        .collect())
}

/// Columns: calls are ordered by start time and each distinct start gets a column at least
/// `MIN_WIDTH` wide, so overlapping calls stay side by side and every label fits.
pub fn render(calls: &[Call]) -> String {
    let ranks = calls.iter().map(|c| c.rank).max().map_or(0, |r| r + 1);
    let mut starts: Vec<f64> = calls.iter().map(|c| c.start).collect();
    starts.sort_by(f64::total_cmp);
    starts.dedup();
    let column = |t: f64| starts.partition_point(|&s| s < t);
    let x = |t: f64| LEFT + column(t) as f64 * MIN_WIDTH;
    // A call ends in the column of the first start at or after its end (at least one column).
    let right = |c: &Call| {
        let end_col = column(c.end).max(column(c.start) + 1);
        LEFT + end_col as f64 * MIN_WIDTH - 6.0
    };
    let width = LEFT + (starts.len() + 1) as f64 * MIN_WIDTH;
    let height = ranks as f64 * LANE + 20.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r##"<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#3182bd"/></marker></defs>"##
    );
    for r in 0..ranks {
        let y = 10.0 + r as f64 * LANE;
        let _ = writeln!(
            svg,
            r##"<text x="8" y="{}" class="lane">rank {r}</text><line x1="{LEFT}" y1="{}" x2="{width}" y2="{}" stroke="#eee"/>"##,
            y + BOX / 2.0 + 4.0,
            y + BOX / 2.0,
            y + BOX / 2.0
        );
    }
    for c in calls {
        let y = 10.0 + c.rank as f64 * LANE;
        let (x0, x1) = (x(c.start), right(c));
        let failed = c.args["ok"] == false;
        let _ = writeln!(
            svg,
            r#"<g class="call"><title>{}</title><rect x="{x0}" y="{y}" width="{}" height="{BOX}" rx="4" fill="{}" stroke="{}"/><text x="{}" y="{}">{}</text></g>"#,
            escape(&tooltip(c)),
            x1 - x0,
            colour(&c.name),
            if failed { "#d62728" } else { "#636363" },
            x0 + 5.0,
            y + BOX / 2.0 + 4.0,
            escape(&label(c))
        );
    }
    // The k-th send from a to b meets the k-th receive at b from a.
    let mut sends: Vec<&Call> = calls.iter().filter(|c| c.name == "send").collect();
    sends.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut recvs: Vec<&Call> = calls.iter().filter(|c| c.name == "recv").collect();
    recvs.sort_by(|a, b| a.start.total_cmp(&b.start));
    let peer = |c: &Call| c.args["peer"].as_u64().unwrap_or(u64::MAX);
    let mut used = vec![false; recvs.len()];
    for s in &sends {
        let Some(i) = (0..recvs.len())
            .find(|&i| !used[i] && recvs[i].rank == peer(s) && peer(recvs[i]) == s.rank)
        else {
            continue;
        };
        used[i] = true;
        let r = recvs[i];
        let (sx, sy) = (x(s.start) + 20.0, 10.0 + s.rank as f64 * LANE + BOX / 2.0);
        let (rx, ry) = (x(r.start) + 20.0, 10.0 + r.rank as f64 * LANE + BOX / 2.0);
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
