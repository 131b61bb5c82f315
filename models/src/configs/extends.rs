//! A TOML config file read over its base preset: `extends = "<preset>"` names the base (the
//! model's tiny preset when left out), and every field the file leaves out, top-level or in
//! one of the config's tables ([`ConfigFile::TABLES`]), is taken from the base before the
//! whole is deserialized, so serde's `deny_unknown_fields` still names a misspelt field and
//! no field is ever filled from anything but the base the file names.
//!
//! Two keys belong to every model rather than to its config type: `precision = "bf16"`, the
//! mixed-precision policy the file trains under ([`stackscan::Precision`]), and `no_decay =
//! ["*norm*", …]`, the weights AdamW's decay spares beyond its rule
//! ([`crate::decay`]); both are read here (from the file, else the base) and kept beside the
//! config.

use toml::{Table, Value};

use super::{ConfigFile, invalid};
use stackscan::{Precision, Result};

/// The key naming a file's base preset.
const EXTENDS: &str = "extends";
/// The key naming the precision policy, a key of every model's file.
const PRECISION: &str = "precision";
/// The key listing the weights decay spares, a key of every model's file.
const NO_DECAY: &str = "no_decay";

/// A config read from a TOML file and what its base supplied.
#[derive(Clone, Debug, PartialEq)]
pub struct Filled<C> {
    /// The config.
    pub config: C,
    /// The preset the file extends.
    pub base: &'static str,
    /// The fields taken from the base, as dotted paths (`gdn.key_dim`), in the base's order.
    pub from_base: Vec<String>,
    /// `precision = "…"` of the file (or its base), if given.
    pub precision: Option<Precision>,
    /// `no_decay = [...]` of the file (or its base): weight-name patterns; empty if none.
    pub no_decay: Vec<String>,
}

/// Parses a config file's `text` over its base; `source` names the text in errors (a path
/// or `inline`), and which fields came from the base is logged at debug level.
pub fn from_toml<C: ConfigFile>(text: &str, source: &str) -> Result<C> {
    let filled = read_toml::<C>(text, source)?;
    log_filled(&filled, source);
    Ok(filled.config)
}

/// Logs which fields of the file `source` came from its base (debug level).
pub fn log_filled<C>(filled: &Filled<C>, source: &str) {
    if filled.from_base.is_empty() {
        tracing::debug!(
            "config `{source}`: every field given (base `{}`)",
            filled.base
        );
    } else {
        tracing::debug!(
            "config `{source}`: {} fields from the base `{}`: {}",
            filled.from_base.len(),
            filled.base,
            filled.from_base.join(", ")
        );
    }
}

/// [`from_toml`] without the log line, saying which fields came from the base.
pub fn read_toml<C: ConfigFile>(text: &str, source: &str) -> Result<Filled<C>> {
    let mut file: Table = toml::from_str(text).map_err(|e| {
        let at = e
            .span()
            .map(|s| format!(" (line {})", 1 + text[..s.start].matches('\n').count()))
            .unwrap_or_default();
        invalid(format!("`{source}`{at}: {}", e.message()))
    })?;
    let base = base_of::<C>(file.remove(EXTENDS), source)?;
    let (base_name, base_text) = base;
    let mut base: Table = toml::from_str(base_text).map_err(|e| {
        invalid(format!(
            "preset `{base_name}` of `{}`: {}",
            C::MODEL,
            e.message()
        ))
    })?;
    let precision = match file.remove(PRECISION) {
        Some(v) => Some(precision_of(&v, source)?),
        None => base
            .remove(PRECISION)
            .map(|v| precision_of(&v, base_name))
            .transpose()?,
    };
    let no_decay = match file.remove(NO_DECAY) {
        Some(v) => patterns_of(&v, source)?,
        None => base
            .remove(NO_DECAY)
            .map(|v| patterns_of(&v, base_name))
            .transpose()?
            .unwrap_or_default(),
    };
    let mut from_base = Vec::new();
    fill(&mut file, &base, C::TABLES, "", &mut from_base);
    let config = serde_path_to_error::deserialize(Value::Table(file)).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        if field == "." {
            // A whole-file error (an unknown field) names its field itself.
            invalid(format!("`{source}`: {}", inner.message()))
        } else {
            invalid(format!("`{source}`: field `{field}`: {}", inner.message()))
        }
    })?;
    Ok(Filled {
        config,
        base: base_name,
        from_base,
        precision,
        no_decay,
    })
}

/// The patterns a `no_decay` value lists, or an error naming the file and the form.
fn patterns_of(v: &Value, source: &str) -> Result<Vec<String>> {
    let bad = || {
        invalid(format!(
            "`{source}`: `{NO_DECAY}` is {}, not a list of weight names such as [\"*norm*\"]",
            v.type_str()
        ))
    };
    v.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|p| p.as_str().map(str::to_owned).ok_or_else(bad))
        .collect()
}

/// The policy a `precision` value names, or an error naming the file and the choices.
fn precision_of(v: &Value, source: &str) -> Result<Precision> {
    let parsed = v.as_str().map(str::parse::<Precision>);
    match parsed {
        Some(Ok(p)) => Ok(p),
        Some(Err(e)) => Err(invalid(format!("`{source}`: {e}"))),
        None => Err(invalid(format!(
            "`{source}`: `{PRECISION}` is {}, not a string such as \"bf16\"",
            v.type_str()
        ))),
    }
}

/// The preset named by the file's `extends` value, or the tiny preset (the first).
fn base_of<C: ConfigFile>(
    extends: Option<Value>,
    source: &str,
) -> Result<(&'static str, &'static str)> {
    let names = || {
        C::preset_names()
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let name = match extends {
        None => return Ok(C::PRESETS[0]),
        Some(Value::String(name)) => name,
        Some(other) => {
            return Err(invalid(format!(
                "`{source}`: `{EXTENDS}` is {}, not a preset name; the `{}` presets are {}",
                other.type_str(),
                C::MODEL,
                names()
            )));
        }
    };
    C::PRESETS
        .iter()
        .find(|(n, _)| *n == name)
        .copied()
        .ok_or_else(|| {
            invalid(format!(
                "`{source}`: `{EXTENDS} = \"{name}\"` is not a preset of `{}`; the presets are {}",
                C::MODEL,
                names()
            ))
        })
}

/// Copies into `file` every key of `base` it lacks, recursing into the tables named in
/// `tables` (dotted paths from the top); records each copied key's path in `from_base`.
fn fill(
    file: &mut Table,
    base: &Table,
    tables: &[&str],
    prefix: &str,
    from_base: &mut Vec<String>,
) {
    for (key, value) in base {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match (file.get_mut(key), value) {
            (None, _) => {
                file.insert(key.clone(), value.clone());
                from_base.push(path);
            }
            (Some(Value::Table(given)), Value::Table(base)) if tables.contains(&path.as_str()) => {
                fill(given, base, tables, &path, from_base);
            }
            // Given whole: a value, an enum written as a table, or a wrong type that the
            // deserializer names.
            (Some(_), _) => {}
        }
    }
}
