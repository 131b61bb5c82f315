//! The macros in an edition-2015 crate: a path `::core::…` there names a module of this crate,
//! not the `core` crate, so the expansions build only if they reach `core` another way. The
//! crate also declares items named like the generated code's (`usize`, `str`, `cfg`).

extern crate stackscan;
extern crate stackscan_ui_tests;

use stackscan::layer::Forward;
use stackscan::model::Layers;
use stackscan::{layer_stack, Inputs, Model, Module, Result, SubLayer, Tensor};
use stackscan_ui_tests::{Cfg, Hidden};

/// A type named `usize`, as a user's module may declare one.
#[expect(
    non_camel_case_types,
    dead_code,
    reason = "the name generated code must not take"
)]
struct usize;

/// A type named `str`.
#[expect(
    non_camel_case_types,
    dead_code,
    reason = "the name generated code must not take"
)]
struct str;

/// A constant named like the config binding of the attribute expressions.
#[expect(
    non_upper_case_globals,
    dead_code,
    reason = "the name the expressions bind"
)]
const cfg: u8 = 0;

/// `h + tanh(h·w)`.
#[derive(Debug, SubLayer)]
#[sublayer(config = Cfg, carry = Hidden, name = "dense")]
pub struct Dense<T> {
    /// The square weight.
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    pub w: T,
    /// A nested projection.
    #[module]
    pub proj: Proj<T>,
}

impl Forward for Dense<Tensor> {
    fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
        h.add(&h.matmul(&self.w)?.matmul(&self.proj.w)?.tanh()?)
    }
}

/// A square projection.
#[derive(Debug, Module)]
#[module(config = Cfg)]
pub struct Proj<T> {
    /// The square weight.
    #[param(shape = [cfg.d, cfg.d], shard = 1)]
    pub w: T,
}

/// Two blocks, counted by a constant.
#[layer_stack(block = [Dense], repeat = BLOCKS)]
#[derive(Debug)]
pub struct Fixed;

const BLOCKS: ::std::primitive::usize = 2;

/// Dense layers at the config's depth.
#[layer_stack(block = [Dense], layers = cfg.layers, prefetch_fsdp_weights)]
#[derive(Debug)]
pub struct Deep;

/// Token ids.
#[derive(Debug, Inputs)]
#[inputs(config = Cfg)]
pub struct Tokens<T> {
    /// Token ids.
    #[input(shape = [cfg.d], dtype = i32, values = 0..cfg.d)]
    pub ids: T,
}

/// A model over [`Deep`].
#[derive(Debug, Model)]
#[model(config = Cfg, inputs = Tokens)]
pub struct Whole<T> {
    /// The embedding.
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    pub embed: T,
    /// The stack.
    #[stack]
    pub layers: Layers<Deep>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscan::LayerStack;

    #[test]
    fn the_expansions_build_and_work_in_edition_2015() {
        let config = Cfg { d: 4, layers: 3 };
        assert_eq!(
            Deep::plan_notation(&config).map(|p| p.0),
            Ok("[dense 0, dense 1] → [dense 2]".to_owned())
        );
        assert_eq!(Fixed::layers(&config), Ok(2));
        let kinds = Deep::kinds(&config);
        assert_eq!(kinds[0].params.len(), 2);
        assert_eq!(kinds[0].params[1].name, "proj.w");
    }
}
