//! Bounded fuzzing of the signature reader.
//!
//! (a) Random signatures (every `DType`, ranks 0–4, Shardy shardings on a random 1–2 axis
//! mesh) are printed in several spellings (pretty or generic op form, odd whitespace,
//! decoy comments and functions, `loc` trailers, visibility, aliases, inline meshes) and must
//! read back as exactly the per-device types. (b) Byte- and token-level mutations of those
//! texts must never panic, and fail, if at all, only with `Error::Signature`.
//!
//! `STACKSCAN_FUZZ_CASES=100000 cargo test -p stackscan-runtime --lib fuzz` runs more cases
//! than the default; the seed of a failing case is in the panic message.

use std::fmt::Write as _;
use std::panic::catch_unwind;

use stackscan::{DType, TensorType};

use super::Signature;
use super::lexer::{Kind, Lexer};
use crate::error::Error;

/// SplitMix64: a tiny, good-enough generator, so the test needs no dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

const AXIS_NAMES: [&str; 5] = ["x", "y", "fsdp", "d 1", "q\"t"];

/// A random program: a mesh and `main`'s parameters.
struct Case {
    mesh: Vec<(String, i64)>,
    params: Vec<Param>,
}

struct Param {
    dtype: DType,
    /// Per-device dims.
    local: Vec<i64>,
    /// Mesh axes (indices) each dimension is split over.
    split: Vec<Vec<usize>>,
    annotated: bool,
}

impl Case {
    fn random(rng: &mut SplitMix64) -> Case {
        let mut names = AXIS_NAMES.to_vec();
        let mesh: Vec<(String, i64)> = (0..1 + rng.below(2))
            .map(|_| {
                let name = names.remove(rng.below(names.len()));
                (name.to_owned(), 1 + rng.below(4) as i64)
            })
            .collect();
        let partitions: i64 = mesh.iter().map(|a| a.1).product();
        let params = (0..rng.below(6))
            .map(|_| {
                let rank = rng.below(5);
                let mut split = vec![Vec::new(); rank];
                for axis in 0..mesh.len() {
                    if rank > 0 && rng.one_in(2) {
                        split[rng.below(rank)].push(axis);
                    }
                }
                Param {
                    dtype: rng.pick(&DType::ALL),
                    local: (0..rank).map(|_| rng.below(6) as i64).collect(),
                    annotated: partitions > 1 || rng.one_in(2),
                    split: if partitions > 1 || rng.one_in(2) {
                        split
                    } else {
                        vec![Vec::new(); rank]
                    },
                }
            })
            .collect();
        Case { mesh, params }
    }

    fn partitions(&self) -> i64 {
        self.mesh.iter().map(|a| a.1).product()
    }

    fn expected(&self) -> Vec<TensorType> {
        self.params
            .iter()
            .map(|p| TensorType::new(p.dtype, p.local.clone()))
            .collect()
    }
}

/// The spelling choices of one printing.
struct Style {
    generic: bool,
    dict_after_regions: bool,
    spaced_dims: bool,
    mesh_decl: usize,
    mesh_first: bool,
    quoted_name: bool,
    visibility: &'static str,
    locs: bool,
    priorities: bool,
    separators: &'static [&'static str],
}

const SEPARATORS: [&[&str]; 3] = [
    &[" "],
    &["\n\t", "  ", "\n"],
    &[
        " ",
        "\n// func.func @main(%x: tensor<1xi1>) {\n",
        " \n  // \"sdy.mesh @mesh\n",
    ],
];

