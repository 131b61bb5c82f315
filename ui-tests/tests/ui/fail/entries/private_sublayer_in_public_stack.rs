// Without `config = Type`, the stack's config is named through its first entry, which is
// then part of the public interface: one error, on the entry.
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

    #[layer_stack(block = [Inner], repeat = 2)]
    pub struct Model;
}

fn main() {}
