use stackscan::SubLayer;

#[derive(SubLayer)]
#[sublayer(config = stackscan_ui_tests::Cfg)]
struct Mlp<T> {
    #[param(shape = [4], shard = 0)]
    up: T,
}

fn main() {}
