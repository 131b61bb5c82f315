// A count over the config that does not parse.
use stackscan::layer_stack;
use stackscan_ui_tests::Mlp;

#[layer_stack(block = [Mlp], layers = cfg.)]
struct Model;

fn main() {}
