// A model without its stack field.
use stackscan::Model;
use stackscan_ui_tests::{Batch, Cfg};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
}

fn main() {}