impl Style {
    fn random(rng: &mut SplitMix64) -> Style {
        Style {
            generic: rng.one_in(2),
            dict_after_regions: rng.one_in(2),
            spaced_dims: rng.one_in(3),
            mesh_decl: rng.below(4),
            mesh_first: rng.one_in(2),
            quoted_name: rng.one_in(4),
            visibility: rng.pick(&["", "public ", "private "]),
            locs: rng.one_in(2),
            priorities: rng.one_in(3),
            separators: rng.pick(&SEPARATORS),
        }
    }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn print(case: &Case, style: &Style, rng: &mut SplitMix64) -> String {
    let mut spacing = SplitMix64(rng.next());
    let mut sep = move || spacing.pick(style.separators);
    let axes: Vec<String> = case
        .mesh
        .iter()
        .map(|(n, s)| format!("{}={s}", quote(n)))
        .collect();
    let mesh_body = format!("[{}]", axes.join(", "));
    let mesh_ref = if style.mesh_decl == 3 {
        format!("mesh<{mesh_body}>")
    } else {
        "@grid".to_owned()
    };
    let ty = |p: &Param| {
        let global: Vec<String> = p
            .local
            .iter()
            .zip(&p.split)
            .map(|(l, axes)| {
                (l * axes.iter().map(|&a| case.mesh[a].1).product::<i64>()).to_string()
            })
            .chain(std::iter::once(p.dtype.mlir_name().to_owned()))
            .collect();
        format!(
            "tensor<{}>",
            global.join(if style.spaced_dims { " x " } else { "x" })
        )
    };
    let attrs = |p: &Param| {
        if !p.annotated {
            return String::new();
        }
        let dims: Vec<String> = p
            .split
            .iter()
            .enumerate()
            .map(|(d, axes)| {
                let names: Vec<String> = axes.iter().map(|&a| quote(&case.mesh[a].0)).collect();
                // Shardy rejects a priority on an empty closed dimension.
                let priority = if style.priorities && !axes.is_empty() {
                    format!("p{d}")
                } else {
                    String::new()
                };
                format!("{{{}}}{priority}", names.join(", "))
            })
            .collect();
        format!(
            "{{sdy.sharding = #sdy.sharding<{mesh_ref}, [{}]>}}",
            dims.join(", ")
        )
    };
    let mut out = String::new();
    let mesh_decl = match style.mesh_decl {
        0 => format!("sdy.mesh @grid = <{mesh_body}>"),
        1 => format!("sdy.mesh @grid{}={}#grid_alias", sep(), sep()),
        2 => format!(
            "\"sdy.mesh\"() <{{mesh = #sdy.mesh<{mesh_body}>, sym_name = \"grid\"}}> : () -> ()"
        ),
        _ => String::new(),
    };
    if style.mesh_decl == 1 {
        let _ = writeln!(out, "#grid_alias = #sdy.mesh<{mesh_body}>");
    }
    let _ = write!(
        out,
        "module @m attributes {{mhlo.num_partitions = {} : i32, mhlo.frontend_attributes = {{note = \"func.func @main(%s: tensor<3xi1>)\"}}}} {{{}",
        case.partitions(),
        sep()
    );
    if style.mesh_first {
        let _ = write!(out, "{mesh_decl}{}", sep());
    }
    let _ = write!(
        out,
        "func.func private @main_decoy(%z: tensor<7xf64>) -> tensor<7xf64> {{{}return %z : tensor<7xf64>{}}}{}",
        sep(),
        sep(),
        sep()
    );
    if style.generic {
        let types: Vec<String> = case.params.iter().map(ty).collect();
        let dicts: Vec<String> = case
            .params
            .iter()
            .map(|p| match attrs(p) {
                a if a.is_empty() => "{}".to_owned(),
                a => a,
            })
            .collect();
        let mut entries = vec![
            format!("function_type = ({}) -> ()", types.join(", ")),
            "sym_name = \"main\"".to_owned(),
        ];
        if !style.visibility.is_empty() {
            entries.push(format!("sym_visibility = \"{}\"", style.visibility.trim()));
        }
        if case.params.iter().any(|p| p.annotated) {
            entries.push(format!(
                "arg_attrs = [{}]",
                dicts.join(&format!(",{}", sep()))
            ));
        }
        let first = rng.below(entries.len());
        entries.rotate_left(first);
        let entries = entries.join(&format!(",{}", sep()));
        let block_args: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("%arg{i}: {t}"))
            .collect();
        let block = if block_args.is_empty() {
            String::new()
        } else {
            format!("^bb0({}):{}", block_args.join(", "), sep())
        };
        let region = format!(
            "({{{}{block}\"func.return\"() : () -> (){}}})",
            sep(),
            sep()
        );
        if style.dict_after_regions {
            let _ = write!(out, "\"func.func\"() {region} {{{entries}}} : () -> ()");
        } else {
            let _ = write!(
                out,
                "\"func.func\"() <{{{entries}}}>{}{region} : () -> ()",
                sep()
            );
        }
    } else {
        let name = if style.quoted_name {
            "\"main\""
        } else {
            "main"
        };
        let params: Vec<String> = case
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let loc = match (style.locs, i % 2) {
                    (false, _) => String::new(),
                    (true, 0) => format!(" loc(\"f.py\":{i}:1)"),
                    (true, _) => " loc(#loc1)".to_owned(),
                };
                format!("%arg{i}{}:{}{} {}{loc}", sep(), sep(), ty(p), attrs(p))
            })
            .collect();
        let _ = write!(
            out,
            "func.func {}@{name}{}({}) -> () {{{}return{}}}",
            style.visibility,
            sep(),
            params.join(&format!(",{}", sep())),
            sep(),
            sep()
        );
    }
    if !style.mesh_first {
        let _ = write!(out, "{}{mesh_decl}", sep());
    }
    let _ = write!(out, "{}}}\n#loc1 = loc(\"g.py\":2:3)\n", sep());
    out
}

