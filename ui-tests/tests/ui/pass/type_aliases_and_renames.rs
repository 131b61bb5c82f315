// Kinds are sub-layer types, not spellings: a generic alias, a non-generic alias and a
// `use … as` rename beside the struct they name are one kind.
use stackscan::{LayerStack, Tensor, layer_stack};
use stackscan_ui_tests::{Attn, Cfg, Mlp, Mlp as Dense};

type Wide<T> = Attn<T>;
type AttnT = Attn<Tensor>;

#[layer_stack(block = [Mlp, Attn, Wide, AttnT, Dense], repeat = 1)]
struct Model;

fn main() {
    let kinds = Model::kinds(&Cfg { d: 4, layers: 2 });
    let names: Vec<&str> = kinds.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["Mlp", "attention"]);
    assert_eq!(
        Model::plan_notation(&stackscan_ui_tests::CFG).unwrap().0,
        "[Mlp 0] → [attention 1, attention 2, attention 3] → [Mlp 4]"
    );
}
