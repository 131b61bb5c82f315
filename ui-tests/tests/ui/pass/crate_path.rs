// `crate = "path"` reaches the DSL through another path (a renamed dependency or, here, a
// re-export), on both macros.
use stackscan::{Forward, LayerStack, Result, Tensor};
use stackscan_ui_tests::{Cfg, Hidden};

mod dsl {
    pub use stackscan::*;
}

#[derive(dsl::SubLayer)]
#[sublayer(crate = "crate::dsl", config = Cfg, carry = Hidden)]
struct Dense<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    w: T,
}

impl Forward for Dense<Tensor> {
    fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
        h.matmul(&self.w)
    }
}

#[dsl::layer_stack(crate = "crate::dsl", block = [Dense], repeat = 2)]
struct Model;

fn main() {
    assert_eq!(Model::plan_notation(&stackscan_ui_tests::CFG).unwrap().0, "[Dense 0, Dense 1]");
}