fn cases() -> u64 {
    std::env::var("STACKSCAN_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3000)
}

/// Runs the reader, failing on a panic or on any error other than `Error::Signature`.
fn read_without_panic(text: &str, partitions: i64, seed: u64) -> Option<Vec<TensorType>> {
    match catch_unwind(|| Signature::read(text, partitions)) {
        Ok(Ok(sig)) => Some(sig.params),
        Ok(Err(Error::Signature { .. })) => None,
        Ok(Err(other)) => panic!("seed {seed}: not a signature error: {other:?}\n{text}"),
        Err(_) => panic!("seed {seed}: the reader panicked on\n{text}"),
    }
}

const TOKEN_POOL: [&str; 26] = [
    "(",
    ")",
    "{",
    "}",
    "<",
    ">",
    "[",
    "]",
    ",",
    "=",
    "?",
    ":",
    "\"func.func\"",
    "func.func",
    "@main",
    "tensor",
    "#sdy.sharding",
    "sdy.mesh",
    "!t",
    "#grid_alias",
    "0",
    "99999999999999999999",
    "x",
    "loc",
    "//",
    "\"",
];

const BYTE_POOL: &[u8] = b"(){}[]<>,:=?*\"#%@!^x0123456789 \n/\\-.pe";

fn mutate(text: &str, rng: &mut SplitMix64) -> String {
    if rng.one_in(2) {
        let mut tokens = Vec::new();
        let mut lexer = Lexer::new(text);
        while let Ok(t) = lexer.next_token() {
            if t.kind == Kind::Eof {
                break;
            }
            tokens.push(t.text);
        }
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(tokens.len());
            match rng.below(4) {
                _ if tokens.is_empty() => tokens.push(rng.pick(&TOKEN_POOL)),
                0 => {
                    tokens.remove(at);
                }
                1 => tokens.insert(at, tokens[at]),
                2 => {
                    let other = rng.below(tokens.len());
                    tokens.swap(at, other);
                }
                _ => tokens[at] = rng.pick(&TOKEN_POOL),
            }
        }
        return tokens.join(" ");
    }
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(bytes.len() + 1);
        let len = (1 + rng.below(8)).min(bytes.len() - at);
        match rng.below(5) {
            0 => {
                bytes.drain(at..at + len);
            }
            1 => bytes.insert(at, rng.pick(BYTE_POOL)),
            2 => {
                let copy = bytes[at..at + len].to_vec();
                bytes.splice(at..at, copy);
            }
            3 => bytes.truncate(at),
            _ => bytes.insert(at, rng.next() as u8 & 0x7f),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn random_signatures_read_back_in_every_spelling() {
    for seed in 0..cases() {
        let mut rng = SplitMix64(seed);
        let case = Case::random(&mut rng);
        for _ in 0..3 {
            let style = Style::random(&mut rng);
            let text = print(&case, &style, &mut rng);
            match Signature::read(&text, case.partitions()) {
                Ok(sig) => assert_eq!(sig.params, case.expected(), "seed {seed}\n{text}"),
                Err(e) => panic!("seed {seed}: {e}\n{text}"),
            }
        }
    }
}

#[test]
fn mutated_signatures_never_panic() {
    let (mut read, mut refused) = (0, 0);
    for seed in 0..cases() {
        let mut rng = SplitMix64(seed ^ 0x5eed);
        let case = Case::random(&mut rng);
        let style = Style::random(&mut rng);
        let text = print(&case, &style, &mut rng);
        for _ in 0..3 {
            let mutant = mutate(&text, &mut rng);
            let partitions = rng.pick(&[1, 2, 4, case.partitions()]);
            match read_without_panic(&mutant, partitions, seed) {
                Some(_) => read += 1,
                None => refused += 1,
            }
        }
    }
    // Both outcomes occur, or the mutations are too weak (or too strong) to test anything.
    assert!(read > 0 && refused > 0, "{read} read, {refused} refused");
}
