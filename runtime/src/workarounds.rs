//! Defects of particular plugins that stackscan works around, each with the reason and the
//! plugins it applies to. Every compile goes through [`compile_options`], so the compile
//! cache's key includes what was added here and an executable built without a workaround is
//! never reused.

use crate::compile_options::{CompileOptions, OverrideValue};
use crate::pjrt::Client;

/// The `DebugOptions` overrides that turn XLA CPU's XNNPACK (and YNNPACK) fusions off.
///
/// Those fusions pack a dot's constant-like operand once and keep the packed copy for as long
/// as the operand's *address* stays the same (XLA's own `XnnFusionThunk` says so: "we rely on
/// device memory as an identity of the captured argument, and this is not correct"). The
/// plugins before API 0.115 also capture entry parameters. A training step donates its weights,
/// so a weight's buffer keeps its address from step to step while its values change: a dot
/// that reads a parameter directly (the LM head of a one-device step, where no all-gather
/// copies it first) then computes with the weights of the first step forever, while the
/// backward pass, which reads the same parameter through other ops, sees the current ones.
/// The run trains, silently wrong. XLA only picks these fusions on CPUs with AVX2, so a machine
/// without it shows nothing.
const NO_XNN_FUSIONS: &[(&str, XnnSetting)] = &[
    ("xla_cpu_use_xnnpack", XnnSetting::Off),
    ("xla_cpu_experimental_xnn_fusion_type", XnnSetting::NoKinds),
    ("xla_cpu_experimental_ynn_fusion_type", XnnSetting::NoKinds),
];

#[derive(Clone, Copy, Debug)]
enum XnnSetting {
    Off,
    NoKinds,
}

impl XnnSetting {
    fn value(self) -> OverrideValue {
        match self {
            XnnSetting::Off => OverrideValue::Bool(false),
            XnnSetting::NoKinds => OverrideValue::String(String::new()),
        }
    }
}

/// The first CPU plugin API version whose XNNPACK fusions capture constants only: with
/// `lammps-jax-pjrt-cpu` 0.11.2 the one-device Llama trained correctly on an AVX2 machine
/// (issue 24), so its fusions stay on.
const FIXED_CPU_API: (i32, i32) = (0, 115);

/// Whether `client`'s plugin has the stale-capture defect of [`NO_XNN_FUSIONS`].
pub(crate) fn captures_donated_parameters(client: &Client) -> bool {
    client.platform() == "cpu" && client.api_version() < FIXED_CPU_API
}

/// `options` with the workarounds `client`'s plugin needs.
pub(crate) fn compile_options(client: &Client, options: &CompileOptions) -> CompileOptions {
    let mut options = options.clone();
    if captures_donated_parameters(client) {
        for (name, setting) in NO_XNN_FUSIONS {
            options = options.with_override(name, setting.value());
        }
    }
    for_platform(client.platform(), options)
}

/// The field that names the HLO passes XLA skips, and the pass that turns a whole-slice
/// all-gather into an all-reduce.
const DISABLED_PASSES: &str = "xla_disable_hlo_passes";
const ALL_GATHER_DECOMPOSER: &str = "all_gather_decomposer";

/// `options` with the workarounds every compile for `platform` needs, a client or not (a
/// compile for a topology has none).
///
/// On TPU: libtpu's `all_gather_decomposer` rewrites an all-gather whose group is every device
/// of a program of 64 or more into an all-reduce of a zero buffer each device writes its shard
/// into. That buffer doubles a gathered layer's memory, and where the rewrite also narrows f32
/// weights to bf16 (TPU's default precision for products) the mixed-type all-reduce is never
/// offloaded to the SparseCores: it runs synchronously on the TensorCores, and the prefetch
/// gathers of an f32 step overlap nothing. Keeping the all-gathers, every prefetch gather runs
/// asynchronously across the layer before it (docs/tpu.md). A caller that wants the compiler's
/// own choice removes the pass from the option ([`allow_gather_decomposition`]).
pub(crate) fn for_platform(platform: &str, options: CompileOptions) -> CompileOptions {
    if platform != "tpu" {
        return options;
    }
    let mut passes = disabled_passes(&options);
    if passes.is_empty() {
        // An override replaces the flag: the passes `XLA_FLAGS` disables stay disabled.
        passes = flag_passes(&std::env::var("XLA_FLAGS").unwrap_or_default());
    }
    if passes.iter().any(|p| p == ALL_GATHER_DECOMPOSER) {
        return options;
    }
    passes.push(ALL_GATHER_DECOMPOSER.to_owned());
    options.with_override(DISABLED_PASSES, OverrideValue::String(passes.join(",")))
}

