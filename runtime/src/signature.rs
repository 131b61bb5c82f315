//! The parameter types of a StableHLO program's `main`, read from its text.
//!
//! PJRT checks argument byte sizes at best, so an `i32` array handed to an `f32` parameter of
//! the same size would run silently. Reading `main`'s signature lets `execute` reject it with
//! the parameter's index and both types. Arguments sharded with Shardy (`sdy.sharding` on a
//! `sdy.mesh`) are divided into their per-device shard shape; a form this reader does not
//! understand leaves that parameter's dimensions unchecked rather than guessing.

use std::collections::HashMap;

use stackscan::DType;

use crate::error::{Error, Result};
use stackscan::TensorType;

/// `main`'s parameters, as each device receives them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Signature {
    pub params: Vec<Param>,
}

/// One parameter of `main`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Param {
    /// Per-device type.
    pub ty: TensorType,
    /// False when a sharding annotation could not be read, so `ty.dims` are global.
    pub dims_known: bool,
}

impl Param {
    /// Whether a buffer of type `actual` can be passed for this parameter.
    pub fn matches(&self, actual: &TensorType) -> bool {
        self.ty.dtype == actual.dtype && (!self.dims_known || self.ty.dims == actual.dims)
    }
}

impl Signature {
    /// Reads the signature of `main` in `text`.
    pub fn parse(text: &str) -> Result<Signature> {
        let meshes = meshes(text);
        let start = ["func.func public @main(", "func.func @main("]
            .iter()
            .find_map(|p| text.find(p).map(|i| i + p.len()))
            .ok_or_else(|| Error::Program("no `func.func @main` in the program".into()))?;
        let body = balanced(&text[start..], ')')
            .ok_or_else(|| Error::Program("unterminated argument list of `@main`".into()))?;
        let params = split_top_level(body)
            .into_iter()
            .filter(|a| !a.trim().is_empty())
            .map(|arg| parse_param(arg, &meshes))
            .collect::<Result<_>>()?;
        Ok(Signature { params })
    }
}

fn parse_param(arg: &str, meshes: &HashMap<String, Vec<(String, i64)>>) -> Result<Param> {
    let bad = || Error::Program(format!("cannot read the `@main` argument `{}`", arg.trim()));
    let colon = arg.find(':').ok_or_else(bad)?;
    let rest = arg[colon + 1..].trim_start();
    let inner_start = rest.strip_prefix("tensor<").ok_or_else(bad)?;
    let inner = balanced(inner_start, '>').ok_or_else(bad)?;
    let ty = parse_tensor(inner).ok_or_else(bad)?;
    let attrs = &inner_start[inner.len()..];
    let Some(at) = attrs.find("#sdy.sharding<") else {
        return Ok(Param {
            dims_known: !attrs.contains("mhlo.sharding"),
            ty,
        });
    };
    let sharding = &attrs[at + "#sdy.sharding<".len()..];
    match shard_dims(sharding, &ty.dims, meshes) {
        Some(dims) => Ok(Param {
            ty: TensorType::new(ty.dtype, dims),
            dims_known: true,
        }),
        None => Ok(Param {
            ty,
            dims_known: false,
        }),
    }
}

/// `4x8xf32` → (f32, [4, 8]); `f32` → (f32, []).
fn parse_tensor(inner: &str) -> Option<TensorType> {
    let inner = inner.split(',').next()?.trim();
    let mut parts: Vec<&str> = inner.split('x').collect();
    let dtype: DType = parts.pop()?.parse().ok()?;
    let dims = parts
        .iter()
        .map(|d| d.parse::<i64>().ok())
        .collect::<Option<Vec<_>>>()?;
    Some(TensorType::new(dtype, dims))
}

/// Per-device dims from `@mesh, [{"x"}, {}]...` (the text after `#sdy.sharding<`).
fn shard_dims(
    sharding: &str,
    global: &[i64],
    meshes: &HashMap<String, Vec<(String, i64)>>,
) -> Option<Vec<i64>> {
    let sharding = sharding.trim_start().strip_prefix('@')?;
    let comma = sharding.find(',')?;
    let mesh = meshes.get(sharding[..comma].trim())?;
    let list = sharding[comma + 1..].trim_start().strip_prefix('[')?;
    let list = balanced(list, ']')?;
    let entries: Vec<&str> = split_top_level(list)
        .into_iter()
        .filter(|e| !e.trim().is_empty())
        .collect();
    if entries.len() != global.len() {
        return None;
    }
    global
        .iter()
        .zip(entries)
        .map(|(&dim, entry)| {
            let axes = entry.trim().strip_prefix('{')?.strip_suffix('}')?;
            let mut divisor = 1;
            for axis in axes.split(',').map(str::trim).filter(|a| !a.is_empty()) {
                let name = axis.strip_prefix('"')?.strip_suffix('"')?;
                divisor *= mesh.iter().find(|(n, _)| n == name)?.1;
            }
            (divisor > 0 && dim % divisor == 0).then_some(dim / divisor)
        })
        .collect()
}

