//! Both macros through a dependency renamed in `Cargo.toml` (`ss = { package = "stackscan", … }`)
//! with `crate = "ss"`: no crate named `stackscan` is reachable here, so this crate builds only
//! if the expansions name nothing but `ss`. The tests check the declarations also work.

use ss::layer::Forward;
use ss::{Result, SubLayer, Tensor, layer_stack};
use stackscan_ui_tests::{Cfg, Hidden};

/// `h + tanh(h·w)`.
#[derive(Debug, SubLayer)]
#[sublayer(crate = "ss", config = Cfg, carry = Hidden, name = "dense")]
pub struct Dense<T> {
    /// The square weight.
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    pub w: T,
}

impl Forward for Dense<Tensor> {
    fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
        h.add(&h.matmul(&self.w)?.tanh()?)
    }
}

/// Dense layers at the config's depth, prefetched.
#[layer_stack(crate = "ss", block = [Dense], layers = cfg.layers, prefetch_fsdp_weights)]
#[derive(Debug)]
pub struct Model;

#[cfg(test)]
mod tests {
    use super::*;
    use ss::LayerStack;

    #[test]
    fn the_renamed_dependency_declares_a_working_stack() -> Result<()> {
        let cfg = Cfg { d: 4, layers: 3 };
        assert_eq!(
            Model::plan_notation(&cfg)?.0,
            "[dense 0, dense 1] → [dense 2]"
        );
        let kinds = Model::kinds(&cfg);
        assert_eq!(kinds.len(), 1);
        assert_eq!(kinds[0].params[0].shape, [4, 4]);
        Ok(())
    }
}
