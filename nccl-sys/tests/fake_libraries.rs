//! Libraries that claim to be NCCL but are not what rankwise needs — too old, missing functions
//! their version should have, an older release without the newest calls — built here with the C
//! compiler as stand-ins (no real old NCCL is at hand): each is a specific `Err`, or a load
//! whose missing optional calls are `None`, never a crash.

use std::path::PathBuf;
use std::process::Command;

use nccl_sys::{DECLARATIONS, LoadError, MIN_VERSION, Nccl, Search};

/// A shared library exporting `ncclGetVersion` (reporting `version`) and a stub for each name.
fn fake(tag: &str, version: i32, names: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rankwise-fake-nccl-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut c = format!("int ncclGetVersion(int *v) {{ *v = {version}; return 0; }}\n");
    for n in names {
        c += &format!("int {n}(void) {{ return 0; }}\n");
    }
    let src = dir.join("fake.c");
    std::fs::write(&src, c).expect("write C");
    let lib = dir.join("libnccl.so.2");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("a C compiler (cc) is installed");
    assert!(status.success(), "building the fake library failed");
    lib
}

fn load(lib: PathBuf) -> Result<&'static Nccl, LoadError> {
    Nccl::load_from(&Search {
        explicit: Some(lib),
        names: Vec::new(),
        site_packages: Vec::new(),
    })
}

/// Every declared function that a release of `version` has.
fn names_up_to(version: i32) -> Vec<&'static str> {
    DECLARATIONS
        .iter()
        .filter(|d| d.since <= version && d.name != "ncclGetVersion")
        .map(|d| d.name)
        .collect()
}

#[test]
fn an_nccl_older_than_rankwise_needs_is_named_with_both_versions() {
    let lib = fake("old", 21003, &names_up_to(21003));
    let Err(e) = load(lib.clone()) else {
        panic!("NCCL 2.10.3 was accepted")
    };
    assert!(
        matches!(e, LoadError::TooOld { found: 21003, needed, .. } if needed == MIN_VERSION),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.contains(&lib.display().to_string()), "{text}");
    assert!(text.contains("2.10.3") && text.contains("2.18"), "{text}");
}

#[test]
fn functions_a_version_should_have_and_lacks_are_listed() {
    // Claims 2.32.3 but has only the functions of 2.18.
    let lib = fake("hollow", 23203, &names_up_to(21800));
    let Err(e) = load(lib) else {
        panic!("a library without 2.28's functions was accepted as 2.32.3")
    };
    let LoadError::MissingSymbols {
        missing, version, ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(*version, 23203);
    assert!(missing.contains(&"ncclAlltoAll"), "{missing:?}");
    assert!(!missing.contains(&"ncclAllReduce"), "{missing:?}");
    assert!(e.to_string().contains("ncclAlltoAll"), "{e}");
}

#[test]
fn an_older_release_loads_without_the_calls_it_does_not_have() {
    // 2.27.3: everything rankwise uses except 2.28's all_to_all, gather and scatter.
    let nccl = load(fake("2.27", 22703, &names_up_to(22703))).expect("2.27.3 loads");
    assert_eq!(nccl.version, 22703);
    assert!(nccl.api.ncclAllReduce.is_some() && nccl.api.ncclSend.is_some());
    assert!(nccl.api.ncclAlltoAll.is_none(), "2.27 has no ncclAlltoAll");
    assert!(nccl.api.ncclGather.is_none() && nccl.api.ncclScatter.is_none());
}
