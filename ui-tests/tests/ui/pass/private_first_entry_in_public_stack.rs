// A private sub-layer first in a public stack, without `config = Type`: the stack's config is
// the first entry's, reached through a bound on the impl, so the public interface names only
// the (public) config and the stack builds.
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

    #[layer_stack(block = [Inner, stackscan_ui_tests::Mlp], repeat = 2)]
    pub struct Model;
}

use stackscan::LayerStack;

fn main() {
    let cfg: &<model::Model as LayerStack>::Config = &stackscan_ui_tests::CFG;
    assert_eq!(model::Model::plan_notation(cfg).unwrap().0, "{[Inner] → [Mlp]} × 2");
    assert_eq!(model::Model::kinds(cfg).len(), 2);
}
