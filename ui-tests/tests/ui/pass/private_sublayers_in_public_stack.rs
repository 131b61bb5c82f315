// Private sub-layers in a public stack with its config named: `config = Type` (the stack's
// public interface names no sub-layer either way; see private_first_entry_in_public_stack).
mod model {
    use stackscan::{Forward, Result, SubLayer, Tensor, layer_stack};
    use stackscan_ui_tests::{Cfg, Hidden};

    #[derive(SubLayer)]
    #[sublayer(config = Cfg, carry = Hidden)]
    struct Inner<T> {
        #[param(shape = [cfg.d, cfg.d], shard = 0)]
        w: T,
    }

    impl Forward for Inner<Tensor> {
        fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
            h.matmul(&self.w)
        }
    }

    #[layer_stack(config = Cfg, block = [Inner, stackscan_ui_tests::Mlp], repeat = 2)]
    pub struct Model;
}

use stackscan::LayerStack;

fn main() {
    assert_eq!(model::Model::plan_notation(&stackscan_ui_tests::CFG).unwrap().0, "{[Inner] → [Mlp]} × 2");
    assert_eq!(model::Model::kinds(&stackscan_ui_tests::Cfg { d: 4, layers: 2 }).len(), 2);
}
