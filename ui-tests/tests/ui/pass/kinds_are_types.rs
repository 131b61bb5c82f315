// Two structs spelled with one name (`Mlp` and `other::Mlp`, another sub-layer with its own
// kind name) are two kinds: kinds are types, not the last segment of a path.
use stackscan::{LayerStack, layer_stack};
use stackscan_ui_tests::{Cfg, Mlp};

mod other {
    pub use stackscan_ui_tests::Attn as Mlp;
}

#[layer_stack(block = [Mlp, other::Mlp], repeat = 2)]
struct Model;

fn main() {
    let kinds = Model::kinds(&Cfg { d: 4, layers: 2 });
    let names: Vec<&str> = kinds.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["Mlp", "attention"]);
}
