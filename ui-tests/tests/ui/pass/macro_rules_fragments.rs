// Entries reaching the macro as `macro_rules!` fragments (`$t:ty`, `$p:path`) and a renamed
// import are the sub-layers they name.
use stackscan::LayerStack;
use stackscan_ui_tests::{Cfg, Mlp as Dense};

macro_rules! stack {
    ($name:ident, $a:ty, $b:path) => {
        #[stackscan::layer_stack(block = [$a, $b, $a], repeat = 1)]
        struct $name;
    };
}

stack!(Model, Dense, stackscan_ui_tests::Attn);

fn main() {
    assert_eq!(Model::layers(&stackscan_ui_tests::CFG).unwrap(), 3);
    let kinds = Model::kinds(&Cfg { d: 4, layers: 2 });
    let names: Vec<&str> = kinds.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["Mlp", "attention"]);
}
