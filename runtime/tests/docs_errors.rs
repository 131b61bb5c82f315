//! `docs/errors.md` lists every kind of runtime error, so a new variant cannot land without
//! telling users what it means and what to do.

#[test]
fn every_error_variant_is_in_the_errors_page() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let page = std::fs::read_to_string(format!("{root}/docs/errors.md")).expect("docs/errors.md");
    let source = std::fs::read_to_string(format!("{root}/runtime/src/error.rs")).expect("error.rs");
    let body = source
        .split("pub enum Error {")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("error.rs declares `pub enum Error`");
    // Variants are the lines indented by exactly four spaces that start with a capital.
    let variants: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            l.split(|c: char| !c.is_ascii_alphanumeric())
                .next()
                .unwrap_or(l)
        })
        .collect();
    assert!(variants.len() > 20, "too few variants read: {variants:?}");
    // A variant counts where a table row of the page names it: `| `Variant` |` or in a list
    // of variants in the row's first cell, not merely somewhere in the prose.
    let first_cells: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" |").next())
        .collect();
    let missing: Vec<&&str> = variants
        .iter()
        .filter(|v| {
            !first_cells
                .iter()
                .any(|cell| cell.split(", ").any(|name| name == format!("`{v}`")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "not in a table of docs/errors.md: {missing:?}"
    );
}
