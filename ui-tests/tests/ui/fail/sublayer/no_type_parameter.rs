use stackscan::SubLayer;

#[derive(SubLayer)]
#[sublayer(config = stackscan_ui_tests::Cfg, carry = stackscan_ui_tests::Hidden)]
struct Mlp {
    #[param(shape = [4], shard = 0)]
    up: f32,
}

fn main() {}
