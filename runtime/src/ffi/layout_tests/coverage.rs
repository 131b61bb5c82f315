//! The other direction of the layout check: every struct of the ffi module (read from its
//! source) is in the layout table, with the same fields and the same `Args` impl.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::table;

/// The `pub struct` items of `the ffi module` and their field names, read from the source.
fn ffi_structs(source: &str) -> BTreeMap<String, Vec<String>> {
    let mut structs = BTreeMap::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in source.lines() {
        let trimmed = line.trim();
        if let Some((name, fields)) = current.as_mut() {
            if trimmed == "}" {
                structs.insert(name.clone(), std::mem::take(fields));
                current = None;
            } else if let Some(rest) = trimmed.strip_prefix("pub ")
                && let Some((field, _)) = rest.split_once(':')
            {
                fields.push(field.trim().to_owned());
            }
        } else if let Some(rest) = line.strip_prefix("pub struct ")
            && let Some(name) = rest.strip_suffix(" {")
        {
            current = Some((name.trim().to_owned(), Vec::new()));
        }
    }
    structs
}

/// The struct names in the `args! { ... }` invocation of `the ffi module`.
fn ffi_args_impls(source: &str) -> BTreeSet<String> {
    source
        .lines()
        .skip_while(|line| line.trim() != "args! {")
        .skip(1)
        .take_while(|line| line.trim() != "}")
        .filter_map(|line| line.split_once("=>"))
        .map(|(name, _)| name.trim().to_owned())
        .collect()
}

#[test]
fn table_covers_ffi_module() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ffi");
    // Every file of the module, `mod.rs` (which holds the `args!` invocation) first.
    let mut files: Vec<_> = std::fs::read_dir(&path)
        .expect("src/ffi can be listed")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort_by_key(|p| (p.file_name() != Some("mod.rs".as_ref()), p.clone()));
    let source: String = files
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("an ffi source file can be read"))
        .collect::<Vec<_>>()
        .join("\n");
    let structs = ffi_structs(&source);
    let args = ffi_args_impls(&source);
    assert!(
        !structs.is_empty() && !args.is_empty(),
        "could not parse {}",
        path.display()
    );
    let table = table();
    let mut problems = Vec::new();
    for entry in &table {
        match structs.get(entry.rust) {
            None => problems.push(format!("{}: not a struct in the ffi module", entry.rust)),
            Some(fields) if *fields != entry.fields => problems.push(format!(
                "{}: fields in the ffi module {fields:?}, in the table {:?}",
                entry.rust, entry.fields
            )),
            Some(_) => {}
        }
        if entry.has_args_impl != args.contains(entry.rust) {
            problems.push(format!(
                "{}: Args impl in the ffi module {}, in the table {}",
                entry.rust,
                args.contains(entry.rust),
                entry.has_args_impl
            ));
        }
    }
    let listed: BTreeSet<&str> = table.iter().map(|entry| entry.rust).collect();
    for name in structs.keys() {
        if !listed.contains(name.as_str()) {
            problems.push(format!(
                "{name}: in the ffi module but not in the layout table"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the layout table is out of date with {}:\n  {}",
        path.display(),
        problems.join("\n  ")
    );
}
