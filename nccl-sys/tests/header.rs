//! The declarations against NCCL itself: a C compiler checks every function pointer type and
//! constant of this crate against the real `nccl.h` (from the `nvidia-nccl-cu13` wheel), and the
//! wheel's library loads through this crate's search and resolves every declared function.
//!
//! Where the wheel is: `PYTHONPATH` or any site-packages `Search::from_env` knows. CI installs it
//! and sets `RANKWISE_NCCL_REQUIRED=1`, which turns a missing wheel into a failure; elsewhere the
//! tests say that they had nothing to check and pass.

use std::path::{Path, PathBuf};
use std::process::Command;

use nccl_sys::{DECLARATIONS, Declaration, LoadError, Nccl, Search};

/// The wheel's `nccl.h`, or `None` (a failure when the wheel is required).
fn header() -> Option<PathBuf> {
    let found = Search::from_env().wheel_header();
    if found.is_none() {
        assert!(
            std::env::var_os("RANKWISE_NCCL_REQUIRED").is_none(),
            "RANKWISE_NCCL_REQUIRED is set but no nvidia/nccl wheel was found (searched {:?})",
            Search::from_env().site_packages
        );
        eprintln!("no nvidia/nccl wheel here: nothing to check against (CI installs one)");
    }
    found
}

/// The C type of a parameter or result written as Rust tokens in a declaration.
fn c_type(rust: &str) -> String {
    let t: String = rust.split_whitespace().collect();
    let (ptr, base) = if let Some(b) = t.strip_prefix("*mut") {
        ("*", b)
    } else if let Some(b) = t.strip_prefix("*const") {
        ("const*", b)
    } else {
        ("", t.as_str())
    };
    let base = match base {
        "c_int" => "int",
        "usize" => "size_t",
        "c_void" => "void",
        "c_char" => "char",
        "ncclResult_t"
        | "ncclComm_t"
        | "ncclUniqueId"
        | "ncclDataType_t"
        | "ncclRedOp_t"
        | "ncclScalarResidence_t"
        | "cudaStream_t"
        | "ncclConfig_t" => base,
        other => panic!("no C type known for `{other}`: add it to the header test's map"),
    };
    match ptr {
        "*" => format!("{base} *"),
        "const*" => format!("const {base} *"),
        _ => base.to_string(),
    }
}

/// A C file that compiles only if every declaration matches the header.
fn check_program(decls: &[Declaration]) -> String {
    let mut c = String::from("#include <stddef.h>\n#include <nccl.h>\n");
    for d in decls {
        let args: Vec<String> = d.args.iter().map(|a| c_type(a)).collect();
        let args = if args.is_empty() {
            "void".to_string()
        } else {
            args.join(", ")
        };
        c += &format!(
            "{} (*const check_{})({}) = &{};\n",
            c_type(d.ret),
            d.name,
            args,
            d.name
        );
    }
    // Sizes and values the Rust side writes down.
    use nccl_sys::*;
    let consts: &[(&str, i32)] = &[
        ("ncclSuccess", ncclSuccess),
        ("ncclUnhandledCudaError", ncclUnhandledCudaError),
        ("ncclSystemError", ncclSystemError),
        ("ncclInternalError", ncclInternalError),
        ("ncclInvalidArgument", ncclInvalidArgument),
        ("ncclInvalidUsage", ncclInvalidUsage),
        ("ncclRemoteError", ncclRemoteError),
        ("ncclInProgress", ncclInProgress),
        ("ncclTimeout", ncclTimeout),
        ("ncclSum", ncclSum),
        ("ncclProd", ncclProd),
        ("ncclMax", ncclMax),
        ("ncclMin", ncclMin),
        ("ncclAvg", ncclAvg),
        ("ncclInt8", ncclInt8),
        ("ncclUint8", ncclUint8),
        ("ncclInt32", ncclInt32),
        ("ncclUint32", ncclUint32),
        ("ncclInt64", ncclInt64),
        ("ncclUint64", ncclUint64),
        ("ncclFloat16", ncclFloat16),
        ("ncclFloat32", ncclFloat32),
        ("ncclFloat64", ncclFloat64),
        ("ncclBfloat16", ncclBfloat16),
        ("ncclScalarDevice", ncclScalarDevice),
        ("ncclScalarHostImmediate", ncclScalarHostImmediate),
    ];
    for (name, v) in consts {
        c += &format!("_Static_assert({name} == {v}, \"{name}\");\n");
    }
    for t in [
        "ncclResult_t",
        "ncclRedOp_t",
        "ncclDataType_t",
        "ncclScalarResidence_t",
    ] {
        c += &format!("_Static_assert(sizeof({t}) == sizeof(int), \"{t}\");\n");
    }
    c += &format!(
        "_Static_assert(sizeof(ncclUniqueId) == {}, \"ncclUniqueId\");\n\
         _Static_assert(NCCL_UNIQUE_ID_BYTES == {}, \"NCCL_UNIQUE_ID_BYTES\");\n",
        std::mem::size_of::<ncclUniqueId>(),
        NCCL_UNIQUE_ID_BYTES
    );
    c
}

