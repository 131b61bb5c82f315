//! `timeline`'s predictions, files and argument checks.

use super::*;

/// The timeline of `model` at its tiny preset, written to `out`.
fn args(model: &str, out: PathBuf) -> TimelineArgs {
    TimelineArgs {
        model: Some(model.into()),
        config: Some("tiny".into()),
        hardware: "tpu7x".into(),
        chips: 16,
        ep: None,
        cp: None,
        batch: None,
        layers: None,
        unroll: None,
        reference: false,
        precision: None,
        out,
        compiled: Vec::new(),
    }
}

#[test]
fn writes_svgs_and_a_schedule_that_agree_with_the_prediction() {
    let out = std::env::temp_dir().join(format!("stackscan-timeline-{}", std::process::id()));
    let s = run(&args("llama", out.clone())).unwrap();
    assert_eq!(s.files.len(), 3);
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("schedule.json")).unwrap()).unwrap();
    // serde_json's default parser may round the last bit of a printed f64.
    let written = json["on"]["step_seconds"].as_f64().unwrap();
    assert!(
        (written / s.on.step_seconds() - 1.0).abs() < 1e-12,
        "{written}"
    );
    assert_eq!(
        json["off"]["forward"]["bars"].as_array().map(Vec::len),
        Some(s.off.forward.bars.len())
    );
    let svg = std::fs::read_to_string(out.join("backward.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("RS dW3"));
    assert!(s.on.step_seconds() <= s.off.step_seconds());
    std::fs::remove_dir_all(&out).unwrap();
}

/// With `--cp 4` each device prices a quarter of each sequence, and the layer its
/// gather of the other pieces' keys and values (the VJP's reduce-scatter in the backward):
/// 3 of 4 pieces of K and V, `[2, 16, 2, 32]` bf16 each, 24 576 bytes a layer.
#[test]
fn context_parallelism_prices_the_key_value_exchange_inside_the_layer() {
    use stackscan::cost::{Collective, layer_costs};
    let out = std::env::temp_dir().join("stackscan-timeline-cp-unused");
    let mut a = args("llama", out);
    let plain = Loaded::new(&a).unwrap();
    a.cp = Some(4);
    let split = Loaded::new(&a).unwrap();
    assert_eq!(plain.priced.model.activation.dims[1], 64);
    assert_eq!(split.priced.model.activation.dims[1], 16);
    let devices = 32;
    let cost = |l: &Loaded| {
        layer_costs(
            &l.priced.model,
            devices,
            &l.accounting,
            stackscan::Precision::BF16,
        )
        .unwrap()
        .remove(0)
    };
    let (p, s) = (cost(&plain), cost(&split));
    assert_eq!(p.forward.collective(Collective::AllGather).total(), 0);
    assert_eq!(s.forward.collective(Collective::AllGather).total(), 24_576);
    assert_eq!(
        s.backward.collective(Collective::ReduceScatter).total(),
        24_576
    );
    // A model without a context-parallel form is refused by name.
    a.model = Some("qwen35".into());
    let e = match Loaded::new(&a) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("Qwen3.5 with --cp 4 was accepted"),
    };
    assert!(e.contains("Gated DeltaNet"), "{e}");
}

#[test]
fn a_benchmark_depth_replaces_the_configs() {
    // DeepSeek-V3 keeps its 3 dense layers in front of the shallower stack.
    let m = model_configured("deepseek3", Some("tiny"), Some(2), Some(6))
        .unwrap()
        .model;
    assert_eq!(m.stack.len(), 6);
    assert_eq!(
        model_configured("deepseek3", Some("tiny"), None, None)
            .unwrap()
            .model
            .stack
            .len(),
        8
    );
    assert_eq!(model_by_name("deepseek3").unwrap().model.stack.len(), 61);
    // Qwen3.5's depth must be whole blocks of four, and says so.
    let e = model_with("qwen35", None, Some(6)).unwrap_err().to_string();
    assert!(e.contains("`Qwen35Config.layers` is 6"), "{e}");
    let e = model_with("llama", None, Some(0)).unwrap_err().to_string();
    assert!(e.contains("`--layers`"), "{e}");
}

#[test]
fn a_tpu7x_chip_is_two_devices_on_the_mesh() {
    let out = std::env::temp_dir().join(format!("stackscan-timeline-d-{}", std::process::id()));
    let s = run(&args("llama", out.clone())).unwrap();
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("schedule.json")).unwrap()).unwrap();
    assert_eq!(
        (json["chips"].as_u64(), json["devices"].as_u64()),
        (Some(16), Some(32))
    );
    assert!(s.on.step_seconds() > 0.0);
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn bad_arguments_are_errors() {
    let out = std::env::temp_dir().join("stackscan-timeline-unused");
    let mut unknown = args("gpt-5", out.clone());
    unknown.config = None;
    let e = run(&unknown).unwrap_err().to_string();
    assert!(e.contains("unknown model `gpt-5`"), "{e}");
    let mut a = args("llama", out);
    a.ep = Some(4);
    assert!(run(&a).unwrap_err().to_string().contains("`--ep 4`"));
    a.ep = None;
    a.chips = 0;
    assert!(run(&a).unwrap_err().to_string().contains("--chips"));
}

/// A config `train` would refuse on the mesh (a width that does not split over the
/// devices) is refused here too, naming the parameter.
#[test]
fn a_model_that_does_not_split_over_the_mesh_is_refused() {
    let dir = std::env::temp_dir().join(format!("stackscan-tl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("d250.toml");
    std::fs::write(&config, "extends = \"tiny\"\nd_model = 250\n").unwrap();
    let mut a = args("llama", dir.join("out"));
    a.config = Some(config.to_str().unwrap().to_owned());
    a.chips = 2;
    let e = run(&a).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        e.contains("does not fit 4 devices") && e.contains("(250) does not split over 4"),
        "{e}"
    );
}
