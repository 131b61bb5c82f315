//! The reference's configurations at full size, through the same path as `timeline
//! --reference`: every timeline written must parse as one balanced SVG document whose bars
//! are the ops the simulator replayed, the schedule JSON must agree with the prediction, and
//! the model-specific ops must be there (the dense→MoE boundary of DeepSeek-V3, the token
//! all_to_alls of EP = 4, the nested Qwen3.5 block's two kinds), and the predicted reductions
//! must stay where they are against the published ones (see `reference::SCENARIOS`). Set
//! `STACKSCAN_TIMELINE_DIR` to keep the files for viewing.

#![expect(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use std::path::{Path, PathBuf};

use stackscan::sim::Lane;
use stackscan_cli::reference::{SCENARIOS, predict_all};
use svg::node::element::tag::Type;
use svg::parser::Event;

/// Parses `path` as one balanced `svg` element; returns the text of every `title` (the bars'
/// tooltips).
fn titles(path: &Path) -> Vec<String> {
    let doc = std::fs::read_to_string(path).unwrap();
    let mut open: Vec<String> = Vec::new();
    let (mut titles, mut roots) = (Vec::new(), 0);
    for event in svg::read(&doc).unwrap() {
        match event {
            Event::Error(e) => panic!("{}: not SVG: {e}", path.display()),
            Event::Tag(name, Type::Start, _) => {
                if open.is_empty() {
                    assert_eq!(name, "svg");
                    roots += 1;
                }
                open.push(name.to_owned());
            }
            Event::Tag(name, Type::End, _) => {
                assert_eq!(open.pop().as_deref(), Some(name), "unbalanced </{name}>");
            }
            Event::Text(text) if open.last().map(String::as_str) == Some("title") => {
                titles.push(text.to_owned());
            }
            _ => {}
        }
    }
    assert!(
        open.is_empty() && roots == 1,
        "{}: unbalanced",
        path.display()
    );
    titles
}

#[test]
fn reference_timelines_parse_and_show_what_was_replayed() {
    let out = std::env::var_os("STACKSCAN_TIMELINE_DIR").map_or_else(
        || std::env::temp_dir().join(format!("stackscan-reference-{}", std::process::id())),
        PathBuf::from,
    );
    let rows = predict_all("tpu7x", None, &out).unwrap();
    assert_eq!(rows.len(), SCENARIOS.len());
    for row in &rows {
        let dir = out.join(row.scenario.slug);
        let s = &row.summary;
        for (pass, off, on) in [
            ("forward", &s.off.forward, &s.on.forward),
            ("backward", &s.off.backward, &s.on.backward),
        ] {
            let t = titles(&dir.join(format!("{pass}.svg")));
            // One tooltip per bar replayed, off panel then on.
            assert_eq!(
                t.len(),
                off.bars.len() + on.bars.len(),
                "{}",
                row.scenario.slug
            );
            let has = |label: &str| t.iter().any(|x| x.starts_with(label));
            let compute = if pass == "forward" { "fwd" } else { "vjp" };
            assert!(has(&format!("{compute} L0 (")) && has("AG W1 ("));
            if pass == "backward" {
                assert!(has("RS dW0 ("));
            }
            if row.scenario.model == "deepseek3" {
                // The dense prefix ends at layer 2, the MoE layers run from 3.
                assert!(has(&format!("{compute} L2 (")) && has(&format!("{compute} L3 (")));
            }
            // Expert parallelism exchanges tokens in every MoE layer, on the second lane.
            let exchanges = on
                .bars
                .iter()
                .filter(|b| b.label().starts_with("A2A"))
                .count();
            // The recipe's 10 layers are 3 dense and 7 MoE.
            assert_eq!(exchanges, if row.scenario.ep.is_some() { 7 } else { 0 });
            assert!(on.lane(Lane::Second).all(|b| b.start >= 0.0));
        }
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("schedule.json")).unwrap())
                .unwrap();
        // serde_json's default parser may round the last bit of a printed f64.
        let written = json["on"]["step_seconds"].as_f64().unwrap();
        assert!(
            (written / s.on.step_seconds() - 1.0).abs() < 1e-12,
            "{written}"
        );
        // Prefetch hides communication in every configuration.
        assert!(row.change_percent() < 0.0, "{}", row.scenario.slug);
    }
    // The recipe's mesh: 64 TPU7x chips are 128 devices; DeepSeek-V3 runs 10 layers.
    for row in &rows {
        assert_eq!((row.devices, row.batch), (128, 4), "{}", row.scenario.slug);
        if row.scenario.model == "deepseek3" {
            assert_eq!(row.layers, 10);
        }
    }
    // The predictions against the published reductions, in points. Rows 1 and 4 are within
    // ±5. EP = 4 is not (the reference's EP = 4 run cannot be the recipe's batch: the same
    // mesh and batch is row 4, published −7.5 %); it is held where it is, to notice a change.
    // Qwen3.5 is held too: priced from the program built under the recipe's policy (bf16
    // weights: bf16 gathers and reduce-scatters, norms, softmaxes, the GDN recurrence and
    // the loss in f32) it is −3.1; when every f32 byte was halved instead it was −5 to −10
    // (its GDN kernels' achieved rate on TPU7x is not known).
    let gap = |slug: &str| {
        let r = rows.iter().find(|r| r.scenario.slug == slug).unwrap();
        r.change_percent() - r.scenario.published.change_percent
    };
    for slug in ["deepseek-v3-fsdp", "deepseek-v3-64-remat"] {
        assert!(gap(slug).abs() <= 5.0, "{slug}: {:+.1} points", gap(slug));
    }
    assert!(
        (20.0..35.0).contains(&gap("deepseek-v3-ep4")),
        "{}",
        gap("deepseek-v3-ep4")
    );
    assert!(
        (-6.0..-1.0).contains(&gap("qwen3.5-35b-a3b")),
        "{}",
        gap("qwen3.5-35b-a3b")
    );
    // Row 4's forward per layer: with prefetch on it fixed the profile's matrix efficiency;
    // with prefetch off (the exposed gathers, not fitted) it must agree too, within 10 %.
    let remat = rows
        .iter()
        .find(|r| r.scenario.slug == "deepseek-v3-64-remat")
        .unwrap();
    let ((off, on), _) = remat.per_layer_ms();
    let (published_off, published_on) = remat.scenario.published.forward_layer_ms.unwrap();
    assert!(
        (off / published_off - 1.0).abs() < 0.1,
        "forward off {off:.1} ms"
    );
    assert!(
        (on / published_on - 1.0).abs() < 0.1,
        "forward on {on:.1} ms"
    );
    // The MoE layers alone: 7 of the 10, each gathering more than a dense one.
    assert_eq!(remat.layer_kinds.iter().filter(|k| *k == "M").count(), 7);
    let ((moe_off, moe_on), _) = remat.kind_mean_ms("M").unwrap();
    assert!(moe_off > off && moe_on > on, "{moe_off:.1} {moe_on:.1}");
    assert!(remat.kind_mean_ms("no such kind").is_none());
    // The table states every row's sources.
    let table = stackscan_cli::reference::table(&rows);
    assert!(
        table.contains("57918a5") && table.contains("assumed"),
        "{table}"
    );
    // The Qwen3.5 stack is the nested block's 40 layers.
    let qwen = rows
        .iter()
        .find(|r| r.scenario.model.starts_with("qwen"))
        .unwrap();
    assert_eq!(qwen.layers, 40);
    if std::env::var_os("STACKSCAN_TIMELINE_DIR").is_none() {
        std::fs::remove_dir_all(&out).unwrap();
    }
}
