//! The op rules sit in layers, each naming only the ones below it: the IR and its types; the
//! shared checks (`family/operands.rs`) and the writer's text (`emit/text.rs`); the families'
//! type rules and StableHLO text (`family/`); then what dispatches into them (`infer`, the
//! writer, graph building and the VJPs under `autodiff/rules/`). A family that reaches up
//! into a dispatcher (the circle this layout removed) fails here, naming the file and line.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::path::Path;

/// The IR and what it is made of.
const IR: [&str; 5] = ["dtype", "error", "ir", "types", "mesh"];

/// Each layer: its files (relative to `src/`), and the `crate::` paths they may name
/// (a path is allowed when it starts with one of them).
fn layers() -> Vec<(Vec<String>, Vec<&'static str>)> {
    let families: Vec<String> = std::fs::read_dir(src().join("family"))
        .unwrap()
        .map(|e| format!("family/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".rs"))
        .collect();
    assert!(families.len() >= 9, "families: {families:?}");
    vec![
        (
            vec![
                "dtype.rs",
                "types.rs",
                "ir/mod.rs",
                "ir/live.rs",
                "ir/scan_parts.rs",
                "mesh.rs",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
            IR.to_vec(),
        ),
        (vec!["emit/text.rs".to_owned()], IR.to_vec()),
        (families, [&IR[..], &["family", "emit::text"]].concat()),
    ]
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `crate::a::b` paths in `code`, as `a::b` (up to the first character that is not part of a
/// path).
fn crate_paths(code: &str) -> Vec<String> {
    code.match_indices("crate::")
        .filter(|&(at, _)| !code[..at].ends_with('$'))
        .map(|(at, _)| {
            code[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect::<String>()
        })
        .collect()
}

#[test]
fn op_rules_name_only_the_layers_below() {
    let mut found = Vec::new();
    for (files, allowed) in layers() {
        for file in files {
            let text = std::fs::read_to_string(src().join(&file)).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                // Doc links name what a reader should see, not what the code depends on.
                if code.starts_with("//") {
                    continue;
                }
                for path in crate_paths(code) {
                    if !allowed
                        .iter()
                        .any(|a| path == *a || path.starts_with(&format!("{a}::")))
                    {
                        found.push(format!("src/{file}:{}: crate::{path}", n + 1));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "op rules name a layer above them (move the helper down, or the code up):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_path_that_reaches_up() {
    assert_eq!(
        crate_paths("use crate::builder::{Scope, Tensor};"),
        vec!["builder::".to_owned()]
    );
    assert_eq!(
        crate_paths("let a = crate::emit::text::frontend_attributes(&all);"),
        vec!["emit::text::frontend_attributes".to_owned()]
    );
}
