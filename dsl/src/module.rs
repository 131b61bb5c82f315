//! Reusable parts of a layer that are not layers themselves (attention, an MLP, a router):
//! the trait `#[derive(Module)]` implements, and the one function that names a parameter by
//! where it sits in the nesting (`attn.wq`, `layers.attn.wq`).
//!
//! A module is a struct generic over the value type of its parameters, like a sub-layer; its
//! fields are `#[param(...)]` tensors or `#[module]` sub-modules. A sub-layer holds modules the
//! same way, so a decoder layer reads `self.attn.wq` and its parameters are named `attn.wq`.
//!
//! A module's shapes read its own config type. A field `#[module(config = <expr>)]` projects
//! the enclosing config onto it (`cfg.attention()`), so one `Attention` serves models with
//! different config types; without a projection the module reads the enclosing config as is.
//!
//! ```
//! use stackscan::layer::{ActivationMarker, Forward};
//! use stackscan::{Module, Result, SubLayer, Tensor};
//!
//! #[derive(Clone, Debug)]
//! pub struct MlpDims { d: i64, f: i64 }
//!
//! #[derive(Module)]
//! #[module(config = MlpDims)]
//! pub struct Mlp<T> {
//!     #[param(shape = [cfg.d, cfg.f], shard = 0)]
//!     up: T,
//!     #[param(shape = [cfg.f, cfg.d], shard = 1)]
//!     down: T,
//! }
//!
//! #[derive(Clone, Debug)]
//! pub struct Config { d: i64 }
//! impl Config {
//!     fn mlp(&self) -> MlpDims { MlpDims { d: self.d, f: 4 * self.d } }
//! }
//! pub enum Hidden {}
//! impl ActivationMarker for Hidden {}
//!
//! #[derive(SubLayer)]
//! #[sublayer(config = Config, carry = Hidden, name = "block")]
//! pub struct Block<T> {
//!     #[param(shape = [cfg.d], replicated)]
//!     norm: T,
//!     #[module(config = cfg.mlp())]
//!     mlp: Mlp<T>,
//! }
//!
//! impl Forward for Block<Tensor> {
//!     fn forward(&self, _: &Config, h: &Tensor) -> Result<Tensor> {
//!         let x = h.mul(&self.norm)?;
//!         h.add(&x.matmul(&self.mlp.up)?.tanh()?.matmul(&self.mlp.down)?)
//!     }
//! }
//!
//! let specs = <Block<Tensor> as SubLayer>::param_specs(&Config { d: 8 });
//! let names: Vec<_> = specs.iter().map(|p| p.name.as_str()).collect();
//! assert_eq!(names, ["norm", "mlp.up", "mlp.down"]);
//! assert_eq!(specs[2].shape, [32, 8]);
//! ```

use crate::builder::Tensor;
use crate::fsdp::ParamSpec;
use crate::layer::Params;

/// A reusable part of a layer: its parameters (its own and its sub-modules', in declaration
/// order) and the config their shapes are computed from.
///
/// Implemented by `#[derive(Module)]` on `M<Tensor>` for a struct `M<T>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a module",
    label = "not a module",
    note = "a `#[module]` field's type must be a struct with `#[derive(Module)]`"
)]
pub trait Module: Params<Tensor> + 'static {
    /// The config the parameter shapes are computed from.
    type Config: 'static;
    /// The same struct over another value type.
    type Of<T>: Params<T>;

    /// The parameters, in declaration order, named by their path inside the module
    /// (`wq`, `rope.inv_freq` for a sub-module `rope`).
    fn param_specs(cfg: &Self::Config) -> Vec<ParamSpec>;
}

/// The name of `child` inside `parent`: `parent.child`, the one separator used by every
/// listing, checkpoint and log (`attn` + `wq` → `attn.wq`). An empty parent is the root.
pub fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_owned()
    } else {
        format!("{parent}.{child}")
    }
}

/// The model-wide name of a stacked parameter: `layers.<path>` in a stack of one kind, where
/// the kind adds nothing (`layers.attn.wq`), and `layers.<kind>.<path>` in a stack of several
/// (`layers.gdn.conv`), where the kind tells which stacked array holds it. Parameters outside
/// the stack keep their own path (`embed`, `final_norm`).
pub fn stacked_name(kinds_in_stack: usize, kind: &str, param: &str) -> String {
    if kinds_in_stack == 1 {
        join(STACK_PREFIX, param)
    } else {
        join(&join(STACK_PREFIX, kind), param)
    }
}

/// The prefix of every stacked parameter's name.
pub const STACK_PREFIX: &str = "layers";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_join_with_dots_and_name_the_kind_only_when_it_disambiguates() {
        assert_eq!(join("", "embed"), "embed");
        assert_eq!(join("attn", "wq"), "attn.wq");
        assert_eq!(stacked_name(1, "layer", "attn.wq"), "layers.attn.wq");
        assert_eq!(stacked_name(2, "gdn", "conv"), "layers.gdn.conv");
    }
}
