// Raw identifiers name the kind and the parameters without their `r#`.
use stackscan::{Forward, LayerStack, Result, SubLayer, Tensor, layer_stack};
use stackscan_ui_tests::{Cfg, Hidden};

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
#[expect(non_camel_case_types, reason = "the case is a raw identifier")]
struct r#match<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    r#type: T,
}

impl Forward for r#match<Tensor> {
    fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
        h.matmul(&self.r#type)
    }
}

#[layer_stack(block = [r#match], repeat = 2)]
struct Model;

fn main() {
    let kinds = Model::kinds(&Cfg { d: 4, layers: 2 });
    assert_eq!(kinds[0].name, "match");
    assert_eq!(kinds[0].params[0].name, "type");
    assert_eq!(Model::plan_notation(&stackscan_ui_tests::CFG).unwrap().0, "[match 0, match 1]");
}
