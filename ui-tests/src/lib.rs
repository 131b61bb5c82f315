//! Compile-fail and compile-pass tests (trybuild) of the stackscan macros: one file per
//! mistake a user can make in a declaration, with its expected compiler output, in
//! `tests/ui/fail/<concern>/`, and declarations that must compile and run in `tests/ui/pass/`.
//!
//! This library holds the valid parts the cases share (a config, an activation marker, two
//! sub-layers), so each case shows only its own mistake.
//!
//! ```
//! use stackscan::LayerStack;
//! use stackscan::layer_stack;
//! use stackscan_ui_tests::{Attn, Mlp};
//!
//! #[layer_stack(block = [Mlp, Mlp, Attn], repeat = 1, prefetch_fsdp_weights)]
//! struct Model;
//!
//! assert_eq!(Model::plan_notation(&stackscan_ui_tests::CFG)?.0, "[Mlp 0] → [Mlp 1] → [attention]");
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::layer::{ActivationMarker, Forward};
use stackscan::{Result, SubLayer, Tensor};

/// The config of the shared sub-layers.
#[derive(Clone, Debug)]
pub struct Cfg {
    /// Width of the activation.
    pub d: i64,
    /// Depth of the stacks whose count is the config's (`layers = cfg.layers`).
    pub layers: usize,
}

/// The config the cases plan and build at: width 4, depth 2.
pub const CFG: Cfg = Cfg { d: 4, layers: 2 };

/// The activation `[batch, d]` of the shared sub-layers.
#[derive(Debug)]
pub enum Hidden {}

impl ActivationMarker for Hidden {}

/// `h + tanh(h·w)`.
#[derive(Debug, SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
pub struct Mlp<T> {
    /// The square weight.
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    pub w: T,
}

impl Forward for Mlp<Tensor> {
    fn forward(&self, _cfg: &Cfg, h: &Tensor) -> Result<Tensor> {
        h.add(&h.matmul(&self.w)?.tanh()?)
    }
}

/// `h + sin(h·u) ⊙ gain`, kind `attention`.
#[derive(Debug, SubLayer)]
#[sublayer(config = Cfg, carry = Hidden, name = "attention")]
pub struct Attn<T> {
    /// The square weight.
    #[param(shape = [cfg.d, cfg.d], shard = 1)]
    pub u: T,
    /// The output gain.
    #[param(shape = [cfg.d], replicated)]
    pub gain: T,
}

impl Forward for Attn<Tensor> {
    fn forward(&self, _cfg: &Cfg, h: &Tensor) -> Result<Tensor> {
        let gain = self.gain.broadcast_to(h.dims())?;
        h.add(&h.matmul(&self.u)?.sin()?.mul(&gain)?)
    }
}

/// A square projection reused by the nested cases: a module, not a layer.
#[derive(Debug, stackscan::Module)]
#[module(config = Cfg)]
pub struct Proj<T> {
    /// The square weight.
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    pub w: T,
}

/// A two-layer stack of [`Mlp`] for the model cases.
#[stackscan::layer_stack(block = [Mlp], layers = 2, prefetch_fsdp_weights)]
#[derive(Debug)]
pub struct TwoMlps;

/// [`Mlp`]s at the config's depth, `Cfg.layers`.
#[stackscan::layer_stack(block = [Mlp], layers = cfg.layers, prefetch_fsdp_weights)]
#[derive(Debug)]
pub struct Mlps;

/// The inputs of the model cases: token ids `[d]` in `0..d`.
#[derive(Debug, stackscan::Inputs)]
#[inputs(config = Cfg)]
pub struct Batch<T> {
    /// Token ids.
    #[input(shape = [cfg.d], dtype = i32, values = 0..cfg.d)]
    pub tokens: T,
}
