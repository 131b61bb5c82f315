//! `runtime/src/pjrt/`, the binding and the only `unsafe` code, is a leaf: it names nothing of
//! the runtime above it (the compile cache, the plugin policy, topologies), only the modules
//! below it. A policy that creeps into the binding fails here, naming the file and the line.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::path::{Path, PathBuf};

/// What pjrt may name of the crate: its errors (and their re-exports at the root), the raw
/// FFI types, element types, program signatures, and itself.
const BELOW: [&str; 8] = [
    "error",
    "Error",
    "ErrorCode",
    "Result",
    "ffi",
    "element",
    "signature",
    "pjrt",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn pjrt_names_nothing_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pjrt");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(
        files.len() > 5,
        "found {} files under {}",
        files.len(),
        root.display()
    );
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                // `super::crate::…` does not exist; `$crate::` is a macro's own crate.
                let before = &code[..at];
                if before.ends_with('$') || BELOW.contains(&name.as_str()) {
                    continue;
                }
                found.push(format!("{}:{}: crate::{name}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "pjrt names modules above it (move the policy out, or the piece into pjrt):\n{}",
        found.join("\n")
    );
}
