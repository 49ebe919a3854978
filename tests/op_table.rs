//! The table of operations (`rankwise_core::ops`) is the one list of communication calls: this
//! test holds the hand-written method families to it, name by name and argument by argument.
//! (The macro's recognition of calls and the kinds' properties are derived from the table
//! directly; `replay` matches on every kind, which the compiler checks.)

use rankwise::OpKind;
use rankwise::ops::Role;

/// The names of `method`'s parameters after `self`, read from `source` (a `pub fn method`
/// that appears once), or `None` if there is no such method.
fn params_of(source: &str, method: &str) -> Option<Vec<String>> {
    let needle = format!("pub fn {method}");
    let starts: Vec<usize> = source
        .match_indices(&needle)
        .map(|(i, _)| i)
        .filter(|&i| matches!(source[i + needle.len()..].chars().next(), Some('<' | '(')))
        .collect();
    assert!(
        starts.len() <= 1,
        "`{needle}` appears {} times",
        starts.len()
    );
    let at = *starts.first()?;
    let rest = &source[at + needle.len()..];
    // Skip generics, then take the balanced parameter list.
    let open = rest.find('(')?;
    assert!(
        rest[..open].trim().is_empty() || rest[..open].trim().starts_with('<'),
        "`{needle}` is not followed by its parameters"
    );
    let mut depth = 0usize;
    let mut list = String::new();
    for c in rest[open..].chars() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            break;
        }
        list.push(if depth == 1 && c == ',' { '\u{1}' } else { c });
    }
    Some(
        list[1..]
            .split('\u{1}')
            .map(str::trim)
            .filter(|p| !p.is_empty() && !p.ends_with("self"))
            .map(|p| p.split(':').next().unwrap_or("").trim().to_string())
            .collect(),
    )
}

fn read(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// `Ctx`, `Comm`, `Batch` and `BatchComm` get their communication methods from one macro body
/// in `runtime/src/ctx.rs`: each kind's method is there, with the table's parameters in order.
#[test]
fn ctx_methods_follow_the_table() {
    let source = read("runtime/src/ctx.rs");
    let body_at = source
        .find("macro_rules! comm_methods")
        .expect("the communication methods are written once, in `comm_methods!`");
    let body = &source[body_at..];
    for k in OpKind::ALL {
        let want: Vec<&str> = k.params().iter().map(|p| p.name).collect();
        let got = params_of(body, k.name()).unwrap_or_else(|| panic!("no method for {k}"));
        assert_eq!(got, want, "{k}");
    }
}

/// The list forms are there too, with their rows' parameters in order.
#[test]
fn list_form_methods_follow_the_table() {
    let source = read("runtime/src/ctx.rs");
    let body = &source[source
        .find("macro_rules! comm_methods")
        .expect("the communication methods are written once, in `comm_methods!`")..];
    for s in rankwise::ops::LIST_FORMS {
        let want: Vec<&str> = s.params.iter().map(|p| p.name).collect();
        let got = params_of(body, s.name).unwrap_or_else(|| panic!("no method for {}", s.name));
        assert_eq!(got, want, "{}", s.name);
    }
}

/// The `verify::Program` builder has one method per kind, taking the group (collectives), the
/// described tensor as dtype and shape, then the table's scalar arguments in order.
#[test]
fn program_builder_follows_the_table() {
    let source = read("core/src/verify/program.rs");
    for k in OpKind::ALL {
        let mut want: Vec<&str> = Vec::new();
        if !k.is_p2p() {
            want.push("g");
        }
        for p in k.params() {
            match p.role {
                Role::Described => want.extend(["dtype", "shape"]),
                // The builder derives the other buffer's shape (`with_output` overrides it).
                Role::Other => {}
                _ => want.push(p.name),
            }
        }
        let got = params_of(&source, k.name()).unwrap_or_else(|| panic!("no builder for {k}"));
        assert_eq!(got, want, "{k}");
    }
}

/// Names that are not in the table are not communication kinds, whatever they look like.
#[test]
fn unknown_names_are_no_kind() {
    for name in [
        "isend",
        "irecv",
        "all_reduce_",
        "Barrier",
        "batch_isend_irecv",
        "",
    ] {
        assert_eq!(OpKind::from_name(name), None, "{name}");
    }
}

/// The reader above, on signatures shaped like the real ones.
#[test]
fn params_are_read_from_signatures() {
    let src = "pub fn reduce_scatter() {}\n pub fn reduce<T: E<U>>(\n &mut self,\n a: Option<&$a mut Tensor<T>>, \
               b: impl AsRef<[usize]>,\n) -> R {}";
    assert_eq!(params_of(src, "reduce"), Some(vec!["a".into(), "b".into()]));
    assert_eq!(params_of(src, "reduce_scatter"), Some(vec![]));
    assert_eq!(params_of(src, "send"), None);
}