/// `options` without [`for_platform`]'s TPU workaround: libtpu decomposes whole-slice
/// all-gathers as it would by itself (other disabled passes stay disabled).
pub fn allow_gather_decomposition(options: CompileOptions) -> CompileOptions {
    let passes: Vec<String> = disabled_passes(&options)
        .into_iter()
        .filter(|p| p != ALL_GATHER_DECOMPOSER)
        .collect();
    match passes.is_empty() {
        true => options.without_override(DISABLED_PASSES),
        false => options.with_override(DISABLED_PASSES, OverrideValue::String(passes.join(","))),
    }
}

/// The passes `options` disables, as listed.
fn disabled_passes(options: &CompileOptions) -> Vec<String> {
    match options
        .overrides()
        .find(|(name, _)| *name == DISABLED_PASSES)
    {
        Some((_, OverrideValue::String(passes))) => pass_list(passes),
        _ => Vec::new(),
    }
}

/// The passes an `XLA_FLAGS` value disables (its last `--xla_disable_hlo_passes=`, as XLA
/// reads a repeated flag).
fn flag_passes(flags: &str) -> Vec<String> {
    let prefix = format!("--{DISABLED_PASSES}=");
    flags
        .split_whitespace()
        .filter_map(|f| f.strip_prefix(&prefix))
        .next_back()
        .map(pass_list)
        .unwrap_or_default()
}

/// A comma-separated list of pass names.
fn pass_list(passes: &str) -> Vec<String> {
    passes
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disabled(options: &CompileOptions) -> Option<String> {
        options
            .overrides()
            .find(|(name, _)| *name == DISABLED_PASSES)
            .map(|(_, v)| match v {
                OverrideValue::String(s) => s.clone(),
                other => panic!("not a list: {other:?}"),
            })
    }

    #[test]
    fn a_tpu_compile_keeps_its_all_gathers() {
        let plain = CompileOptions::default();
        assert_eq!(disabled(&for_platform("cpu", plain.clone())), None);
        assert_eq!(disabled(&for_platform("cuda", plain.clone())), None);
        let tpu = for_platform("tpu", plain);
        assert_eq!(disabled(&tpu).as_deref(), Some("all_gather_decomposer"));
        // Applied twice, listed once.
        assert_eq!(
            disabled(&for_platform("tpu", tpu.clone())).as_deref(),
            Some("all_gather_decomposer")
        );
        assert_eq!(disabled(&allow_gather_decomposition(tpu)), None);
    }

    #[test]
    fn passes_xla_flags_disables_are_read() {
        assert_eq!(
            flag_passes("--xla_dump_to=d --xla_disable_hlo_passes=a,b --xla_x=1"),
            ["a", "b"]
        );
        assert_eq!(
            flag_passes("--xla_disable_hlo_passes=a --xla_disable_hlo_passes=c"),
            ["c"]
        );
        assert!(flag_passes("--xla_dump_to=d").is_empty());
    }

    #[test]
    fn passes_a_caller_disables_stay_disabled() {
        let own = CompileOptions::default().with_override(
            DISABLED_PASSES,
            OverrideValue::String("bfloat16-propagation".into()),
        );
        let tpu = for_platform("tpu", own);
        assert_eq!(
            disabled(&tpu).as_deref(),
            Some("bfloat16-propagation,all_gather_decomposer")
        );
        assert_eq!(
            disabled(&allow_gather_decomposition(tpu)).as_deref(),
            Some("bfloat16-propagation")
        );
    }
}
