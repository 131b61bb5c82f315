//! Comments say what the code does and why; measurements, dates and commit hashes leave them
//! (they go stale the day the code or the machine changes, and history keeps them anyway).
//!
//! The test walks every crate's `src/` and reads comment text only (`//`, `///`, `//!` and
//! `/* … */`, outside string and char literals). It flags a number followed by a unit of time,
//! size, share or rate (`12 ms`, `31 %`, `3.2 GiB`, `900 GB/s`), a date (`2026-12-05`) and a
//! word that looks like a commit hash (7 to 40 hex digits holding both a digit and a letter).
//!
//! A figure cited from a published source may stay: its comment line says so with the word
//! `published`, `datasheet` or `spec` (a date or a hash never may). Anything else that must
//! stay goes in [`ALLOWED`] with its reason. Hand-written scanning, no regex crate: the
//! workspace keeps its dependencies few.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// The source folders scanned, relative to the workspace root.
const ROOTS: &[&str] = &[
    "dsl/src",
    "macros/src",
    "runtime/src",
    "models/src",
    "cli/src",
    "examples/my-model/src",
];

/// Units that make a preceding number a measurement, each matched as a whole word: `1.5s` and
/// `2 s` are times, `16 steps` is a count.
const UNITS: &[&str] = &[
    "TFLOP/s", "tokens/s", "tok/s", "GB/s", "TB/s", "MiB", "GiB", "KiB", "TiB", "sec", "min", "ms",
    "µs", "us", "ns", "MB", "GB", "KB", "TB", "s", "%",
];

/// Words that mark a comment line as citing a published figure (a chip's datasheet, a paper).
const CITATIONS: &[&str] = &["published", "datasheet", "spec"];

/// Exceptions, each a (file, substring of the comment, reason) triple; keep it tiny.
const ALLOWED: &[(&str, &str, &str)] = &[];

/// One flagged comment: where it is and its text.
#[derive(Debug)]
struct Finding {
    file: String,
    line: usize,
    text: String,
}

#[test]
fn no_measurements_dates_or_hashes_in_source_comments() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut files = Vec::new();
    for dir in ROOTS {
        collect_rust_files(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 100,
        "found only {} source files under {}; did the crates move?",
        files.len(),
        root.display()
    );
    files.sort();

    let mut findings = Vec::new();
    for path in &files {
        let source = fs::read_to_string(path)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
        let relative = path
            .strip_prefix(root)
            .unwrap_or(path)
            .to_string_lossy()
            .replace('\\', "/");
        for (line, text) in comments(&source) {
            if offends(&text) && !allowed(&relative, &text) {
                findings.push(Finding {
                    file: relative.clone(),
                    line,
                    text: text.trim().to_owned(),
                });
            }
        }
    }

    let mut report = String::new();
    for finding in &findings {
        let _ = writeln!(
            report,
            "{}:{}: {}",
            finding.file, finding.line, finding.text
        );
    }
    assert!(
        findings.is_empty(),
        "{} comment line(s) hold a measurement, a date or a commit hash; say what and why, and \
         point to where the figure lives (a doc, the command that measures it):\n{report}",
        findings.len()
    );
}

#[test]
fn scanner_flags_measurements_dates_and_hashes() {
    for comment in [
        "// 12 ms here",
        "// at 29fc093",
        "// on 2026-12-05",
        "// 31 %",
        "/// takes 1.5s per step",
        "//! 80 GiB of memory",
        "// 2,400 tokens/s",
        "// 3.2 GB/s",
        "// commit 9449b2f0c",
        "// 19-29 min each",
        "// 40%",
        "// the published step (2026-06-22)",
    ] {
        assert!(flagged(comment), "should be flagged: {comment}");
    }
}

#[test]
fn scanner_passes_shapes_counts_and_tolerances() {
    for comment in [
        "// 1e-6 tolerance",
        "// [d, 4 * d]",
        "// bf16",
        "// layer 3 of 8",
        "// f32 is 4 bytes",
        "// %0 = stablehlo.add",
        "// the 2 shards",
        "// 16 steps of 3 sequences",
        "// a deadbeef marker",
        "// 0x1f2e3d4c",
        "// 0.99201e12 FLOPs at 2307e12 a second",
        "// 80 GB of HBM3 (NVIDIA's datasheet)",
        "// qwen3 at 8 layers",
        "let s = \"12 ms\"; // a string",
    ] {
        assert!(!flagged(comment), "should pass: {comment}");
    }
}

#[test]
fn comments_skip_string_and_char_literals() {
    let source = "let url = \"https://x/12 ms\"; // fine\n\
                  let c = '\"'; let d = \"// 31 %\";\n\
                  let r = r#\"a \" // 5 ms\"#; // at 29fc093\n\
                  fn f<'a>(x: &'a str) {} // 'b' 2026-12-05\n\
                  let q = ['\\'', '\\\\']; let e = \"// 9 ms\";\n";
    let found = comments(source);
    let lines: Vec<usize> = found.iter().map(|(line, _)| *line).collect();
    assert_eq!(lines, [1, 3, 4], "{found:?}");
    assert!(!offends(&found[0].1));
    assert!(offends(&found[1].1));
    assert!(offends(&found[2].1));
}

