//! Every golden file of the DSL (`dsl/tests/golden/*.mlir`) compiles on the CPU plugin, so
//! the text the emitter is pinned to is text XLA accepts.
//!
//! A file with `mhlo.num_partitions = N` is a program on a mesh: it is compiled for `N`
//! devices in the partitions form. Any other file is compiled for one device.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan_runtime::testing as common;

use std::path::PathBuf;

use stackscan_runtime::{CompileOptions, Mesh, ProgramForm};

/// The golden files, sorted by name.
fn golden_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dsl/tests/golden");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mlir"))
        .collect();
    files.sort();
    files
}

/// `N` of `mhlo.num_partitions = N`, when the program is on a mesh.
fn num_partitions(text: &str) -> Option<usize> {
    let rest = text.split("mhlo.num_partitions = ").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(digits.parse().unwrap())
}

#[test]
fn every_golden_file_compiles() {
    let files = golden_files();
    assert!(
        files.len() >= 5,
        "expected the DSL's golden files, found {files:?}"
    );
    let single = common::cpu_client(1);
    let mut failures = Vec::new();
    let mut meshes = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let compiled = match num_partitions(&text) {
            None => single.compile(&text, &CompileOptions::default()),
            Some(n) => {
                meshes += 1;
                let client = common::cpu_client(n);
                let mesh = Mesh::new(&client, "x", n).unwrap();
                client.compile(&text, &mesh.compile_options(ProgramForm::Partitions))
            }
        };
        if let Err(e) = compiled {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(meshes >= 1, "no golden program on a mesh among {files:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
