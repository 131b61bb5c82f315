// `macro_rules!` fragments in the two places they arrive in invisible groups: a block of one
// `$t:ty` entry, and a sub-layer whose field types are the `$t:ty` of its type parameter.
use stackscan::{Forward, LayerStack, Result, SubLayer, Tensor, layer_stack};
use stackscan_ui_tests::{Cfg, Hidden};

macro_rules! sublayer {
    ($name:ident, $t:ident, $field:ty) => {
        #[derive(SubLayer)]
        #[sublayer(config = Cfg, carry = Hidden)]
        struct $name<$t> {
            #[param(shape = [cfg.d, cfg.d], shard = 0)]
            w: $field,
        }
    };
}

sublayer!(Dense, T, T);

impl Forward for Dense<Tensor> {
    fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
        h.matmul(&self.w)
    }
}

macro_rules! stack {
    ($name:ident, $t:ty) => {
        #[layer_stack(block = [$t], repeat = 3)]
        struct $name;
    };
}

stack!(Model, Dense);

fn main() {
    assert_eq!(Model::plan_notation(&stackscan_ui_tests::CFG).unwrap().0, "[Dense 0, Dense 1, Dense 2]");
    assert_eq!(Model::kinds(&Cfg { d: 4, layers: 2 })[0].params[0].name, "w");
}
