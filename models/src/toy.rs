//! The toy block `[A, A, A, B]` of the FSDP equivalence tests, declared with the macros: A is
//! a gated MLP (`w1 [d, f]` sharded on 0, `w2 [f, d]` sharded on its minor dimension 1, a
//! replicated gain), B a residual sine layer (`u [d, d]`). Kinds with different weight shapes
//! make the planner peel and group, so the block exercises everything the schedule does.
//!
//! ```
//! use stackscan::LayerStack;
//! use stackscan_models::toy::{Toy, ToyConfig, ToyRepeated, model};
//!
//! let (forward, backward) = Toy::plan_notation(&ToyConfig::small())?;
//! assert_eq!(forward, "[A0, A1] → [A2] → [B]");
//! assert_eq!(backward, "[B] → [A2] → [A1] → [A0]");
//! // A literal count: checked at compile time, the same at every config.
//! assert_eq!(ToyRepeated::layers(&ToyConfig::small())?, 12);
//! let m = model::<ToyRepeated>(&ToyConfig::small())?;
//! assert_eq!(m.kinds[0].params[1].shard_dim, Some(1));
//! let names: Vec<String> = m.parameters().into_iter().map(|p| p.path).collect();
//! assert_eq!(names[..4], ["embed", "head", "bias", "layers.A.w1"]);
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::rc::Rc;

use stackscan::fsdp::{InputSpec, LayerKind, ParamSpec, PostFn, PreFn, StackModel};
use stackscan::layer::{ActivationMarker, Forward};
use stackscan::model::{Layers, ModelForward, stack_model};
use stackscan::plan::Stack;
use stackscan::{
    DType, Error, Inputs, LayerStack, Model, Result, SubLayer, Tensor, TensorType, layer_stack,
};

/// Sizes of the toy model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToyConfig {
    /// Width of the activation.
    pub d: i64,
    /// Hidden width of A.
    pub f: i64,
    /// Rows per device.
    pub batch: i64,
}

impl ToyConfig {
    /// The sizes of the runtime's equivalence tests.
    pub const fn small() -> Self {
        ToyConfig {
            d: 8,
            f: 16,
            batch: 2,
        }
    }
}

/// The activation `[batch, d]` passed between the toy's layers.
#[derive(Debug)]
pub enum Hidden {}

impl ActivationMarker for Hidden {}

/// Kind A: `h + (tanh(h·w1)·w2) ⊙ gain`.
#[derive(Debug, SubLayer)]
#[sublayer(config = ToyConfig, carry = Hidden, name = "A")]
pub struct GatedMlp<T> {
    /// Up projection.
    #[param(shape = [cfg.d, cfg.f], shard = 0)]
    pub w1: T,
    /// Down projection, sharded on its minor dimension.
    #[param(shape = [cfg.f, cfg.d], shard = 1)]
    pub w2: T,
    /// Output gain.
    #[param(shape = [cfg.d], replicated)]
    pub gain: T,
}

impl Forward for GatedMlp<Tensor> {
    fn forward(&self, _cfg: &ToyConfig, h: &Tensor) -> Result<Tensor> {
        gated_mlp(h, &self.w1, &self.w2, &self.gain)
    }
}

fn gated_mlp(h: &Tensor, w1: &Tensor, w2: &Tensor, gain: &Tensor) -> Result<Tensor> {
    let inner = h.matmul(w1)?.tanh()?.matmul(w2)?;
    h.add(&inner.mul(&gain.broadcast_to(h.dims())?)?)
}

/// Kind B: `h + sin(h·u)`.
#[derive(Debug, SubLayer)]
#[sublayer(config = ToyConfig, carry = Hidden, name = "B")]
pub struct SineResidual<T> {
    /// The square weight.
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    pub u: T,
}

impl Forward for SineResidual<Tensor> {
    fn forward(&self, _cfg: &ToyConfig, h: &Tensor) -> Result<Tensor> {
        sine_residual(h, &self.u)
    }
}

fn sine_residual(h: &Tensor, u: &Tensor) -> Result<Tensor> {
    h.add(&h.matmul(u)?.sin()?)
}

/// One toy block with prefetch and deferred reduce-scatter.
#[layer_stack(
    block = [GatedMlp, GatedMlp, GatedMlp, SineResidual],
    repeat = 1,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct Toy;

/// Three toy blocks (12 layers): the outer loop over blocks.
#[layer_stack(
    block = [GatedMlp, GatedMlp, GatedMlp, SineResidual],
    layers = 12,
    prefetch_fsdp_weights,
    defer_grad_reduce_scatter,
)]
#[derive(Debug)]
pub struct ToyRepeated;

/// What runs outside the toy's stack: inputs `x`, `y: [batch, d]`, `embed` before the stack,
/// `head` and `bias` after it, and a mean squared error.
struct Outer {
    activation: TensorType,
    inputs: Vec<InputSpec>,
    params: Vec<ParamSpec>,
    pre: PreFn,
    post: PostFn,
}

