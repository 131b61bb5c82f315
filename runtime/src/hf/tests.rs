use super::*;
use stackscan::hf_map::{Link, Region, WeightLinks};

/// A map of two weights: `head` `[2, 3]` from `lm_head.weight` `[3, 2]` transposed, and a
/// stacked `gate` and `up` of two layers, each a block of a fused `gate_up` `[4, 2]` per layer
/// (rows 0..2 gate, 2..4 up), transposed, with `up` shifted by 1.
fn map() -> HfMap {
    let fused = |l: usize, start| {
        Link::new(&format!("layers.{l}.gate_up"), &[4, 2])
            .block(0, start, 2)
            .then(Step::TransposeLast2)
    };
    HfMap {
        weights: vec![
            WeightLinks {
                name: "head".into(),
                shape: vec![2, 3],
                stacked: false,
                links: vec![Link::new("lm_head.weight", &[3, 2]).then(Step::TransposeLast2)],
            },
            WeightLinks {
                name: "layers.gate".into(),
                shape: vec![2, 2, 2],
                stacked: true,
                links: (0..2).map(|l| fused(l, 0).layer(l)).collect(),
            },
            WeightLinks {
                name: "layers.up".into(),
                shape: vec![2, 2, 2],
                stacked: true,
                links: (0..2)
                    .map(|l| fused(l, 2).then(Step::Add(1.0)).layer(l))
                    .collect(),
            },
            // One layer of a bank of two experts `[3, 2]` each, theirs `[2, 3]` per expert.
            WeightLinks {
                name: "layers.experts".into(),
                shape: vec![1, 2, 3, 2],
                stacked: true,
                links: (0..2)
                    .map(|e| {
                        Link::new(&format!("layers.0.experts.{e}.w"), &[2, 3])
                            .then(Step::TransposeLast2)
                            .then(Step::AddLeadingDim)
                            .into_block(0, e, 1)
                    })
                    .collect(),
            },
        ],
        skipped: vec![("mtp.".into(), "not modelled".into())],
        stored_under: vec![("layers.".into(), "model.language_model.layers.".into())],
    }
}

