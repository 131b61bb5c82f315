// The options are constants checked at compile time; `unroll` cannot read the config.
use stackscan::layer_stack;
use stackscan_ui_tests::Mlp;

#[layer_stack(block = [Mlp], layers = cfg.layers, prefetch_fsdp_weights, unroll = cfg.layers)]
struct Model;

fn main() {}
