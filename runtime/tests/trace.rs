//! The trace (`Options::trace`, `RANKWISE_TRACE`): a known program's calls, in order, on every
//! rank, with what each call was, read back from the Chrome trace-event JSON it wrote; and the
//! trace of a program that fails.

use rankwise_runtime::{Options, ReduceOp, Result, Tensor, spawn_with};
use serde_json::Value;

fn read(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("the trace was written");
    let json: Value = serde_json::from_str(&text).expect("the trace is JSON");
    json["traceEvents"]
        .as_array()
        .expect("an event list")
        .clone()
}

/// A fresh directory for one test's trace (this process's own), and the trace's path in it.
fn scratch(test: &str, file: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("rankwise-trace-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join(file);
    (dir, path)
}

/// The calls of `rank`, in order: (name, args).
fn calls(events: &[Value], rank: u64) -> Vec<(String, Value)> {
    events
        .iter()
        .filter(|e| e["ph"] == "X" && e["tid"] == rank)
        .map(|e| {
            (
                e["name"].as_str().unwrap_or("").to_string(),
                e["args"].clone(),
            )
        })
        .collect()
}

#[test]
fn a_known_program_leaves_its_calls_in_order() -> Result<()> {
    let (dir, path) = scratch("known", "known.json");
    let options = Options::default().trace(path.display().to_string());
    spawn_with(3, options, |ctx| {
        let (r, w) = (ctx.rank(), ctx.world());
        let mut t = Tensor::full([4], r as f32)?;
        ctx.all_reduce(&mut t, ReduceOp::Sum)?;
        let x = Tensor::full([2, 3], 1.0f64)?;
        let mut y = Tensor::<f64>::zeros([2, 3])?;
        let mut b = ctx.batch();
        b.send(&x, (r + 1) % w).recv(&mut y, (r + w - 1) % w);
        b.run()?;
        let g = ctx.new_group([0, 2])?;
        if g.contains(r) {
            let mut s = Tensor::full([1], 7i32)?;
            ctx.group(&g).broadcast(&mut s, 2)?;
        }
        Ok(())
    })?;
    let events = read(&path);
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M")
        .map(|e| e["args"]["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["world of 3 (#0)", "rank 0", "rank 1", "rank 2"]);
    for rank in 0..3u64 {
        let got = calls(&events, rank);
        let kinds: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        let mut want = vec!["all_reduce", "send", "recv"];
        if rank != 1 {
            want.push("broadcast");
        }
        assert_eq!(kinds, want, "rank {rank}");
        let (_, ar) = &got[0];
        assert_eq!(ar["group"], serde_json::json!([0, 1, 2]));
        assert_eq!(ar["dtype"], "f32");
        assert_eq!(ar["shape"], serde_json::json!([4]));
        assert_eq!(ar["op"], "Sum");
        assert_eq!(ar["ok"], true);
        assert!(ar.get("batch").is_none());
        assert!(
            ar["site"]
                .as_str()
                .unwrap_or("")
                .starts_with("runtime/tests/trace.rs:"),
            "{}",
            ar["site"]
        );
        let (_, send) = &got[1];
        let (_, recv) = &got[2];
        assert_eq!(send["peer"], (rank + 1) % 3);
        assert_eq!(recv["peer"], (rank + 2) % 3);
        assert_eq!(send["shape"], serde_json::json!([2, 3]));
        assert_eq!(send["dtype"], "f64");
        // One batch: the same number, the same start.
        assert_eq!(send["batch"], 0);
        assert_eq!(recv["batch"], 0);
        if rank != 1 {
            let (_, bc) = &got[3];
            assert_eq!(bc["group"], serde_json::json!([0, 2]));
            assert_eq!(bc["root"], 2);
            assert_eq!(bc["dtype"], "i32");
        }
    }
    // Times: each call starts after the previous one ended, on every lane.
    for rank in 0..3u64 {
        let lane: Vec<(f64, f64)> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == rank)
            .map(|e| {
                let ts = e["ts"].as_f64().unwrap_or(-1.0);
                (ts, ts + e["dur"].as_f64().unwrap_or(-1.0))
            })
            .collect();
        assert!(lane.iter().all(|&(s, e)| s >= 0.0 && e >= s), "{lane:?}");
        assert!(
            lane.windows(2).all(|w| w[1].0 >= w[0].0),
            "rank {rank}: {lane:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn a_batch_the_backend_reorders_is_traced_as_written() -> Result<()> {
    let (dir, path) = scratch("order", "order.json");
    let options = Options::default().trace(path.display().to_string());
    spawn_with(3, options, |ctx| {
        let (r, w) = (ctx.rank(), ctx.world());
        let g = ctx.new_group([0, 2])?;
        let x = Tensor::full([2], 1u8)?;
        let mut y = Tensor::<u8>::zeros([2])?;
        let mut t = Tensor::full([3], r as f32)?;
        let mut s = Tensor::full([1], r as i64)?;
        // Receive first, collectives last: backends run collectives, then sends, then
        // receives.
        let mut b = ctx.batch();
        b.recv(&mut y, (r + w - 1) % w).send(&x, (r + 1) % w);
        if g.contains(r) {
            b.group(&g).all_reduce(&mut s, ReduceOp::Max);
        }
        b.all_reduce(&mut t, ReduceOp::Sum);
        b.run()
    })?;
    let events = read(&path);
    for rank in 0..3u64 {
        let got = calls(&events, rank);
        let kinds: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        let mut want = vec!["recv", "send", "all_reduce"];
        if rank != 1 {
            want.push("all_reduce");
        }
        assert_eq!(kinds, want, "rank {rank}");
        assert_eq!(got[0].1["peer"], (rank + 2) % 3, "rank {rank}");
        assert!(got[0].1.get("group").is_none(), "rank {rank}: {}", got[0].1);
        let world = &got[got.len() - 1].1;
        assert_eq!(world["group"], serde_json::json!([0, 1, 2]), "rank {rank}");
        assert_eq!(world["dtype"], "f32");
        if rank != 1 {
            assert_eq!(got[2].1["group"], serde_json::json!([0, 2]), "rank {rank}");
            assert_eq!(got[2].1["dtype"], "i64");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn a_failing_program_still_leaves_its_trace() {
    let (dir, path) = scratch("fail", "deadlock.json");
    let options = Options::default().trace(path.display().to_string());
    // Both ranks receive first: a deadlock, reported as an error.
    let r = spawn_with(2, options, |ctx| {
        let mut t = Tensor::<f32>::zeros([1])?;
        let peer = 1 - ctx.rank();
        ctx.recv(&mut t, peer)?;
        ctx.send(&t, peer)
    });
    assert!(r.is_err());
    let events = read(&path);
    for rank in 0..2u64 {
        let got = calls(&events, rank);
        assert_eq!(got.len(), 1, "rank {rank}: {got:?}");
        assert_eq!(got[0].0, "recv");
        assert_eq!(got[0].1["ok"], false);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Several worlds traced to one path by one process: each its own Chrome process, in order.
#[test]
fn worlds_of_one_process_share_the_file() -> Result<()> {
    let (dir, path) = scratch("worlds", "worlds.json");
    let path = path.display().to_string();
    for world in [2, 3] {
        spawn_with(world, Options::default().trace(path.clone()), |ctx| {
            ctx.barrier()
        })?;
    }
    let events = read(std::path::Path::new(&path));
    let per_world: Vec<usize> = (0..2u64)
        .map(|pid| {
            events
                .iter()
                .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["name"] == "barrier")
                .count()
        })
        .collect();
    assert_eq!(per_world, [2, 3]);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn an_unwritable_path_is_an_error() {
    let options = Options::default().trace("/nonexistent-dir/rankwise/trace.json");
    let err = spawn_with(1, options, |_| Ok(())).expect_err("the trace cannot be written");
    assert!(
        err.to_string()
            .starts_with("could not write the trace to /nonexistent-dir/rankwise/trace.json"),
        "{err}"
    );
}
