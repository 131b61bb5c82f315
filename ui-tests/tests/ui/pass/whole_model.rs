// A whole model generic over its stack: outer parameters and a module by path, the stack as
// a field, inputs declared once, one `embed`/`loss` pair, the depth written once (the stack's
// `layers = cfg.layers`) and checked when the model is built, and the options taken from the
// stack's attribute.
use stackscan::model::{Layers, ModelForward, stack_model};
use stackscan::{LayerStack, Model, Result, Tensor};
use stackscan_ui_tests::{Batch, Cfg, Mlps, Proj, TwoMlps};

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T, S> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack]
    layers: Layers<S>,
    #[module]
    head: Proj<T>,
}

impl<S: LayerStack<Config = Cfg> + 'static> ModelForward for Tiny<Tensor, S> {
    fn embed(&self, _: &Cfg, x: &Batch<Tensor>) -> Result<Tensor> {
        self.embed.take(&x.tokens, 0)
    }

    fn loss(&self, _: &Cfg, h: &Tensor, x: &Batch<Tensor>) -> Result<Tensor> {
        stackscan::nn::cross_entropy(&h.matmul(&self.head.w)?, &x.tokens)
    }
}

fn main() {
    let cfg = Cfg { d: 4, layers: 5 };
    let (m, options) = stack_model::<Tiny<Tensor, Mlps>>(&cfg).unwrap();
    assert_eq!(options, Mlps::OPTIONS);
    assert_eq!(m.stack.len(), 5, "the config's depth");
    let names = m.weight_names();
    assert_eq!(names, ["embed", "head.w", "layers.w"]);
    assert_eq!(m.inputs[0].values, Some(0..4));
    assert_eq!(m.activation.dims, [4, 4]);
    assert_eq!(<Tiny<Tensor, Mlps> as Model>::outer_specs(&cfg).len(), 2);
    // A literal count is the stack's whatever the config says.
    assert_eq!(stack_model::<Tiny<Tensor, TwoMlps>>(&cfg).unwrap().0.stack.len(), 2);
    // A depth the block cannot hold fails once, naming the field and the pattern.
    let e = stack_model::<Tiny<Tensor, Mlps>>(&Cfg { layers: 0, ..cfg }).unwrap_err();
    assert!(
        matches!(&e, stackscan::Error::Depth { field, value: 0, prefix: 0, block: 1, .. } if field == "Cfg.layers"),
        "{e}"
    );
}
