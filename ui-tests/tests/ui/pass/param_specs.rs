// Shapes and inits read the config through `cfg`; defaults, dtypes and checkpoint names.
use stackscan::fsdp::{Init, ParamSpec};
use stackscan::layer::ActivationMarker;
use stackscan::{DType, SubLayer, Tensor};

#[derive(Clone)]
struct Config {
    d: i64,
    layers: usize,
}

enum Residual {}
impl ActivationMarker for Residual {}

#[derive(SubLayer)]
#[sublayer(config = Config, carry = Residual, name = "decoder")]
struct Decoder<T> {
    #[param(shape = [cfg.d], replicated)]
    norm: T,
    #[param(shape = [cfg.d, 4 * cfg.d], shard = 1, dtype = bf16, name = "w_up")]
    up: T,
    #[param(shape = [4 * cfg.d, cfg.d], shard = 0, init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()))]
    down: T,
    #[param(shape = [cfg.d], replicated, init = zeros)]
    bias: T,
}

fn main() {
    let specs = <Decoder<Tensor> as SubLayer>::param_specs(&Config { d: 8, layers: 2 });
    assert_eq!(specs, [
        ParamSpec::replicated("norm", &[8], DType::F32),
        ParamSpec::sharded("w_up", &[8, 32], DType::BF16, 1),
        ParamSpec::sharded("down", &[32, 8], DType::F32, 0).with_init(Init::Normal(0.01)),
        ParamSpec::replicated("bias", &[8], DType::F32).with_init(Init::Zeros),
    ]);
}
