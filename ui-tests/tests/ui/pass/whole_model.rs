// A whole model generic over its stack: outer parameters and a module by path, the stack as
// a field, inputs declared once, one `embed`/`loss` pair, the depth checked against the
// config and the options taken from the stack's attribute.
use stackscan::model::{Layers, ModelForward, stack_model};
use stackscan::{LayerStack, Model, Result, Tensor, layer_stack};
use stackscan_ui_tests::{Batch, Cfg, Mlp, Proj, TwoMlps};

#[layer_stack(block = [Mlp], layers = 3)]
struct ThreeMlps;

#[derive(Model)]
#[model(config = Cfg, inputs = Batch)]
struct Tiny<T, S> {
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    embed: T,
    #[stack(layers = 2)]
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
    let cfg = Cfg { d: 4 };
    let (m, options) = stack_model::<Tiny<Tensor, TwoMlps>>(&cfg).unwrap();
    assert_eq!(options, TwoMlps::OPTIONS);
    let names = m.weight_names();
    assert_eq!(names, ["embed", "head.w", "layers.w"]);
    assert_eq!(m.inputs[0].values, Some(0..4));
    assert_eq!(m.activation.dims, [4, 4]);
    assert_eq!(<Tiny<Tensor, TwoMlps> as Model>::depth(&cfg), Some(("2", 2)));
    // The same model over a stack of another depth fails once, naming both.
    let e = stack_model::<Tiny<Tensor, ThreeMlps>>(&cfg).unwrap_err();
    assert!(matches!(e, stackscan::Error::DepthMismatch { config: 2, declared: 3, .. }), "{e}");
}
