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
    options
}
