//! The DeepSeek-V3-style model declared as nested modules: hierarchical parameter names in
//! run order, the published model's parameter count against one computed by hand from the
//! published sizes, the config checks that name their field, and expert parallelism's
//! per-bank gather axis. No plugin is needed.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use stackscan::Error;
use stackscan_models::deepseek3::{DeepSeek3Config, DeepSeek3Stack, declared, model};
use stackscan_models::moe::FSDP_AXIS;
use stackscan_models::registry::Architecture;

#[test]
fn layers_are_named_by_their_modules_in_run_order() {
    let m = model::<DeepSeek3Stack>(&DeepSeek3Config::tiny()).unwrap();
    let names =
        |k: usize| -> Vec<&str> { m.kinds[k].params.iter().map(|p| p.name.as_str()).collect() };
    let mla = [
        "attn.q_down",
        "attn.q_norm",
        "attn.q_up",
        "attn.kv_down",
        "attn.kv_norm",
        "attn.kv_up",
        "attn.out",
    ];
    let with = |ffn: &[&'static str]| -> Vec<&'static str> {
        let mut v = vec!["attn_norm"];
        v.extend(mla);
        v.push("ffn_norm");
        v.extend(ffn);
        v
    };
    assert_eq!(m.kinds[0].name, "D");
    assert_eq!(names(0), with(&["mlp.w_gate", "mlp.w_up", "mlp.w_down"]));
    assert_eq!(m.kinds[1].name, "M");
    assert_eq!(
        names(1),
        with(&[
            "moe.router",
            "moe.router_bias",
            "moe.experts.gate",
            "moe.experts.up",
            "moe.experts.down",
            "moe.shared.w_gate",
            "moe.shared.w_up",
            "moe.shared.w_down",
        ])
    );
    let outer: Vec<&str> = m.outer_params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(outer, ["embed", "final_norm", "lm_head"]);
    // Expert banks are `[E, …]`, sharded on E.
    let bank = &m.kinds[1].params[11];
    assert_eq!(
        (bank.shape.as_slice(), bank.shard_dim),
        (&[16, 128, 64][..], Some(0))
    );
}

/// DeepSeek-V3's published total is 671 B (the MTP module excluded). Counted here from the
/// published sizes, weight by weight.
#[test]
fn the_published_model_has_671_billion_parameters() {
    let c = DeepSeek3Config::deepseek3();
    let m = model::<DeepSeek3Stack>(&c).unwrap();
    let total: i64 = m.parameters().iter().map(|p| p.elements()).sum();
    let (d, h) = (7168_i64, 128_i64);
    let mla = d * 1536
        + 1536
        + 1536 * h * (128 + 64)
        + d * (512 + 64)
        + 512
        + 512 * h * (128 + 128)
        + h * 128 * d;
    let norms = 2 * d;
    let dense = mla + norms + 3 * d * 18_432;
    // The router's projection and its selection bias (`e_score_correction_bias`).
    let moe = mla + norms + d * 256 + 256 + 256 * 3 * d * 2048 + 3 * d * 2048;
    let outer = 2 * 129_280 * d + d;
    assert_eq!(total, 3 * dense + 58 * moe + outer);
    assert_eq!(total, 671_026_419_200);
}

#[test]
fn config_mistakes_are_errors_naming_the_field() {
    let tiny = DeepSeek3Config::tiny();
    let message = |c: DeepSeek3Config| model::<DeepSeek3Stack>(&c).unwrap_err().to_string();
    // The depth is the config's: any count of MoE layers after the 3 dense ones, but not none.
    let e = model::<DeepSeek3Stack>(&DeepSeek3Config { layers: 3, ..tiny }).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Depth {
                key: "layers",
                value: 3,
                prefix: 3,
                block: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().starts_with("`DeepSeek3Config.layers` is 3"),
        "{e}"
    );
    let e = message(DeepSeek3Config {
        dense_layers: 2,
        ..tiny
    });
    assert!(
        e.contains("`DeepSeek3Config.dense_layers` is 2")
            && e.contains("`DeepSeek3Stack` declares a dense prefix of 3"),
        "{e}"
    );
    let mut wide = tiny;
    wide.mla.d = 64;
    let e = message(wide);
    assert!(
        e.contains("`DeepSeek3Config.mla.d` is 64 but `d` is 128"),
        "{e}"
    );
    let e = message(DeepSeek3Config { top_k: 9, ..tiny });
    assert!(e.contains("top_k 9"), "{e}");
    let e = message(DeepSeek3Config {
        capacity_factor: -1.0,
        ..tiny
    });
    assert!(e.contains("`DeepSeek3Config.capacity_factor`"), "{e}");
    let e = message(DeepSeek3Config {
        capacity_factor: f64::NAN,
        ..tiny
    });
    assert!(
        e.contains("`DeepSeek3Config.capacity_factor` is NaN"),
        "{e}"
    );
    // 0 is no dropping, not an error.
    Architecture::build(&DeepSeek3Config {
        capacity_factor: 0.0,
        ..tiny
    })
    .unwrap();
    for field in ["bias_update_speed", "aux_loss_alpha"] {
        let mut bad = tiny;
        match field {
            "bias_update_speed" => bad.bias_update_speed = -0.1,
            _ => bad.aux_loss_alpha = f64::INFINITY,
        }
        let e = message(bad);
        assert!(e.contains(&format!("`DeepSeek3Config.{field}`")), "{e}");
    }
    // One stack serves every depth the pattern holds.
    let (m, _) = Architecture::build(&DeepSeek3Config { layers: 12, ..tiny }).unwrap();
    assert_eq!(m.stack.len(), 12);
}

#[test]
fn expert_parallelism_gathers_the_banks_over_fsdp_only() {
    let c = DeepSeek3Config::tiny().with_expert_parallel(8, 4).unwrap();
    let (m, options) = declared::<DeepSeek3Stack>(&c).unwrap();
    assert!(options.prefetch_fsdp_weights && options.defer_grad_reduce_scatter);
    for k in &m.kinds {
        for p in &k.params {
            let over = p.gathered_over.as_ref().map(|a| a.name.as_str());
            let bank = p.name.starts_with("moe.experts.");
            assert_eq!(over, bank.then_some(FSDP_AXIS), "{}.{}", k.name, p.name);
        }
    }
}

/// `cost::layer_costs` of the model built for the expert-parallel mesh traces each MoE layer
/// on this rank's experts: `E/ep` experts on the `ep·C` slots of its group cost what `E`
/// experts on `C` slots do without expert parallelism, so the per-device products are equal;
/// the banks' gather is priced over `fsdp` (2 devices) only.
#[test]
fn layer_costs_trace_the_expert_parallel_layer_on_its_gathered_banks() {
    let plain = DeepSeek3Config::tiny();
    let ep = plain.with_expert_parallel(8, 4).unwrap();
    let cost = |c: &DeepSeek3Config| {
        stackscan::cost::layer_costs(
            &model::<DeepSeek3Stack>(c).unwrap(),
            8,
            &[],
            stackscan::Precision::F32,
        )
        .unwrap()
    };
    let (p, e) = (cost(&plain), cost(&ep));
    for k in 0..2 {
        assert_eq!(
            e[k].forward.matrix_flops.total(),
            p[k].forward.matrix_flops.total(),
            "{}",
            p[k].kind
        );
    }
    // One MoE layer's banks: 3 × 16·128·64 f32 = 393,216 B, an eighth a device; gathered over
    // fsdp = 2 each device receives one other shard, 49,152 B, where a gather over all 8
    // receives 7 of them.
    let bank_shard = 3 * 16 * 128 * 64 * 4 / 8;
    assert_eq!(p[1].gathered_bytes - e[1].gathered_bytes, 6 * bank_shard);
    assert_eq!(e[0].gathered_bytes, p[0].gathered_bytes);
}

/// The main job's program (the tiny model at its capacity factor 1.25, 4 devices, the stack's
/// options): the FLOPs of every expert product in it — forward, recompute and VJP — stay
/// within twice those of the experts the tokens use. Measured with `stackscan::cost` as the
/// products whose batch dimension is the 16 experts (what counting them at 0 of 16 active
/// removes), against the hand count for the 64 × 4 routed rows of a device.
#[test]
fn the_trained_programs_expert_flops_stay_within_twice_the_active_experts() {
    use stackscan::cost::{Accounting, ActiveExperts, of, of_with};
    use stackscan_models::jobs::{Job, ModelName};

    let (job, mesh) = Job::tiny_on("deepseek3".parse::<ModelName>().unwrap(), 4, 1).unwrap();
    let step = stackscan::fsdp::train_step_on(&job.model, job.options, &mesh).unwrap();
    let main = step.program.main();
    let c = DeepSeek3Config::tiny();
    let none_active = Accounting {
        experts: Some(ActiveExperts {
            experts: c.experts as u64,
            active: 0,
        }),
        ..Accounting::default()
    };
    let all = of(main).unwrap().matrix_flops.total();
    let expert = all - of_with(main, &none_active).unwrap().matrix_flops.total();
    // Per MoE layer: 3 products forward, the same 3 recomputed, 2 per product in the VJP;
    // each of 2·d·f FLOPs per row.
    let (rows, d, f) = (64 * c.top_k as u64, c.d as u64, c.expert_width as u64);
    let moe_layers = (c.layers - c.dense_layers) as u64;
    let active = moe_layers * 12 * rows * 2 * d * f;
    assert!(
        expert <= 2 * active,
        "expert FLOPs {expert} exceed twice the active experts' {active}"
    );
    // Exactly the capacity's slots: 16 experts × ⌈64·4/16 · 1.25⌉ = 320 rows for 256 routed.
    assert_eq!(expert, active / rows * 16 * 20);
}

/// The router's selection bias is a replicated `[E]` parameter starting at zero that the
/// optimizer moves by sign steps of the config's `bias_update_speed`, never by Adam.
#[test]
fn the_selection_bias_is_replicated_zero_and_moved_by_sign_steps() {
    use stackscan::fsdp::{Init, Update};
    let tiny = DeepSeek3Config::tiny();
    for speed in [0.0, tiny.bias_update_speed] {
        let (m, _) = Architecture::build(&DeepSeek3Config {
            bias_update_speed: speed,
            ..tiny
        })
        .unwrap();
        let bias = m.kinds[1]
            .params
            .iter()
            .find(|p| p.name == "moe.router_bias")
            .unwrap();
        assert_eq!(
            (bias.shape.as_slice(), bias.shard_dim, bias.init),
            (&[16][..], None, Init::Zeros)
        );
        assert_eq!(bias.update, Update::SignDescent { rate: speed });
        // Every other weight stays Adam's.
        let others = m.kinds.iter().flat_map(|k| &k.params);
        assert_eq!(
            others.filter(|p| p.update != Update::Adam).count(),
            1,
            "only the bias"
        );
    }
}
