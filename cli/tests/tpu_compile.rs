//! `compile-report --topology`: the tiny Llama step compiled by libtpu for a TPU7x slice on
//! this machine (no TPU), and the prefetch read from the TPU program's own schedule.
//!
//! With prefetch on, a step's loop body issues the next layer's gathers before its own
//! products: in the loops that hold one layer and prefetch the next (the odd first step, the
//! backward's first layer), every gather is in flight across all of the layer's products,
//! and every deferred reduce-scatter of the backward overlaps the next layer's products.
//! With prefetch off, a layer's gathers are used by that layer: no gather spans a whole loop
//! body's products. The plan reaches libtpu as a trainer on the TPU plugin lowers it:
//! prefetch gathers tagged `xla_explicit_fsdp`, no scheduling groups (which libtpu refuses).

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

#[allow(dead_code, reason = "the shared runners; this file needs only some")]
mod common;

use serde_json::Value;
use std::process::Output;

/// `compile-report` with `args`, compiled by libtpu as a user's run would be: without the
/// CPU tests' `XLA_FLAGS` (libtpu reads them too, and they would move its schedule).
fn compile_report(args: &[&str]) -> Output {
    common::command("compile-report", args)
        .env_remove("XLA_FLAGS")
        .env("TF_CPP_MIN_LOG_LEVEL", "1")
        .output()
        .expect("start the binary")
}

/// The report of `compile-report --model llama --topology tpu7x:2x2x1 --json` with `extra`.
fn report(extra: &[&str]) -> Value {
    report_on("tpu7x:2x2x1", extra)
}

/// The report of `compile-report --model llama --topology TOPOLOGY --json` with `extra`.
fn report_on(topology: &str, extra: &[&str]) -> Value {
    model_report("llama", topology, extra)
}

/// The report of `compile-report --model MODEL --topology TOPOLOGY --json` with `extra`.
fn model_report(model: &str, topology: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--model", model, "--topology", topology, "--json"];
    args.extend(extra);
    let out = compile_report(&args);
    assert!(
        out.status.success(),
        "compile-report {}: {:?}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the report is JSON")
}

/// `(label, products, gathers, scatters)` of each loop of a report.
fn loops(report: &Value) -> Vec<(String, u64, Value, Value)> {
    report["tpu"]["loops"]
        .as_array()
        .expect("loops")
        .iter()
        .map(|l| {
            (
                l["label"].as_str().expect("label").to_owned(),
                l["products"].as_u64().expect("products"),
                l["gathers"].clone(),
                l["scatters"].clone(),
            )
        })
        .collect()
}

fn n(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no `{key}` in {v}"))
}

#[test]
fn the_tpu_program_shows_the_prefetch_when_on() {
    let r = report(&[]);
    let options = r["options"].as_str().expect("options");
    assert!(options.contains("scheduling_groups=false"), "{options}");
    assert!(options.contains("prefetch_issue=with-input"), "{options}");
    let tpu = &r["tpu"];
    assert_eq!(tpu["device_kind"], "TPU7x");
    assert_eq!(tpu["slice_devices"], 8);
    assert!(n(tpu, "hbm_bytes") > 80 << 30, "{tpu}");
    assert!(n(tpu, "headroom") > 0, "the tiny step fits: {tpu}");
    let loops = loops(&r);
    let mut whole_layer = 0;
    for (label, products, gathers, scatters) in &loops {
        // Every gather and every reduce-scatter runs asynchronously on the TPU, and every
        // gather of a loop body is a prefetch whose tag the compiler kept.
        assert_eq!(n(gathers, "asynchronous"), n(gathers, "count"), "{label}");
        assert_eq!(n(gathers, "explicit_fsdp"), n(gathers, "count"), "{label}");
        assert_eq!(n(scatters, "asynchronous"), n(scatters, "count"), "{label}");
        // A loop body of one layer that gathers prefetches the next: in flight across all
        // of this layer's products.
        let one_layer = label.contains("peeled") || label.contains("odd first step");
        if one_layer && n(gathers, "count") > 0 {
            assert_eq!(n(gathers, "min_span"), *products, "{label}: {gathers}");
            whole_layer += 1;
        }
        // The deferred reduce-scatters overlap the next layer's products.
        if n(scatters, "count") > 0 {
            assert_eq!(n(scatters, "overlapping"), n(scatters, "count"), "{label}");
        }
    }
    assert!(whole_layer >= 2, "no prefetching one-layer loop: {loops:?}");
    timeline_of_the_compiled_program(&r);
}

