//! The persistent compile cache: a second compile of one program is a hit and runs the same,
//! a damaged entry is never trusted (recompiled and replaced), other options or another
//! program get another entry, and concurrent writers of one entry leave a whole one.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::path::PathBuf;

use stackscan_runtime::compile_cache::{compiler_environment, key, key_in};
use stackscan_runtime::testing as common;
use stackscan_runtime::{
    CacheOutcome, Client, ClientOptions, CompileCache, CompileOptions, OverrideValue, Plugin,
};

const PROGRAM: &str = r#"
func.func public @main(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
  %y = stablehlo.multiply %x, %w : tensor<4xf32>
  %z = stablehlo.exponential %y : tensor<4xf32>
  return %z : tensor<4xf32>
}"#;

/// A fresh directory of this test's own, so tests never share entries.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stackscan-cc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `PROGRAM` compiled by `client` with `options` on device `device`.
fn run(client: &Client, options: &CompileOptions, device: usize) -> (Vec<f32>, CacheOutcome) {
    let exe = client.compile(PROGRAM, options).unwrap();
    let dev = &client.devices()[device];
    let x = client
        .buffer(&[0.5f32, -1.0, 2.0, 0.25], &[4], dev)
        .unwrap();
    let w = client.buffer(&[1.0f32, 3.0, -0.5, 8.0], &[4], dev).unwrap();
    let out = exe.execute(&[[&x, &w]]).unwrap();
    (
        out[0][0].to_host::<f32>().unwrap(),
        exe.cache_outcome().clone(),
    )
}

fn check_hit_and_corruption(plugin: &Plugin, name: &str) {
    let dir = fresh_dir(name);
    let cache = CompileCache::new(&dir);
    let client = Client::new(plugin, &ClientOptions::cpu(2))
        .unwrap()
        .with_compile_cache(Some(cache.clone()));
    let options = CompileOptions::replicas(&[0]).unwrap();
    let uncached = Client::new(plugin, &ClientOptions::cpu(2)).unwrap();
    let (reference, outcome) = run(&uncached, &options, 0);
    assert_eq!(outcome, CacheOutcome::Off);

    let (first, outcome) = run(&client, &options, 0);
    assert_eq!(outcome, CacheOutcome::Miss);
    assert_eq!(first, reference);
    let entry = cache.entry_path(&key(&client, PROGRAM, &options));
    assert!(entry.is_file(), "no entry at {}", entry.display());
    let (second, outcome) = run(&client, &options, 0);
    assert_eq!(outcome, CacheOutcome::Hit);
    assert_eq!(
        second, reference,
        "a loaded executable computes what a compiled one does"
    );

    // One flipped byte in the executable: the checksum refuses it, it is compiled again and
    // the entry rewritten, so the next compile is a hit again.
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2 + 40;
    bytes[middle] ^= 0x40;
    std::fs::write(&entry, &bytes).unwrap();
    let (third, outcome) = run(&client, &options, 0);
    assert!(
        matches!(&outcome, CacheOutcome::Replaced(r) if r.starts_with("checksum mismatch")),
        "{outcome:?}"
    );
    assert_eq!(third, reference);
    assert_eq!(run(&client, &options, 0).1, CacheOutcome::Hit);

    // Cut short (a crash mid-copy, a full disk): the same.
    let whole = std::fs::read(&entry).unwrap();
    std::fs::write(&entry, &whole[..whole.len() / 3]).unwrap();
    let (fourth, outcome) = run(&client, &options, 0);
    assert!(
        matches!(&outcome, CacheOutcome::Replaced(r) if r.starts_with("truncated")),
        "{outcome:?}"
    );
    assert_eq!(fourth, reference);

    // Other options (another device) or another program: other keys, compiled afresh.
    let other = CompileOptions::replicas(&[client.devices()[1].id]).unwrap();
    assert_ne!(
        key(&client, PROGRAM, &options),
        key(&client, PROGRAM, &other)
    );
    let (on_other, outcome) = run(&client, &other, 1);
    assert_eq!(outcome, CacheOutcome::Miss);
    assert_eq!(on_other, reference);
    let renamed = PROGRAM.replace("%z", "%e");
    assert_ne!(
        key(&client, PROGRAM, &options),
        key(&client, &renamed, &options)
    );
    // Compiler flags from the environment (XLA_FLAGS, LIBTPU_INIT_ARGS) change the
    // executable: another value is another key, and the key is this process's.
    let here = compiler_environment();
    assert!(
        here.contains("XLA_FLAGS=") && here.contains("LIBTPU_INIT_ARGS="),
        "{here}"
    );
    assert_eq!(
        key(&client, PROGRAM, &options),
        key_in(&client, PROGRAM, &options, &here)
    );
    let flagged = format!("{here}extra\n").replace(
        "XLA_FLAGS=",
        "XLA_FLAGS=--xla_backend_optimization_level=1 ",
    );
    assert_ne!(
        key_in(&client, PROGRAM, &options, &here),
        key_in(&client, PROGRAM, &options, &flagged)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_compile_is_a_hit_and_damage_is_recompiled() {
    check_hit_and_corruption(&common::cpu_plugin(), "cpu");
}

#[test]
fn the_newer_plugin_caches_too() {
    if let Ok(plugin) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}")) {
        check_hit_and_corruption(&plugin, "cpu-0115");
    }
}