fn ours() -> Vec<Tensor> {
    let t = |name: &str, shape: &[i64], base: f32| Tensor {
        name: name.into(),
        shape: shape.to_vec(),
        data: (0..shape.iter().product::<i64>())
            .map(|i| base + i as f32 * 0.25)
            .collect(),
    };
    vec![
        t("head", &[2, 3], 0.0),
        t("layers.gate", &[2, 2, 2], 10.0),
        t("layers.up", &[2, 2, 2], 20.0),
        t("layers.experts", &[1, 2, 3, 2], 30.0),
    ]
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("stackscan-hf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn an_export_reimports_bit_identically() {
    let m = map();
    let theirs = export(&m, &ours()).expect("export");
    let names: Vec<&str> = theirs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "lm_head.weight",
            "layers.0.gate_up",
            "layers.1.gate_up",
            "layers.0.experts.0.w",
            "layers.0.experts.1.w"
        ]
    );
    // Expert 1 by hand: our `[3, 2]` block from 31.5 on, transposed.
    assert_eq!(
        theirs[4].1.data,
        vec![31.5, 32.0, 32.5, 31.75, 32.25, 32.75]
    );
    // Their layer-0 `gate_up`, by hand: gate rows are our gate's columns, up rows ours − 1.
    let g = &theirs[1].1;
    assert_eq!(g.dims, vec![4, 2]);
    assert_eq!(
        g.data,
        vec![10.0, 10.5, 10.25, 10.75, 19.0, 19.5, 19.25, 19.75]
    );
    let dir = scratch("roundtrip");
    write_weights(&dir, &theirs, ExportDType::F32).expect("write");
    let files = WeightFiles::open(&dir).expect("open");
    check(&m, &files).expect("check");
    for (j, want) in ours().iter().enumerate() {
        assert_eq!(&import(&m, &files, j).expect("import"), want);
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// Files that keep the layers under another prefix ([`HfMap::stored_under`]) import the same
/// weights; a tensor under neither name is still missing.
#[test]
fn tensors_stored_under_another_prefix_import_the_same() {
    let m = map();
    let moved: Vec<(String, Array)> = export(&m, &ours())
        .expect("export")
        .into_iter()
        .map(|(name, a)| match name.strip_prefix("layers.") {
            Some(rest) => (format!("model.language_model.layers.{rest}"), a),
            None => (name, a),
        })
        .collect();
    let dir = scratch("moved");
    write_weights(&dir, &moved, ExportDType::F32).expect("write");
    let files = WeightFiles::open(&dir).expect("open");
    check(&m, &files).expect("check");
    for (j, want) in ours().iter().enumerate() {
        assert_eq!(&import(&m, &files, j).expect("import"), want);
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn a_bf16_file_loads_into_f32() {
    let m = map();
    let dir = scratch("bf16");
    write_weights(
        &dir,
        &export(&m, &ours()).expect("export"),
        ExportDType::BF16,
    )
    .expect("write");
    let files = WeightFiles::open(&dir).expect("open");
    assert_eq!(files.header("lm_head.weight").expect("there").1, "BF16");
    // Quarters of small numbers are exact in bf16.
    assert_eq!(import(&m, &files, 0).expect("import"), ours()[0]);
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn missing_unknown_and_misshapen_tensors_are_named() {
    let m = map();
    let mut theirs = export(&m, &ours()).expect("export");
    let check = |theirs: &[(String, Array)], name: &str| {
        let dir = scratch(name);
        write_weights(&dir, theirs, ExportDType::F32).expect("write");
        let r = check(&m, &WeightFiles::open(&dir).expect("open"));
        std::fs::remove_dir_all(&dir).expect("clean up");
        r
    };
    // Skipped by prefix: accepted and counted.
    theirs.push(("mtp.0.w".into(), Array::zeros(vec![1])));
    let skipped = check(&theirs, "skipped").expect("skipped tensors are fine");
    assert_eq!(skipped, vec![("mtp.".to_owned(), 1)]);
    theirs.push(("extra.w".into(), Array::zeros(vec![1])));
    let e = check(&theirs, "unknown").unwrap_err().to_string();
    assert!(e.contains("`extra.w`") && e.contains("not a weight"), "{e}");
    theirs.pop();
    theirs[0].1 = Array::zeros(vec![2, 3]);
    let e = check(&theirs, "shape").unwrap_err().to_string();
    assert!(
        e.contains("`lm_head.weight`") && e.contains("[3, 2]"),
        "{e}"
    );
    theirs.remove(0);
    let e = check(&theirs, "missing").unwrap_err().to_string();
    assert!(
        e.contains("`lm_head.weight` is missing") && e.contains("`head`"),
        "{e}"
    );
}

#[test]
fn a_map_whose_blocks_overlap_or_miss_is_refused() {
    let mut m = map();
    m.weights[2].links[1] = Link::new("layers.1.gate_up", &[4, 2])
        .block(0, 1, 2)
        .then(Step::TransposeLast2)
        .layer(1);
    let e = m.validate().unwrap_err().to_string();
    assert!(
        e.contains("`layers.1.gate_up`") && e.contains("exactly once"),
        "{e}"
    );
    // An expert bank with one expert linked twice and the other not at all.
    let mut m = map();
    m.weights[3].links[1].at = Some(Region {
        dim: 0,
        start: 0,
        len: 1,
    });
    let e = m.validate().unwrap_err().to_string();
    assert!(
        e.contains("`layers.experts`") && e.contains("layer 0"),
        "{e}"
    );
    let mut m = map();
    m.weights[0].links[0].steps.clear();
    let e = m.validate().unwrap_err().to_string();
    assert!(e.contains("[3, 2]") && e.contains("`head`"), "{e}");
}

#[test]
fn a_sharded_checkpoint_is_read_through_its_index() {
    let m = map();
    let theirs = export(&m, &ours()).expect("export");
    let dir = scratch("sharded");
    // Two shards: the head in one, the layers in the other, and the index naming them.
    for (file, part) in [
        ("a.safetensors", &theirs[..1]),
        ("b.safetensors", &theirs[1..]),
    ] {
        let sub = dir.join(file.trim_end_matches(".safetensors"));
        write_weights(&sub, part, ExportDType::F32).expect("write");
        std::fs::rename(sub.join(SINGLE), dir.join(file)).expect("move");
    }
    let map_json: serde_json::Map<String, serde_json::Value> = theirs
        .iter()
        .enumerate()
        .map(|(i, (n, _))| {
            (
                n.clone(),
                if i == 0 {
                    "a.safetensors"
                } else {
                    "b.safetensors"
                }
                .into(),
            )
        })
        .collect();
    let index = serde_json::json!({"metadata": {}, "weight_map": map_json});
    std::fs::write(dir.join(INDEX), index.to_string()).expect("index");
    let files = WeightFiles::open(&dir).expect("open");
    check(&m, &files).expect("check");
    assert_eq!(import(&m, &files, 2).expect("import"), ours()[2]);
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A quantization other than FP8 blocks is refused when the files open, by its method.
#[test]
fn another_quantization_is_refused_by_name() {
    let m = map();
    let dir = scratch("awq");
    write_weights(
        &dir,
        &export(&m, &ours()).expect("export"),
        ExportDType::F32,
    )
    .expect("write");
    std::fs::write(
        dir.join("config.json"),
        r#"{"quantization_config": {"quant_method": "awq", "bits": 4}}"#,
    )
    .expect("config");
    let e = WeightFiles::open(&dir).unwrap_err().to_string();
    assert!(
        e.contains("`quant_method` is `awq`") && e.contains("fp8"),
        "{e}"
    );
    // FP8 blocks, declared, read; the files hold no FP8 tensor, so nothing changes.
    std::fs::write(
        dir.join("config.json"),
        r#"{"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [2, 2]}}"#,
    )
    .expect("config");
    let files = WeightFiles::open(&dir).expect("open");
    check(&m, &files).expect("check");
    assert_eq!(import(&m, &files, 0).expect("import"), ours()[0]);
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// An export over the size limit is shards and an index, as `transformers` writes them; it
/// reads back to the same weights, and the other form's file left from before is removed.
#[test]
fn an_export_over_the_limit_is_shards_with_an_index() {
    let m = map();
    let theirs = export(&m, &ours()).expect("export");
    let dir = scratch("shards");
    write_weights(&dir, &theirs, ExportDType::F32).expect("single");
    assert!(dir.join(SINGLE).is_file());
    // 24 bytes a shard: `lm_head.weight` (6 values) fills one, each `gate_up` (8) has its
    // own, the experts (6 each) one apiece.
    write_shards(&dir, &theirs, ExportDType::F32, Some(24)).expect("shards");
    assert!(!dir.join(SINGLE).exists(), "the single file is gone");
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(INDEX)).expect("index"))
            .expect("JSON");
    let map_of = index["weight_map"].as_object().expect("weight_map");
    assert_eq!(map_of.len(), theirs.len());
    assert_eq!(map_of["lm_head.weight"], "model-00001-of-00005.safetensors");
    assert_eq!(
        map_of["layers.0.experts.1.w"],
        "model-00005-of-00005.safetensors"
    );
    let total: u64 = theirs.iter().map(|(_, a)| a.data.len() as u64 * 4).sum();
    assert_eq!(index["metadata"]["total_size"], total);
    let files = WeightFiles::open(&dir).expect("open");
    check(&m, &files).expect("check");
    for (j, want) in ours().iter().enumerate() {
        assert_eq!(&import(&m, &files, j).expect("import"), want);
    }
    // Back to one file: the index goes.
    write_shards(&dir, &theirs, ExportDType::F32, Some(1 << 20)).expect("single again");
    assert!(dir.join(SINGLE).is_file() && !dir.join(INDEX).exists());
    std::fs::remove_dir_all(&dir).expect("clean up");
}