/// `timeline --compiled` on the report `r`: each pass replayed in the order libtpu scheduled
/// it, beside the simulated timeline of the same schedule, every loop of the plan found in
/// the program.
fn timeline_of_the_compiled_program(r: &Value) {
    let dir = std::env::temp_dir().join(format!("stackscan-tpu-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.json");
    std::fs::write(&report, serde_json::to_vec(r).unwrap()).unwrap();
    let out = common::command(
        "timeline",
        &[
            "--model",
            "llama",
            "--config",
            "tiny",
            "--chips",
            "4",
            "--compiled",
            report.to_str().unwrap(),
            "--out",
            dir.join("out").to_str().unwrap(),
        ],
    )
    .output()
    .expect("start the binary");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("prefetch on as libtpu scheduled it for tpu7x:2x2x1"),
        "{text}"
    );
    assert!(dir.join("out/backward-compiled-on.svg").exists());
    let schedule: Value =
        serde_json::from_slice(&std::fs::read(dir.join("out/schedule.json")).unwrap()).unwrap();
    let compiled = &schedule["compiled"][0];
    for pass in ["forward", "backward"] {
        let total = compiled[pass]["total_seconds"].as_f64().unwrap();
        let compute = compiled[pass]["compute_seconds"].as_f64().unwrap();
        let simulated = compiled["simulated"][pass]["compute_seconds"]
            .as_f64()
            .unwrap();
        // The same layers computed, however the collectives fall around them.
        assert!(
            (compute - simulated).abs() <= 1e-9 * simulated,
            "{pass}: {compiled}"
        );
        assert!(total >= compute, "{pass}: {compiled}");
        assert!(
            !compiled[format!("{pass}_loops")]
                .as_array()
                .unwrap()
                .is_empty()
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Over a 128-device slice libtpu would gather by all-reducing each device's shard written
/// into zeros, synchronously for an f32 step: stackscan turns that rewrite off on TPU, so
/// every prefetch gather stays an asynchronous all-gather in flight across the layer before
/// it. Its reduce-scatters it still makes by all-reducing and slicing; the report counts
/// those all-reduces as the scatters they are, in the loops that issue them.
#[test]
fn over_a_whole_large_slice_the_prefetch_gathers_stay_asynchronous() {
    let r = report_on("tpu7x:4x4x4", &[]);
    let tpu = &r["tpu"];
    assert_eq!(tpu["slice_devices"], 128);
    assert_eq!(tpu["gathers_decomposed"], false);
    let rows = tpu["collectives"].as_array().expect("collectives");
    let count = |kind: &str, of: Option<&str>| -> u64 {
        rows.iter()
            .filter(|c| c["kind"] == kind && c["stands_for"].as_str() == of)
            .map(|c| n(c, "count"))
            .sum()
    };
    assert!(count("all-gather", None) > 0, "{rows:?}");
    assert_eq!(count("all-reduce", Some("all-gather")), 0, "{rows:?}");
    assert!(count("all-reduce", Some("reduce-scatter")) > 0, "{rows:?}");
    let loops = loops(&r);
    let scatters: u64 = loops.iter().map(|l| n(&l.3, "count")).sum();
    assert!(scatters > 0, "{loops:?}");
    for (label, products, g, _) in &loops {
        assert_eq!(n(g, "asynchronous"), n(g, "count"), "{label}: {g}");
        // Every forward loop but the last layer's prefetches (the last has no next), and a
        // loop of one layer holds its gathers in flight across all of its products.
        if label.starts_with("forward") && !label.contains("layer 3") {
            assert!(n(g, "count") > 0, "{label}: no gather counted: {g}");
        }
        if label.contains("odd first step") {
            assert_eq!(n(g, "min_span"), *products, "{label}: {g}");
        }
    }
}

/// The most temporary bytes live at once (`--dump`: libtpu's buffer assignment) of the tiny
/// Llama's step with `extra`, and the allocation they were packed in.
fn live_peak(extra: &[&str]) -> (u64, u64) {
    let dir = dump_dir(&extra.join(""));
    let mut args = extra.to_vec();
    args.extend(["--dump", dir.to_str().unwrap()]);
    let r = report(&args);
    let _ = std::fs::remove_dir_all(&dir);
    let p = &r["tpu"]["live_peak"];
    (n(p, "bytes"), n(p, "allocation"))
}

/// A fresh directory for one compile's dump.
fn dump_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "stackscan-tpu-dump-{}-{}",
        std::process::id(),
        tag.replace('-', "")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// What the plan holds, the program holds: prefetch keeps one more gathered layer live at
/// once, and deferral one more layer's unreduced gradient, read from libtpu's buffer
/// assignment rather than its allocation (which packs the same values its own way, and at
/// this size grows by more than it holds). Seven layers' expert weights once lived at once
/// in a prefetching step (docs/tpu.md); a regression of that kind is far outside the bound.
#[test]
fn the_prefetch_holds_one_more_layer_at_once() {
    use stackscan_models::registry::Architecture;
    let (m, _) = stackscan_models::llama::LlamaConfig::tiny()
        .build()
        .unwrap();
    // One layer's weights, gathered in f32 (the tiny step's precision), and its gradient.
    let layer: u64 = m.kinds[0]
        .params
        .iter()
        .map(|p| 4 * p.shape.iter().product::<i64>() as u64)
        .sum();
    let off = live_peak(&["--no-prefetch"]);
    let on = live_peak(&["--no-defer"]);
    let deferred = live_peak(&[]);
    eprintln!(
        "one layer {layer} B; live at once / allocated: off {off:?}, on {on:?}, deferred {deferred:?}"
    );
    for (bytes, allocation) in [off, on, deferred] {
        assert!(bytes > 0 && bytes <= allocation);
    }
    assert!(on.0 <= off.0 + layer, "on {on:?} against off {off:?}");
    assert!(
        deferred.0 <= off.0 + 2 * layer,
        "deferred {deferred:?} against off {off:?}"
    );
}

#[test]
fn no_gather_spans_a_whole_layer_when_prefetch_is_off() {
    let r = report(&["--no-prefetch"]);
    let loops = loops(&r);
    assert!(!loops.is_empty());
    for (label, products, gathers, _) in &loops {
        assert!(
            n(gathers, "max_span") < *products,
            "{label}: a gather spans all {products} products: {gathers}"
        );
        assert_eq!(
            n(gathers, "explicit_fsdp"),
            0,
            "{label}: nothing is prefetched"
        );
    }
}

#[test]
fn an_unknown_topology_is_refused_with_the_known_forms() {
    let args = ["--model", "llama", "--topology", "tpu9:2x2"];
    let out = compile_report(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shown = format!("{:?}: {stderr}", out.status);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    // The tests keep the plugins' own log (TF_CPP_MIN_LOG_LEVEL is theirs), so libtpu's
    // notices come too; a user's run drops them (`xla_log::alarm`).
    let own: Vec<&str> = stderr
        .lines()
        .filter(|l| !stackscan_runtime::xla_log::alarm::is_libtpu_notice(l.as_bytes()))
        .collect();
    assert_eq!(own.len(), 1, "{shown}");
    assert!(
        own[0].starts_with("error: unknown topology `tpu9:2x2`"),
        "{shown}"
    );
    assert!(own[0].contains("tpu7x:AxBxC"), "{shown}");
}

#[test]
fn the_mesh_of_a_topology_is_the_slice() {
    common::fails(
        "compile-report",
        &["--topology", "tpu7x:2x2x1", "--devices", "8"],
        2,
        &["--topology", "--devices"],
    );
}

/// The tiny DeepSeek-V3 (dense layers, then MoE layers) and Qwen3.5 (GDN blocks nested in a
/// block loop) compiled with prefetch on + deferred: every loop that gathers keeps each
/// gather asynchronous across at least one product and tagged as a prefetch, and each
/// backward loop's deferred reduce-scatters overlap its products (the pass's last loop, which
/// runs layer 0, may scatter its own gradient after them).
fn the_prefetch_as_compiled(model: &str) {
    let on = loops(&model_report(model, "tpu7x:2x2x1", &[]));
    let gathering = on.iter().filter(|l| n(&l.2, "count") > 0).count();
    assert!(gathering >= 4, "{model}: too few loops gather: {on:?}");
    let runs_layer_0 = |label: &str| label.contains("layer 0,") || label.contains("–0,");
    for (label, _, gathers, scatters) in &on {
        let all = n(gathers, "count");
        assert_eq!(
            n(gathers, "asynchronous"),
            all,
            "{model} {label}: {gathers}"
        );
        assert_eq!(n(gathers, "overlapping"), all, "{model} {label}: {gathers}");
        assert_eq!(
            n(gathers, "explicit_fsdp"),
            all,
            "{model} {label}: {gathers}"
        );
        let all = n(scatters, "count");
        assert_eq!(
            n(scatters, "asynchronous"),
            all,
            "{model} {label}: {scatters}"
        );
        if all > 0 && !runs_layer_0(label) {
            assert_eq!(
                n(scatters, "overlapping"),
                all,
                "{model} {label}: {scatters}"
            );
        }
    }
}

/// The same models without prefetch: no gather spans a whole loop body, and none is tagged.
fn no_prefetch_as_compiled(model: &str) {
    let off = loops(&model_report(model, "tpu7x:2x2x1", &["--no-prefetch"]));
    assert!(off.iter().any(|l| n(&l.2, "count") > 0), "{model}: {off:?}");
    for (label, products, gathers, _) in &off {
        if *products > 0 && n(gathers, "count") > 0 {
            assert!(
                n(gathers, "max_span") < *products,
                "{model} {label}: a gather spans all {products} products: {gathers}"
            );
        }
        assert_eq!(n(gathers, "explicit_fsdp"), 0, "{model} {label}: {gathers}");
    }
}

#[test]
fn deepseek3_prefetches_as_compiled() {
    the_prefetch_as_compiled("deepseek3");
}

#[test]
fn qwen35_prefetches_as_compiled() {
    the_prefetch_as_compiled("qwen35");
}

#[test]
fn deepseek3_does_not_prefetch_when_off() {
    no_prefetch_as_compiled("deepseek3");
}

#[test]
fn qwen35_does_not_prefetch_when_off() {
    no_prefetch_as_compiled("qwen35");
}