fn outer(cfg: &ToyConfig) -> Outer {
    let (f32, d) = (DType::F32, cfg.d);
    let row = TensorType::new(f32, [cfg.batch, d]);
    Outer {
        inputs: vec![
            InputSpec::new("x", row.clone()),
            InputSpec::new("y", row.clone()),
        ],
        activation: row,
        params: vec![
            ParamSpec::sharded("embed", &[d, d], f32, 0),
            ParamSpec::sharded("head", &[d, d], f32, 1),
            ParamSpec::replicated("bias", &[d], f32),
        ],
        pre: Rc::new(|inp, w| match (inp, w) {
            ([x, _], [embed, _, _]) => x.matmul(embed),
            _ => Err(arity(
                "toy outer",
                "2 inputs and 3 weights",
                inp.len() + w.len(),
            )),
        }),
        post: Rc::new(|h, inp, w| match (inp, w) {
            ([_, y], [_, head, bias]) => mse(h, y, head, bias),
            _ => Err(arity(
                "toy outer",
                "2 inputs and 3 weights",
                inp.len() + w.len(),
            )),
        }),
    }
}

/// A positional list of the wrong length reached a closure that names its items.
fn arity(op: &'static str, expected: &str, got: usize) -> Error {
    Error::InvalidOp {
        op,
        message: format!("expected {expected}, got {got} tensors"),
    }
}

/// The toy model's inputs: rows `x` and their targets `y`, `[batch, d]` each.
#[derive(Debug, Inputs)]
#[inputs(config = ToyConfig)]
pub struct Rows<T> {
    /// Input rows.
    #[input(shape = [cfg.batch, cfg.d], dtype = f32)]
    pub x: T,
    /// Targets.
    #[input(shape = [cfg.batch, cfg.d], dtype = f32)]
    pub y: T,
}

/// The whole toy model over stack `S`: a linear embedding, the stack, a linear head with a
/// bias, and the mean squared error.
#[derive(Debug, Model)]
#[model(config = ToyConfig, inputs = Rows)]
pub struct ToyModel<T, S> {
    /// `[d, d]`, sharded on 0.
    #[param(shape = [cfg.d, cfg.d], shard = 0)]
    pub embed: T,
    /// The stack.
    #[stack]
    pub layers: Layers<S>,
    /// `[d, d]`, sharded on its minor dimension.
    #[param(shape = [cfg.d, cfg.d], shard = 1)]
    pub head: T,
    /// `[d]`, replicated.
    #[param(shape = [cfg.d], replicated)]
    pub bias: T,
}

impl<S: LayerStack<Config = ToyConfig> + 'static> ModelForward for ToyModel<Tensor, S> {
    fn embed(&self, _: &ToyConfig, x: &Rows<Tensor>) -> Result<Tensor> {
        x.x.matmul(&self.embed)
    }

    fn loss(&self, _: &ToyConfig, h: &Tensor, x: &Rows<Tensor>) -> Result<Tensor> {
        mse(h, &x.y, &self.head, &self.bias)
    }
}

/// The head's mean squared error against `y`.
fn mse(h: &Tensor, y: &Tensor, head: &Tensor, bias: &Tensor) -> Result<Tensor> {
    let out = h.matmul(head)?.add(&bias.broadcast_to(h.dims())?)?;
    out.sub(y)?.square()?.mean(&[0, 1])
}

/// The declared toy model over stack `S`, lowered to the run-time model.
pub fn model<S: LayerStack<Config = ToyConfig> + 'static>(cfg: &ToyConfig) -> Result<StackModel> {
    Ok(stack_model::<ToyModel<Tensor, S>>(cfg)?.0)
}

/// The same model built with the run-time API alone: `[A, A, A, B] × repeat`, prefetch options
/// left to the caller. Proof that the macros add nothing the API cannot express.
pub fn hand_built(cfg: &ToyConfig, repeat: usize) -> Result<StackModel> {
    let (f32, d, f) = (DType::F32, cfg.d, cfg.f);
    let a = LayerKind {
        name: "A".into(),
        params: vec![
            ParamSpec::sharded("w1", &[d, f], f32, 0),
            ParamSpec::sharded("w2", &[f, d], f32, 1),
            ParamSpec::replicated("gain", &[d], f32),
        ],
        forward: Rc::new(|h, w| match w {
            [w1, w2, gain] => gated_mlp(h, w1, w2, gain),
            _ => Err(arity("A", "3 weights", w.len())),
        }),
    };
    let b = LayerKind {
        name: "B".into(),
        params: vec![ParamSpec::sharded("u", &[d, d], f32, 0)],
        forward: Rc::new(|h, w| match w {
            [u] => sine_residual(h, u),
            _ => Err(arity("B", "1 weight", w.len())),
        }),
    };
    let o = outer(cfg);
    Ok(StackModel {
        stack: Stack::blocks(&["A", "A", "A", "B"], repeat)?,
        kinds: vec![a, b],
        activation: o.activation,
        inputs: o.inputs,
        outer_params: o.params,
        pre: o.pre,
        post: o.post,
    })
}
