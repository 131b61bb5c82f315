//! The CPU plugins the tests run on: the default one loaded once per test binary, clients of
//! it with virtual devices, and the newer plugin where it is present.

use std::sync::OnceLock;

use crate::{Client, ClientOptions, CompileCache, OverrideValue, Plugin, plugin};

/// The default CPU plugin (fetched into the cache on first use), with the tests' compile
/// options ([`TEST_XLA_OPTIONS_ENV`]) for every client made from it.
pub fn cpu_plugin() -> Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN
        .get_or_init(|| {
            let path = plugin::resolve("cpu").expect("resolve the cpu plugin");
            Plugin::load(path)
                .expect("load the cpu plugin")
                .with_xla_options(test_xla_options(Tested::Default))
        })
        .clone()
}

/// A client of the default CPU plugin with `devices` virtual devices, compiling with the
/// tests' options ([`TEST_XLA_OPTIONS_ENV`]).
pub fn cpu_client(devices: usize) -> Client {
    Client::new(&cpu_plugin(), &ClientOptions::cpu(devices)).expect("create a cpu client")
}

/// XLA's default backend optimization level (`DebugOptions`' default).
const XLA_DEFAULT_OPTIMIZATION_LEVEL: i64 = 3;

/// A client of the default CPU plugin that compiles at XLA's default backend optimization
/// level whatever the tests' options say, for the tests whose time is their hundreds of
/// steps rather than their compiles: there the machine code's speed outweighs the longer
/// compile (the commit that introduced it gives the figures). It takes none of
/// the other test options (they are for level 0); `XLA_FLAGS` still applies.
pub fn step_bound_cpu_client(devices: usize) -> Client {
    cpu_client(devices).with_xla_options(vec![(
        "xla_backend_optimization_level".to_owned(),
        OverrideValue::Int(XLA_DEFAULT_OPTIMIZATION_LEVEL),
    )])
}

/// Environment variable of the XLA `DebugOptions` the test clients of both CPU plugins
/// compile with ([`cpu_plugin`], [`newer_cpu_plugin`]): `name=value` pairs separated by white
/// space, a value `true` or `false` a boolean field, an integer an integer field, another
/// number a floating-point one, anything else a string. Set and empty, the tests compile as
/// the product does (XLA's own optimization level); a list replaces the defaults, and must
/// name options both plugins know.
///
/// Unset, the tests choose for themselves: the lowest backend optimization level and no
/// expensive LLVM passes (most of the suite's time is XLA compiling small programs that then
/// run a few steps; the programs and results are the same, the machine code less
/// optimized), and on the default plugin its older elemental emitter
/// (`xla_cpu_use_fusion_emitters=false`, half the compile time again at that level; the
/// newer plugin does not know the option). The few tests whose time is their steps ask for
/// the product's level themselves ([`step_bound_cpu_client`]).
pub const TEST_XLA_OPTIONS_ENV: &str = "STACKSCAN_TEST_XLA_OPTIONS";

/// Which CPU plugin a test client is of, for its default options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tested {
    /// `xla-cpu-pjrt` 0.0.1.
    Default,
    /// The newer plugin (PJRT API 0.115).
    Newer,
}

/// The tests' compile options for `plugin`: [`TEST_XLA_OPTIONS_ENV`]'s, or the defaults it
/// describes when it is unset.
fn test_xla_options(plugin: Tested) -> Vec<(String, OverrideValue)> {
    if let Ok(value) = std::env::var(TEST_XLA_OPTIONS_ENV) {
        return parse_xla_options(&value)
            .unwrap_or_else(|why| panic!("{TEST_XLA_OPTIONS_ENV}: {why}"));
    }
    let mut options = vec![
        (
            "xla_backend_optimization_level".to_owned(),
            OverrideValue::Int(0),
        ),
        (
            "xla_llvm_disable_expensive_passes".to_owned(),
            OverrideValue::Bool(true),
        ),
    ];
    if plugin == Tested::Default {
        options.push((
            "xla_cpu_use_fusion_emitters".to_owned(),
            OverrideValue::Bool(false),
        ));
    }
    options
}