/// Compiles `program` against the header in `include` (with stand-ins for the CUDA headers
/// `nccl.h` includes, which declare only the stream type it uses); the compiler's complaint
/// if it fails.
fn compile(include: &Path, program: &str, tag: &str) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("nccl-sys-header-{}-{tag}", std::process::id()));
    let stubs = dir.join("stubs");
    std::fs::create_dir_all(&stubs).map_err(|e| e.to_string())?;
    let write = |p: PathBuf, text: &str| std::fs::write(p, text).map_err(|e| e.to_string());
    write(
        stubs.join("cuda_runtime.h"),
        "#define CUDART_VERSION 13000\ntypedef struct CUstream_st *cudaStream_t;\n\
         typedef struct CUevent_st *cudaEvent_t;\n",
    )?;
    write(stubs.join("cuda_fp16.h"), "")?;
    write(stubs.join("cuda_bf16.h"), "")?;
    let file = dir.join("check.c");
    write(file.clone(), program)?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-fsyntax-only", "-Wall", "-Werror"])
        .arg("-I")
        .arg(&stubs)
        .arg("-I")
        .arg(include)
        .arg(&file)
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn every_declaration_matches_the_wheels_header() {
    let Some(h) = header() else { return };
    let include = h.parent().expect("nccl.h has a directory");
    if let Err(e) = compile(include, &check_program(DECLARATIONS), "ok") {
        panic!("the declarations disagree with {}:\n{e}", h.display());
    }
}

#[test]
fn a_wrong_declaration_is_caught() {
    let Some(h) = header() else { return };
    let include = h.parent().expect("nccl.h has a directory");
    // `count` as an int instead of a size_t: what the check exists to catch.
    let mut decls = DECLARATIONS.to_vec();
    let at = decls
        .iter()
        .position(|d| d.name == "ncclAllReduce")
        .expect("ncclAllReduce is declared");
    let args: &'static [&'static str] = Box::leak(
        decls[at]
            .args
            .iter()
            .map(|&a| if a == "usize" { "c_int" } else { a })
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    decls[at].args = args;
    assert!(
        compile(include, &check_program(&decls), "wrong").is_err(),
        "a count declared as int compiled against {}",
        h.display()
    );
}

#[test]
fn the_wheels_library_loads_through_the_search_and_has_every_function() {
    let Some(h) = header() else { return };
    // The wheel's own directory, as a user's PYTHONPATH or site-packages would hold it.
    let site = h
        .ancestors()
        .nth(4)
        .expect("site-packages/nvidia/nccl/include/nccl.h")
        .to_path_buf();
    let search = Search {
        explicit: None,
        names: Vec::new(),
        site_packages: vec![site],
    };
    let nccl = Nccl::load_from(&search).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&h).expect("the header reads");
    let code: i32 = text
        .lines()
        .find_map(|l| l.strip_prefix("#define NCCL_VERSION_CODE "))
        .and_then(|v| v.trim().parse().ok())
        .expect("nccl.h defines NCCL_VERSION_CODE");
    assert_eq!(nccl.version, code, "{}", nccl.path.display());
    // Every declared function resolved (the wheel is newer than all of them).
    let api = &nccl.api;
    let present = [
        api.ncclAllReduce.is_some(),
        api.ncclAlltoAll.is_some(),
        api.ncclGather.is_some(),
        api.ncclScatter.is_some(),
        api.ncclCommSplit.is_some(),
        api.ncclRedOpCreatePreMulSum.is_some(),
        api.ncclGroupStart.is_some(),
        api.ncclSend.is_some(),
        api.ncclRecv.is_some(),
    ];
    assert!(present.iter().all(|&p| p), "{present:?}");
    // A call that needs no GPU goes through the table.
    let get = api.ncclGetErrorString.expect("ncclGetErrorString");
    // SAFETY: a static string for a result code.
    let text = unsafe { std::ffi::CStr::from_ptr(get(nccl_sys::ncclInvalidArgument)) };
    assert!(
        text.to_string_lossy().contains("invalid argument"),
        "{text:?}"
    );
}

#[test]
fn a_missing_library_is_an_error_that_lists_the_search() {
    let search = Search {
        explicit: None,
        names: vec!["libnccl-not-here.so.2".into()],
        site_packages: vec!["/nowhere/site-packages".into()],
    };
    let Err(e) = Nccl::load_from(&search) else {
        panic!("a library that does not exist loaded")
    };
    assert!(matches!(e, LoadError::NotFound { .. }), "{e:?}");
    let text = e.to_string();
    for part in [
        "libnccl-not-here.so.2",
        "/nowhere/site-packages",
        "RANKWISE_NCCL_LIB",
    ] {
        assert!(text.contains(part), "no {part:?} in: {text}");
    }
}

#[test]
fn an_explicit_path_that_is_not_nccl_is_an_error_not_a_crash() {
    // A real shared library without NCCL's functions.
    let search = Search {
        explicit: Some("libm.so.6".into()),
        names: Vec::new(),
        site_packages: Vec::new(),
    };
    let Err(e) = Nccl::load_from(&search) else {
        panic!("libm loaded as NCCL")
    };
    assert!(
        matches!(&e, LoadError::MissingSymbols { missing, .. } if missing == &["ncclGetVersion"]),
        "{e:?}"
    );
}