/// `sdy.mesh @name = <["x"=4, "y"=2]>` declarations.
fn meshes(text: &str) -> HashMap<String, Vec<(String, i64)>> {
    let mut out = HashMap::new();
    let mut rest = text;
    while let Some(at) = rest.find("sdy.mesh @") {
        rest = &rest[at + "sdy.mesh @".len()..];
        let Some(eq) = rest.find('=') else { break };
        let name = rest[..eq].trim().to_owned();
        let Some(open) = rest.find("<[") else { break };
        let Some(axes) = balanced(&rest[open + 2..], ']') else {
            break;
        };
        let parsed: Option<Vec<(String, i64)>> = split_top_level(axes)
            .into_iter()
            .filter(|a| !a.trim().is_empty())
            .map(|a| {
                let (n, s) = a.split_once('=')?;
                Some((
                    n.trim().trim_matches('"').to_owned(),
                    s.trim().parse().ok()?,
                ))
            })
            .collect();
        if let Some(axes) = parsed {
            out.insert(name, axes);
        }
    }
    out
}

/// The prefix of `s` before the `close` that balances an already-consumed opener, skipping
/// nested brackets and string literals.
fn balanced(s: &str, close: char) -> Option<&str> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut prev = '\0';
    for (i, c) in s.char_indices() {
        if in_string {
            if c == '"' && prev != '\\' {
                in_string = false;
            }
        } else if c == close && depth == 0 {
            return Some(&s[..i]);
        } else {
            match c {
                '"' => in_string = true,
                '(' | '[' | '{' | '<' => depth += 1,
                ')' | ']' | '}' | '>' if prev != '-' => depth = depth.checked_sub(1)?,
                _ => {}
            }
        }
        prev = c;
    }
    None
}

/// Splits at commas outside brackets and strings.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut in_string = false;
    let mut prev = '\0';
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if in_string {
            if c == '"' && prev != '\\' {
                in_string = false;
            }
        } else {
            match c {
                '"' => in_string = true,
                '(' | '[' | '{' | '<' => depth += 1,
                ')' | ']' | '}' | '>' if prev != '-' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        prev = c;
    }
    out.push(&s[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(sig: &Signature) -> Vec<(DType, Vec<i64>, bool)> {
        sig.params
            .iter()
            .map(|p| (p.ty.dtype, p.ty.dims.clone(), p.dims_known))
            .collect()
    }

    #[test]
    fn plain_arguments() {
        let sig = Signature::parse(
            "module { func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<i32>) -> tensor<2x3xf32> { } }",
        )
        .unwrap();
        assert_eq!(
            dims(&sig),
            vec![(DType::F32, vec![2, 3], true), (DType::I32, vec![], true)]
        );
    }

    #[test]
    fn shardy_arguments_are_divided_per_device() {
        let text = r#"module @m attributes {mhlo.num_partitions = 4 : i32} {
  sdy.mesh @mesh = <["fsdp"=4]>
  func.func public @main(%arg0: tensor<8x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"fsdp"}, {}]>}, %arg1: tensor<5xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> (tensor<8x3xf32>) {
  }
}"#;
        let sig = Signature::parse(text).unwrap();
        assert_eq!(
            dims(&sig),
            vec![(DType::F32, vec![2, 3], true), (DType::BF16, vec![5], true)]
        );
    }

    #[test]
    fn unknown_sharding_leaves_dims_unchecked() {
        let text = r#"func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@other, [{"x"}]>}) -> tensor<8xf32>"#;
        let sig = Signature::parse(text).unwrap();
        assert_eq!(dims(&sig), vec![(DType::F32, vec![8], false)]);
        assert!(sig.params[0].matches(&TensorType::new(DType::F32, vec![2])));
        assert!(!sig.params[0].matches(&TensorType::new(DType::I32, vec![2])));
    }

    #[test]
    fn missing_main_is_an_error() {
        assert!(matches!(
            Signature::parse("module {}"),
            Err(Error::Program(m)) if m.contains("@main")
        ));
    }
}
