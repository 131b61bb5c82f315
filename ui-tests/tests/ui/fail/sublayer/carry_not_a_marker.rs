use stackscan::SubLayer;

#[derive(Clone)]
struct Cfg;
struct Hidden;

#[derive(SubLayer)]
#[sublayer(config = Cfg, carry = Hidden)]
struct Mlp<T> {
    #[param(shape = [4], shard = 0)]
    up: T,
}

fn main() {}
