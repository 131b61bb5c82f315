//! The README's "Errors" section lists every kind of runtime error, so a new variant cannot
//! land without telling users what it means and what to do.

#[test]
fn every_error_variant_is_in_the_readme() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let section = readme
        .split("\n## Errors\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README.md has an `## Errors` section");
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
    let missing: Vec<&&str> = variants
        .iter()
        .filter(|v| !section.contains(&format!("`{v}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in the README's Errors section: {missing:?}"
    );
}
