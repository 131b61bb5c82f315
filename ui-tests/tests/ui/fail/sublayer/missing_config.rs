use stackscan::SubLayer;

#[derive(SubLayer)]
#[sublayer(carry = stackscan_ui_tests::Hidden)]
struct Mlp<T> {
    #[param(shape = [4], shard = 0)]
    up: T,
}

fn main() {}