/// Two plugins, one program: their keys differ, so neither loads the other's executable.
#[test]
fn each_plugin_has_its_own_keys() {
    let Ok(newer) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}"))
    else {
        return;
    };
    let options = CompileOptions::default();
    let a = common::cpu_client(1);
    let b = Client::new(&newer, &ClientOptions::cpu(1)).unwrap();
    assert_ne!(key(&a, PROGRAM, &options), key(&b, PROGRAM, &options));
}

/// A client's own XLA options reach its compiles and its cache keys, and no other client's:
/// a boolean option XLA knows compiles a program that computes the same, an option it does
/// not know is refused with an error naming it (not the abort `XLA_FLAGS` gives).
#[test]
fn a_clients_xla_options_reach_its_compiles_and_keys() {
    let options = CompileOptions::default();
    // The test plugin's handle carries the tests' options; a handle without any makes
    // clients without any, and a client's own options replace its plugin's.
    let bare = common::cpu_plugin().with_xla_options(Vec::new());
    let plain = Client::new(&bare, &ClientOptions::cpu(1)).unwrap();
    let off = vec![(
        "xla_cpu_use_fusion_emitters".to_owned(),
        OverrideValue::Bool(false),
    )];
    let tuned = plain.clone().with_xla_options(off.clone());
    assert!(plain.xla_options().is_empty());
    assert_eq!(tuned.xla_options(), off.as_slice());
    let from_plugin = Client::new(&bare.with_xla_options(off.clone()), &ClientOptions::cpu(1));
    assert_eq!(from_plugin.unwrap().xla_options(), off.as_slice());
    assert_eq!(
        common::cpu_client(1).xla_options(),
        common::cpu_plugin().xla_options()
    );
    assert_ne!(
        key(&plain, PROGRAM, &options),
        key(&tuned, PROGRAM, &options)
    );
    // Through one cache: the tuned client stores its own entry, under its own key, and the
    // plain client does not load it.
    let dir = fresh_dir("xla-options");
    let cache = CompileCache::new(&dir);
    let tuned = tuned.with_compile_cache(Some(cache.clone()));
    let plain = plain.with_compile_cache(Some(cache.clone()));
    let (got, outcome) = run(&tuned, &options, 0);
    assert_eq!(outcome, CacheOutcome::Miss);
    assert!(cache.entry_path(&key(&tuned, PROGRAM, &options)).exists());
    let (want, outcome) = run(&plain, &options, 0);
    assert_eq!(outcome, CacheOutcome::Miss);
    assert_eq!(want.len(), got.len());
    for (a, b) in want.iter().zip(&got) {
        assert!((a - b).abs() <= 1e-6 * a.abs(), "{want:?} against {got:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let unknown = plain.with_xla_options(vec![(
        "xla_no_such_option_anywhere".to_owned(),
        OverrideValue::Bool(true),
    )]);
    let err = unknown.compile(PROGRAM, &options).unwrap_err().to_string();
    assert!(err.contains("xla_no_such_option_anywhere"), "{err}");
}

/// The option the default plugin's test clients take is one the newer plugin does not know:
/// through a client it is refused with an error naming it (through `XLA_FLAGS` the plugin
/// aborts the process), which is why the tests set it per plugin and not in `XLA_FLAGS`.
#[test]
fn the_newer_plugin_refuses_the_fusion_emitter_option() {
    let Ok(newer) = common::newer_cpu_plugin().inspect_err(|why| eprintln!("skipped: {why}"))
    else {
        return;
    };
    let client = Client::new(&newer, &ClientOptions::cpu(1))
        .unwrap()
        .with_xla_options(vec![(
            "xla_cpu_use_fusion_emitters".to_owned(),
            OverrideValue::Bool(false),
        )]);
    let err = client
        .compile(PROGRAM, &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("xla_cpu_use_fusion_emitters"), "{err}");
}

/// A compile's own override of a field wins over the client's option for it: the key is the
/// one of the compile's value alone.
#[test]
fn a_compiles_own_override_wins_over_the_clients() {
    let plain = Client::new(&common::cpu_plugin(), &ClientOptions::cpu(1))
        .unwrap()
        .with_xla_options(Vec::new());
    let name = "xla_cpu_use_fusion_emitters";
    let tuned = plain
        .clone()
        .with_xla_options(vec![(name.to_owned(), OverrideValue::Bool(false))]);
    let own = CompileOptions::default().with_override(name, OverrideValue::Bool(true));
    assert_eq!(key(&tuned, PROGRAM, &own), key(&plain, PROGRAM, &own));
    assert_ne!(
        key(&tuned, PROGRAM, &CompileOptions::default()),
        key(&plain, PROGRAM, &CompileOptions::default())
    );
}

/// Threads compiling one program into one directory at once all get a working executable
/// and leave one whole entry (each writes its own temporary and renames it into place).
#[test]
fn concurrent_writers_leave_a_whole_entry() {
    let dir = fresh_dir("concurrent");
    let cache = CompileCache::new(&dir);
    let client = common::cpu_client(1).with_compile_cache(Some(cache.clone()));
    let options = CompileOptions::default();
    let results: Vec<(Vec<f32>, CacheOutcome)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| run(&client, &options, 0)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (values, outcome) in &results {
        assert_eq!(values, &results[0].0);
        assert!(
            matches!(outcome, CacheOutcome::Miss | CacheOutcome::Hit),
            "{outcome:?}"
        );
    }
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files.len(), 1, "temporaries left behind: {files:?}");
    assert_eq!(run(&client, &options, 0).1, CacheOutcome::Hit);
    let _ = std::fs::remove_dir_all(&dir);
}
