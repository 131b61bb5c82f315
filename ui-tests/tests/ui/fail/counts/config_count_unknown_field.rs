// `layers = cfg.…` reads a config field that does not exist.
use stackscan::layer_stack;
use stackscan_ui_tests::Mlp;

#[layer_stack(block = [Mlp], layers = cfg.depth)]
struct Model;

fn main() {}