/// The `XLA_FLAGS` a test gives a binary it runs (a command-line run of the default plugin),
/// for the compile options [`cpu_plugin`]'s clients use: `None` when [`TEST_XLA_OPTIONS_ENV`]
/// is set (the binary then compiles as the product does). Options a binary's plugin takes
/// from its environment only; the elemental emitter's is left out, as the newer plugin aborts
/// on a flag it does not know.
pub fn binary_xla_flags() -> Option<String> {
    if std::env::var_os(TEST_XLA_OPTIONS_ENV).is_some() {
        return None;
    }
    let ours = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true";
    Some(match std::env::var("XLA_FLAGS") {
        Ok(user) if !user.trim().is_empty() => format!("{ours} {user}"),
        _ => ours.to_owned(),
    })
}

/// `name=value` pairs separated by white space, as [`TEST_XLA_OPTIONS_ENV`] holds them.
fn parse_xla_options(value: &str) -> Result<Vec<(String, OverrideValue)>, String> {
    value
        .split_whitespace()
        .map(|pair| {
            let (name, value) = pair
                .split_once('=')
                .filter(|(name, _)| !name.is_empty())
                .ok_or_else(|| format!("`{pair}` is not `name=value`"))?;
            let value = match value {
                "true" => OverrideValue::Bool(true),
                "false" => OverrideValue::Bool(false),
                v => match (v.parse(), v.parse()) {
                    (Ok(i), _) => OverrideValue::Int(i),
                    (_, Ok(x)) => OverrideValue::Double(x),
                    _ => OverrideValue::String(v.to_owned()),
                },
            };
            Ok((name.to_owned(), value))
        })
        .collect()
}

/// A [`cpu_client`] that compiles through a persistent compile cache in
/// `<target_tmp>/compile-cache` (pass the test's `env!("CARGO_TARGET_TMPDIR")`), so a program
/// that a test binary builds many times, one trainer per test or per fixture, is compiled once
/// and loaded after that. Most of the test suite's time is XLA compiling; the checkpoint
/// tests alone built one program 44 times. The cache's key is everything that decides the
/// executable (see [`compile_cache`](crate::compile_cache)), so a loaded one runs the same
/// machine code. For tests of what a program computes; a test of the compile itself (its
/// time, outcome, memory or optimized module) uses [`cpu_client`]. Nothing prunes the
/// directory; `cargo clean` removes it with the rest of the target.
pub fn cached_cpu_client(devices: usize, target_tmp: &str) -> Client {
    let dir = std::path::Path::new(target_tmp).join("compile-cache");
    cpu_client(devices).with_compile_cache(Some(CompileCache::new(dir)))
}

/// The newer CPU plugin (PJRT API 0.115), with the tests' compile options
/// ([`TEST_XLA_OPTIONS_ENV`]) for every client made from it, when its wheel is already in the cache or
/// `STACKSCAN_CPU_0115_PLUGIN` names its library; otherwise why a test of it is skipped, for
/// the test to print (a library prints nothing). `.ci/run` fetches it, so CI always runs
/// these tests.
pub fn newer_cpu_plugin() -> Result<Plugin, String> {
    let path = match std::env::var_os("STACKSCAN_CPU_0115_PLUGIN") {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let package = plugin::CPU_0115;
            match plugin::ensure_installed(&package, &plugin::cache_dir(), false) {
                Ok(dir) => dir.join(package.library),
                Err(e) => return Err(format!("the cpu-0.115 plugin is not present ({e})")),
            }
        }
    };
    let plugin = Plugin::load(&path).expect("load the cpu-0.115 plugin");
    assert_eq!(plugin.api_version(), (0, 115));
    Ok(plugin.with_xla_options(test_xla_options(Tested::Newer)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xla_options_parse_by_their_values() {
        let parsed = parse_xla_options(" a=true  b=false\tc=3 d=x,y e=0.5 ").unwrap();
        let expected = [
            ("a", OverrideValue::Bool(true)),
            ("b", OverrideValue::Bool(false)),
            ("c", OverrideValue::Int(3)),
            ("d", OverrideValue::String("x,y".into())),
            ("e", OverrideValue::Double(0.5)),
        ]
        .map(|(name, value)| (name.to_owned(), value));
        assert_eq!(parsed, expected);
        assert!(parse_xla_options("").unwrap().is_empty());
        for bad in ["flag", "=1", "a=1 b"] {
            assert!(parse_xla_options(bad).is_err(), "{bad}");
        }
    }
}
