// Modules inside modules inside a sub-layer: names follow the nesting, a module with its own
// config is reused through a projection, values round-trip, and `forward` reads fields by name.
use stackscan::layer::{Forward, Params};
use stackscan::{LayerStack, Module, Result, SubLayer, Tensor, layer_stack};
use stackscan_ui_tests::{Cfg, Hidden, Proj};

#[derive(Clone)]
struct GateDims {
    width: i64,
}

#[derive(Module)]
#[module(config = GateDims)]
struct Gate<T> {
    #[param(shape = [cfg.width], replicated, init = zeros)]
    bias: T,
}

#[derive(Module)]
#[module(config = Cfg)]
struct Mixer<T> {
    #[module]
    proj: Proj<T>,
    #[module(config = GateDims { width: cfg.d })]
    gate: Gate<T>,
}

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden, name = "block")]
struct Block<T> {
    #[param(shape = [cfg.d], replicated)]
    norm: T,
    #[module]
    mixer: Mixer<T>,
    #[module]
    out: Proj<T>,
}

impl Forward for Block<Tensor> {
    fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
        let x = h.mul(&self.norm)?.matmul(&self.mixer.proj.w)?;
        h.add(&x.add(&self.mixer.gate.bias)?.tanh()?.matmul(&self.out.w)?)
    }
}

#[layer_stack(block = [Block], layers = 3, prefetch_fsdp_weights)]
struct Deep;

fn main() {
    let specs = <Block<Tensor> as SubLayer>::param_specs(&Cfg { d: 4, layers: 2 });
    let names: Vec<&str> = specs.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["norm", "mixer.proj.w", "mixer.gate.bias", "out.w"]);
    assert_eq!(specs[1].shard_dim, Some(0));
    assert_eq!(specs[2].init, stackscan::fsdp::Init::Zeros);
    assert_eq!(<Block<u8> as Params<u8>>::LEN, 4);
    assert_eq!(<Mixer<Tensor> as Module>::param_specs(&Cfg { d: 2, layers: 2 }).len(), 2);
    // Values come back in declaration order, sub-modules as runs.
    let b = <Block<u8> as Params<u8>>::from_values(vec![1, 2, 3, 4]).unwrap();
    assert_eq!((b.norm, b.mixer.proj.w, b.mixer.gate.bias, b.out.w), (1, 2, 3, 4));
    assert_eq!(b.into_values(), [1, 2, 3, 4]);
    assert!(<Block<u8> as Params<u8>>::from_values(vec![1, 2, 3]).is_err());
    let kinds = Deep::kinds(&Cfg { d: 4, layers: 2 });
    assert_eq!(kinds[0].params.len(), 4);
}
