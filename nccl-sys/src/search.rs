//! Where NCCL is looked for.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The candidates for the NCCL library, in the order they are tried (see the crate docs).
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// The library named by `RANKWISE_NCCL_LIB` (a file, or a directory holding
    /// `libnccl.so.2`): when set, the only candidate.
    pub explicit: Option<PathBuf>,
    /// Names for the dynamic linker's own search.
    pub names: Vec<String>,
    /// Python package directories (site-packages) that may hold an `nvidia/nccl` wheel.
    pub site_packages: Vec<PathBuf>,
}

impl Search {
    /// The search this process's environment describes.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        Search {
            explicit: var("RANKWISE_NCCL_LIB").map(PathBuf::from),
            names: vec!["libnccl.so.2".into(), "libnccl.so".into()],
            site_packages: site_packages(
                var("PYTHONPATH"),
                var("VIRTUAL_ENV"),
                var("CONDA_PREFIX"),
                var("HOME"),
                var("PYENV_ROOT"),
            ),
        }
    }

    /// The candidates, in order: the explicit library alone if there is one; else the names,
    /// then each wheel library that exists.
    pub fn candidates(&self) -> Vec<PathBuf> {
        if let Some(p) = &self.explicit {
            return vec![if p.is_dir() {
                p.join("libnccl.so.2")
            } else {
                p.clone()
            }];
        }
        let mut out: Vec<PathBuf> = self.names.iter().map(PathBuf::from).collect();
        out.extend(
            self.site_packages
                .iter()
                .map(|sp| sp.join("nvidia/nccl/lib/libnccl.so.2"))
                .filter(|p| p.is_file()),
        );
        out
    }

    /// The Python package directories searched (for error messages), when no explicit library
    /// is named.
    pub fn searched_dirs(&self) -> Vec<PathBuf> {
        if self.explicit.is_some() {
            Vec::new()
        } else {
            self.site_packages.clone()
        }
    }

    /// The `nccl.h` of the first wheel found, if any (the header the declarations are checked
    /// against).
    pub fn wheel_header(&self) -> Option<PathBuf> {
        self.site_packages
            .iter()
            .map(|sp| sp.join("nvidia/nccl/include/nccl.h"))
            .find(|p| p.is_file())
    }
}

/// The site-packages directories to look in, from the environment's values.
fn site_packages(
    pythonpath: Option<OsString>,
    venv: Option<OsString>,
    conda: Option<OsString>,
    home: Option<OsString>,
    pyenv: Option<OsString>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = pythonpath
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for prefix in [venv, conda].into_iter().flatten() {
        out.extend(pythons(&Path::new(&prefix).join("lib"), "site-packages"));
    }
    if let Some(home) = &home {
        out.extend(pythons(
            &Path::new(home).join(".local/lib"),
            "site-packages",
        ));
    }
    let pyenv = pyenv.or_else(|| home.map(|h| Path::new(&h).join(".pyenv").into_os_string()));
    if let Some(root) = pyenv {
        for version in subdirs(&Path::new(&root).join("versions")) {
            out.extend(pythons(&version.join("lib"), "site-packages"));
        }
    }
    for sys in ["/usr/local/lib", "/usr/lib"] {
        out.extend(pythons(Path::new(sys), "site-packages"));
        out.extend(pythons(Path::new(sys), "dist-packages"));
    }
    out.push(PathBuf::from("/usr/lib/python3/dist-packages"));
    out.dedup();
    out
}

/// `<lib>/python3*/<leaf>` for every Python 3 under `lib`.
fn pythons(lib: &Path, leaf: &str) -> Vec<PathBuf> {
    subdirs(lib)
        .into_iter()
        .filter(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"))
        })
        .map(|d| d.join(leaf))
        .filter(|d| d.is_dir())
        .collect()
}

/// The directories directly under `dir`, sorted (none if it cannot be read).
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_library_is_the_only_candidate() {
        let s = Search {
            explicit: Some("/opt/nccl/lib/libnccl.so.2".into()),
            names: vec!["libnccl.so.2".into()],
            site_packages: vec!["/nowhere".into()],
        };
        assert_eq!(
            s.candidates(),
            [PathBuf::from("/opt/nccl/lib/libnccl.so.2")]
        );
        assert!(s.searched_dirs().is_empty());
    }

    #[test]
    fn names_come_before_wheels_and_missing_wheels_are_skipped() {
        let dir = std::env::temp_dir().join(format!("nccl-sys-search-{}", std::process::id()));
        let lib = dir.join("nvidia/nccl/lib");
        std::fs::create_dir_all(&lib).expect("temp dir");
        std::fs::write(lib.join("libnccl.so.2"), b"").expect("temp file");
        let s = Search {
            explicit: None,
            names: vec!["libnccl.so.2".into(), "libnccl.so".into()],
            site_packages: vec!["/nowhere".into(), dir.clone()],
        };
        assert_eq!(
            s.candidates(),
            [
                PathBuf::from("libnccl.so.2"),
                PathBuf::from("libnccl.so"),
                lib.join("libnccl.so.2")
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pythonpath_entries_are_searched_first() {
        let pp = std::env::join_paths(["/a/site-packages", "/b"]).expect("paths");
        let sp = site_packages(Some(pp), None, None, None, None);
        assert_eq!(sp[0], PathBuf::from("/a/site-packages"));
        assert_eq!(sp[1], PathBuf::from("/b"));
    }
}
