// Counts read from the config: a field (`layers = cfg.layers`), an expression over it
// (`repeat = …`), an integer of another type (`i64`); one stack type serves every depth, and
// a depth the pattern cannot hold is an error naming the field or the expression.
use stackscan::{LayerStack, layer_stack};
use stackscan_ui_tests::{Attn, Cfg, Mlp};

#[layer_stack(prefix = [Mlp, Mlp, Mlp], block = [Attn], layers = cfg.layers, prefetch_fsdp_weights)]
struct DeepSeekLike;

#[layer_stack(block = [Mlp, Attn], repeat = cfg.layers / 2)]
struct Halves;

#[layer_stack(block = [Mlp], layers = cfg.d)]
struct AsWide;

fn main() {
    for layers in [4, 61] {
        let stack = DeepSeekLike::stack(&Cfg { d: 4, layers }).unwrap();
        assert_eq!((stack.len(), stack.prefix_len()), (layers, 3));
    }
    let e = DeepSeekLike::layers(&Cfg { d: 4, layers: 3 }).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`Cfg.layers` is 3, which is not the prefix's 3 sub-layers + a positive multiple of the block's 1 (stack `DeepSeekLike`); the smallest is 4"
    );
    assert_eq!(Halves::layers(&Cfg { d: 4, layers: 6 }).unwrap(), 6);
    let e = Halves::layers(&Cfg { d: 4, layers: 1 }).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`cfg.layers / 2` is 0, but the block of stack `Halves` repeats at least once"
    );
    assert_eq!(AsWide::layers(&Cfg { d: 5, layers: 0 }).unwrap(), 5);
    assert!(AsWide::layers(&Cfg { d: -1, layers: 0 }).is_err());
}