/// Whether one line of source, taken as a whole file, holds an offending comment.
fn flagged(source: &str) -> bool {
    comments(source).iter().any(|(_, text)| offends(text))
}

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()))
            .path();
        if path.is_dir() {
            collect_rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The comment text of each line that has one, with its 1-based line number. String, raw
/// string, byte string and char literals are skipped, across lines where they span several;
/// a lifetime (`'a`) is not a char literal.
fn comments(source: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = source.chars().collect();
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Appends one character of comment text to the current line's entry.
    let push = |out: &mut Vec<(usize, String)>, line: usize, c: char| match out.last_mut() {
        Some((last, text)) if *last == line => text.push(c),
        _ => out.push((line, c.to_string())),
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                push(&mut out, line, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    push(&mut out, line, ' ');
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    } else {
                        push(&mut out, line, chars[i]);
                    }
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // `r"…"`, `r#"…"#`, `br"…"`: no escapes; ends at a quote and as many `#`.
            i = hashes.0;
            let closing = hashes.1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=closing).all(|k| chars.get(i + k) == Some(&'#')) {
                    i += 1 + closing;
                    break;
                }
                if chars[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A char literal is `'x'` or `'\…'`; anything else is a lifetime or a label.
            if next == Some('\\') {
                // Past the escaped character, which may itself be a quote (`'\''`).
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if is_word_char(c) {
            // Skip whole identifiers so `br` or `r` inside one never opens a raw string.
            while i < chars.len() && is_word_char(chars[i]) {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Where a raw string literal's body starts and how many `#` close it, if one opens at `i`.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    if i > 0 && is_word_char(chars[i - 1]) {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') || chars.get(j) == Some(&'c') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((j + 1, hashes))
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether a comment's text holds a date, a commit hash, or a measurement that cites no
/// published source.
fn offends(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    (has_measurement(&chars) && !cites_a_source(text)) || has_date(&chars) || has_hash(&chars)
}

fn cites_a_source(text: &str) -> bool {
    words(text).any(|word| {
        let word = word.to_lowercase();
        CITATIONS
            .iter()
            .any(|cited| word == *cited || word == format!("{cited}s"))
    })
}

fn allowed(file: &str, text: &str) -> bool {
    ALLOWED
        .iter()
        .any(|(allowed_file, substring, _reason)| file == *allowed_file && text.contains(substring))
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_word_char(c))
        .filter(|word| !word.is_empty())
}

/// A number (digits, with `.`, `,` or `_` between digits) that starts a word, then an
/// optional space and a unit that ends one: `12 ms`, `1.5s`, `31 %`, `2,400 tokens/s`.
fn has_measurement(chars: &[char]) -> bool {
    let mut i = 0;
    while i < chars.len() {
        let starts_number = chars[i].is_ascii_digit() && (i == 0 || !is_word_char(chars[i - 1]));
        if !starts_number {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < chars.len()
            && (chars[end].is_ascii_digit()
                || (matches!(chars[end], '.' | ',' | '_')
                    && chars.get(end + 1).is_some_and(char::is_ascii_digit)))
        {
            end += 1;
        }
        let mut unit_start = end;
        if matches!(chars.get(unit_start), Some(' ' | '\u{a0}' | '\u{202f}')) {
            unit_start += 1;
        }
        if UNITS.iter().any(|unit| unit_at(chars, unit_start, unit)) {
            return true;
        }
        i = end;
    }
    false
}

/// Whether `unit` stands at `start` as a whole word (`%` and `/s` units end themselves).
fn unit_at(chars: &[char], start: usize, unit: &str) -> bool {
    let unit: Vec<char> = unit.chars().collect();
    let end = start + unit.len();
    end <= chars.len()
        && chars[start..end] == unit[..]
        && chars.get(end).is_none_or(|&c| !is_word_char(c))
}

/// `YYYY-MM-DD` with a year in the 2000s.
fn has_date(chars: &[char]) -> bool {
    // `d` stands for any digit.
    let pattern: Vec<char> = "20dd-dd-dd".chars().collect();
    chars.windows(pattern.len()).any(|window| {
        window.iter().zip(&pattern).all(|(&c, &p)| match p {
            'd' => c.is_ascii_digit(),
            _ => c == p,
        })
    })
}

/// A word of 7 to 40 lowercase hex digits holding both a digit and a letter, unless it reads
/// as a number in exponent notation (`2307e12`).
fn has_hash(chars: &[char]) -> bool {
    let text: String = chars.iter().collect();
    words(&text).any(|word| {
        (7..=40).contains(&word.len())
            && word.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
            && word.chars().any(|c| c.is_ascii_digit())
            && word.chars().any(|c| c.is_ascii_lowercase())
            && !is_exponent_number(word)
    })
}

/// Digits, one `e`, digits.
fn is_exponent_number(word: &str) -> bool {
    word.split_once('e').is_some_and(|(mantissa, exponent)| {
        [mantissa, exponent]
            .iter()
            .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()))
    })
}
