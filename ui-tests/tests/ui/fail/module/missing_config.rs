// `#[derive(Module)]` without its `#[module(config = ...)]`.
use stackscan::Module;

#[derive(Module)]
struct Part<T> {
    #[param(shape = [4], replicated)]
    gain: T,
}

fn main() {}
