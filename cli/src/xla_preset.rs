//! Named sets of compiler flags for a platform, the way the reference runs its FSDP prefetch
//! on TPU: each flag with the reason it is in the set. A preset is printed as shell `export`
//! lines (`stackscan xla-preset tpu-fsdp`) for the environment variable the plugin reads at
//! start-up: libtpu's own flags only through `LIBTPU_INIT_ARGS`, XLA's through `XLA_FLAGS`.
//! Printing rather than setting them keeps the process's environment untouched (libtpu reads
//! it once, when it is loaded) and shows the user exactly what runs.
//!
//! ```
//! use stackscan_cli::xla_preset;
//! let p = xla_preset::find("tpu-fsdp")?;
//! let text = p.exports();
//! assert!(text.starts_with("export LIBTPU_INIT_ARGS='"));
//! assert!(text.contains("--xla_tpu_enable_latency_hiding_scheduler=true"));
//! assert!(xla_preset::find("gpu").is_err());
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::{Error, Result};

/// One flag of a preset and why it is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag {
    /// `--name=value`, as the plugin parses it.
    pub flag: &'static str,
    /// What it does for an FSDP-prefetch step.
    pub why: &'static str,
}

/// A named preset: the environment variable its flags go in, and the flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// The name `--preset`/`xla-preset` takes.
    pub name: &'static str,
    /// What it is for.
    pub about: &'static str,
    /// The variable the plugin reads them from.
    pub variable: &'static str,
    /// The flags.
    pub flags: &'static [Flag],
}

/// The TPU flags of the seed's FSDP-prefetch runs (MaxText's TPU7x recipes): the
/// latency-hiding scheduler that places each prefetch gather beside the layer before it (it
/// reads the `_scheduling_group_id`/`xla_explicit_fsdp` tags stackscan emits), and the
/// SparseCore offload of the FSDP all-gathers and reduce-scatters, so the collectives run on
/// the SparseCores while the TensorCores compute.
pub const TPU_FSDP: Preset = Preset {
    name: "tpu-fsdp",
    about: "TPU: latency-hiding scheduler and SparseCore offload of the FSDP collectives",
    variable: "LIBTPU_INIT_ARGS",
    flags: &[
        Flag {
            flag: "--xla_tpu_enable_latency_hiding_scheduler=true",
            why: "schedule each step's prefetch gather and deferred reduce-scatter to overlap compute",
        },
        Flag {
            flag: "--xla_enable_async_all_gather=true",
            why: "all-gathers as start/done pairs the scheduler can move apart",
        },
        Flag {
            flag: "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=false",
            why: "keep each gather its own collective, so it can be offloaded",
        },
        Flag {
            flag: "--xla_tpu_enable_sparse_core_collective_offload_all_gather=true",
            why: "run the FSDP weight gathers on the SparseCores",
        },
        Flag {
            flag: "--xla_tpu_enable_sparse_core_collective_offload_reduce_scatter=true",
            why: "run the gradient reduce-scatters on the SparseCores",
        },
        Flag {
            flag: "--xla_tpu_enable_sparse_core_reduce_scatter_v2=true",
            why: "the SparseCore reduce-scatter implementation the recipes use",
        },
        Flag {
            flag: "--xla_tpu_use_tc_device_shape_on_sc=true",
            why: "SparseCores write the layout the TensorCores read, no relayout copy",
        },
        Flag {
            flag: "--xla_sc_disable_megacore_partitioning=true",
            why: "one SparseCore program per chip rather than one per megacore half",
        },
        Flag {
            flag: "--xla_tpu_enable_all_gather_offload_tracing=true",
            why: "name the offloaded gathers in profiles",
        },
        Flag {
            flag: "--xla_tpu_enable_reduce_scatter_offload_tracing=true",
            why: "name the offloaded reduce-scatters in profiles",
        },
    ],
};

/// Every preset, by name.
pub const PRESETS: [Preset; 1] = [TPU_FSDP];

/// The preset named `name`, or an error listing them.
pub fn find(name: &str) -> Result<Preset> {
    PRESETS
        .iter()
        .find(|p| p.name == name)
        .copied()
        .ok_or_else(|| {
            let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
            Error::InvalidOp {
                op: "xla preset",
                message: format!("no preset `{name}`; the presets are {}", names.join(", ")),
            }
        })
}

impl Preset {
    /// The flags as one space-separated value.
    pub fn value(&self) -> String {
        self.flags
            .iter()
            .map(|f| f.flag)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Shell lines: `export VARIABLE='flags…'` (replacing what it held) and a comment line
    /// per flag with its reason.
    pub fn exports(&self) -> String {
        let mut text = format!("export {}='{}'", self.variable, self.value());
        text.push_str(&format!(" # {}: {}\n", self.name, self.about));
        for f in self.flags {
            text.push_str(&format!("# {}: {}\n", f.flag, f.why));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_is_one_well_formed_assignment() {
        for p in PRESETS {
            let mut seen = std::collections::HashSet::new();
            for f in p.flags {
                let (name, value) = f.flag.split_once('=').unwrap_or((f.flag, ""));
                assert!(name.starts_with("--xla_"), "{}", f.flag);
                assert!(!value.is_empty() && !f.flag.contains(' '), "{}", f.flag);
                assert!(!f.flag.contains('\''), "{}", f.flag);
                assert!(seen.insert(name), "{name} twice in {}", p.name);
                assert!(!f.why.is_empty());
            }
            let text = p.exports();
            let first = text.lines().next().unwrap_or_default();
            assert!(
                first.starts_with(&format!("export {}='--xla_", p.variable)),
                "{first}"
            );
            assert_eq!(text.lines().count(), 1 + p.flags.len());
        }
        let e = find("tpu").unwrap_err().to_string();
        assert!(e.contains("`tpu`") && e.contains("tpu-fsdp"), "{e}");
    }
}
