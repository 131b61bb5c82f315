use stackscan::layer::ActivationMarker;
use stackscan::SubLayer;

#[derive(Clone)]
struct Cfg {
    d: usize,
}
enum Hidden {}
impl ActivationMarker for Hidden {}

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Mlp<T> {
    #[param(shape = [4, cfg.d], shard = 0)]
    up: T,
}

fn main() {}
