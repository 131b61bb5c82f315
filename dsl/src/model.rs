//! A whole model declared as one struct: the parts outside the stack (embedding, final norm,
//! head) as `#[param]`/`#[module]` fields, the stack as a `#[stack]` field of type
//! [`Layers<S>`] naming a `#[layer_stack]` type, the inputs as a `#[derive(Inputs)]` struct.
//! `#[derive(Model)]` implements [`Model`]; the user implements [`ModelForward`] — the
//! embedding before the stack and the loss after it — and [`stack_model`] lowers the whole
//! to the run-time [`StackModel`] the trainer takes, with the stack's options.
//!
//! The depth is the stack's, written once on its attribute (`#[layer_stack(..., layers =
//! cfg.layers)]`) and checked here when the model is built; the `#[stack]` field only names
//! the stack. It lives on the stack rather than the field because a stack is planned, printed
//! and priced without a model (`S::plan(&cfg)`).
//!
//! The forward is two methods, not one function calling the stack, because the stack runs in
//! the planner's loops between them and the two outer parts are differentiated separately: a
//! single traced function would put the embedding into the head's program too.
//!
//! ```
//! use stackscan::layer::{ActivationMarker, Forward};
//! use stackscan::model::{Layers, ModelForward, stack_model};
//! use stackscan::{Inputs, Model, Result, SubLayer, Tensor, layer_stack};
//!
//! #[derive(Clone, Debug)]
//! pub struct Cfg { vocab: i64, d: i64, layers: usize, batch: i64 }
//! pub enum Hidden {}
//! impl ActivationMarker for Hidden {}
//!
//! #[derive(SubLayer)]
//! #[sublayer(config = Cfg, carry = Hidden, name = "mlp")]
//! pub struct Mlp<T> {
//!     #[param(shape = [cfg.d, cfg.d], shard = 0)]
//!     w: T,
//! }
//! impl Forward for Mlp<Tensor> {
//!     fn forward(&self, _: &Cfg, h: &Tensor) -> Result<Tensor> {
//!         h.add(&h.matmul(&self.w)?.tanh()?)
//!     }
//! }
//! // The depth is written once, here: one stack type for every depth.
//! #[layer_stack(block = [Mlp], layers = cfg.layers, prefetch_fsdp_weights)]
//! pub struct Deep;
//!
//! #[derive(Inputs)]
//! #[inputs(config = Cfg)]
//! pub struct Batch<T> {
//!     #[input(shape = [cfg.batch], dtype = i32, values = 0..cfg.vocab)]
//!     tokens: T,
//!     #[input(shape = [cfg.batch], dtype = i32, values = 0..cfg.vocab)]
//!     labels: T,
//! }
//!
//! #[derive(Model)]
//! #[model(config = Cfg, inputs = Batch)]
//! pub struct Tiny<T> {
//!     #[param(shape = [cfg.vocab, cfg.d], shard = 0)]
//!     embed: T,
//!     #[stack]
//!     layers: Layers<Deep>,
//!     #[param(shape = [cfg.d, cfg.vocab], shard = 0)]
//!     head: T,
//! }
//!
//! impl ModelForward for Tiny<Tensor> {
//!     fn embed(&self, _: &Cfg, x: &Batch<Tensor>) -> Result<Tensor> {
//!         self.embed.take(&x.tokens, 0)
//!     }
//!     fn loss(&self, _: &Cfg, h: &Tensor, x: &Batch<Tensor>) -> Result<Tensor> {
//!         stackscan::nn::cross_entropy(&h.matmul(&self.head)?, &x.labels)
//!     }
//! }
//!
//! let cfg = Cfg { vocab: 16, d: 8, layers: 3, batch: 4 };
//! let (m, options) = stack_model::<Tiny<Tensor>>(&cfg)?;
//! let names: Vec<String> = m.parameters().into_iter().map(|p| p.path).collect();
//! assert_eq!(names, ["embed", "head", "layers.w"]);
//! assert_eq!(m.activation.dims, [4, 8]);
//! assert!(options.prefetch_fsdp_weights);
//! assert_eq!(m.stack.len(), 3);
//! // The depth is validated once, when the model is built, naming the field.
//! let e = stack_model::<Tiny<Tensor>>(&Cfg { layers: 0, ..cfg }).unwrap_err();
//! assert_eq!(
//!     e.to_string(),
//!     "`Cfg.layers` is 0, which is not a positive multiple of the block's 1 sub-layer (stack `Deep`); the smallest is 1"
//! );
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;

use crate::builder::{Scope, Tensor};
use crate::error::Result;
use crate::fsdp::{InputSpec, ParamSpec, StackModel};
use crate::layer::{LayerStack, Params};
use crate::plan::PlanOptions;

/// The stack field of a model struct: the `#[layer_stack]` type `S` that runs between the
/// embedding and the head. It holds no values; the stacked weights live in the stack.
pub struct Layers<S>(PhantomData<fn() -> S>);

impl<S> Layers<S> {
    /// The (empty) field value.
    pub const fn new() -> Self {
        Layers(PhantomData)
    }
}

impl<S> Default for Layers<S> {
    fn default() -> Self {
        Layers::new()
    }
}

impl<S> Clone for Layers<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Layers<S> {}

impl<S> fmt::Debug for Layers<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Layers<")?;
        f.write_str(core::any::type_name::<S>())?;
        f.write_str(">")
    }
}

/// The stack a `#[stack]` field names.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a stack field",
    label = "not `Layers<S>` of a `#[layer_stack]` type",
    note = "the `#[stack]` field has type `stackscan::model::Layers<S>` for a `#[layer_stack]` struct `S`"
)]
pub trait StackField {
    /// The stack.
    type Stack: LayerStack;
}

impl<S: LayerStack + 'static> StackField for Layers<S> {
    type Stack = S;
}

/// A model's inputs by name (tokens, labels), declared once with their per-device types and
/// value ranges; implemented by `#[derive(Inputs)]` on `I<Tensor>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a model's inputs",
    label = "not an inputs struct",
    note = "declare the inputs as a struct with `#[derive(Inputs)]`"
)]
pub trait Inputs: Params<Tensor> + 'static {
    /// The config the shapes are computed from.
    type Config: 'static;

    /// The inputs in declaration order.
    fn input_specs(cfg: &Self::Config) -> Vec<InputSpec>;
}

/// A whole model: its parameters outside the stack, its stack and its inputs; implemented by
/// `#[derive(Model)]` on `M<Tensor>`.
pub trait Model: Params<Tensor> + 'static {
    /// The config of the model, its stack and its inputs.
    type Config: Clone + 'static;
    /// The layer stack between the embedding and the head.
    type Stack: LayerStack<Config = Self::Config>;
    /// The inputs.
    type Inputs: Inputs<Config = Self::Config>;

    /// The parameters outside the stack, in declaration order, named by their path.
    fn outer_specs(cfg: &Self::Config) -> Vec<ParamSpec>;

    /// The plan options of the stack's attribute.
    fn options() -> PlanOptions {
        <Self::Stack as LayerStack>::OPTIONS
    }
}

/// What a model computes outside its stack; the user's half of a model.
#[diagnostic::on_unimplemented(
    message = "model `{Self}` has no forward functions",
    label = "no `ModelForward` impl",
    note = "implement `stackscan::model::ModelForward` for it: `embed` before the stack, `loss` after it"
)]
pub trait ModelForward: Model {
    /// Before the stack: the activation the first layer reads (the embedding lookup).
    fn embed(&self, cfg: &Self::Config, inputs: &Self::Inputs) -> Result<Tensor>;

    /// After the stack: the local mean loss of the last layer's output `h`.
    fn loss(&self, cfg: &Self::Config, h: &Tensor, inputs: &Self::Inputs) -> Result<Tensor>;

    /// After the stack: what the model predicts from the last layer's output `h` (a language
    /// model's logits, `[B, T, vocab]`), for inference and evaluation; [`logits_head`] makes
    /// it a head of [`fsdp::forward_step_on`](crate::fsdp::forward_step_on). The default: an
    /// error saying the model declares none.
    fn logits(&self, cfg: &Self::Config, h: &Tensor, inputs: &Self::Inputs) -> Result<Tensor> {
        let _ = (cfg, h, inputs);
        Err(crate::Error::invalid(
            "model",
            format!(
                "`{}` declares no logits (implement `ModelForward::logits`)",
                std::any::type_name::<Self>()
            ),
        ))
    }

    /// Checks a config beyond the shapes (head layouts, divisibility) before anything is
    /// built; the default accepts every config.
    fn check(cfg: &Self::Config) -> Result<()> {
        let _ = cfg;
        Ok(())
    }
}

/// The run-time model of `M` for `cfg` and the options of its stack's attribute: the depth
/// (the stack's, read from `cfg` when its attribute says so) checked once, the inputs and
/// outer parameters from the declarations, the activation between layers from tracing
/// `embed`.
pub fn stack_model<M: ModelForward>(cfg: &M::Config) -> Result<(StackModel, PlanOptions)> {
    let stack = M::Stack::stack(cfg)?;
    M::check(cfg)?;
    let inputs = <M::Inputs as Inputs>::input_specs(cfg);
    let outer_params = M::outer_specs(cfg);
    let activation = {
        let s = Scope::new("embed");
        let x: Vec<Tensor> = inputs.iter().map(|i| s.param(i.ty.clone())).collect();
        let w: Vec<Tensor> = outer_params
            .iter()
            .map(|p| s.param(p.full_type()))
            .collect();
        let h = M::from_values(w)?.embed(cfg, &M::Inputs::from_values(x)?)?;
        h.ty().clone()
    };
    let (c1, c2) = (cfg.clone(), cfg.clone());
    let model = StackModel {
        stack,
        kinds: M::Stack::kinds(cfg),
        activation,
        inputs,
        outer_params,
        pre: Rc::new(move |x, w| {
            M::from_values(w.to_vec())?.embed(&c1, &M::Inputs::from_values(x.to_vec())?)
        }),
        post: Rc::new(move |h, x, w| {
            M::from_values(w.to_vec())?.loss(&c2, h, &M::Inputs::from_values(x.to_vec())?)
        }),
    };
    Ok((model, M::options()))
}

/// `M`'s [`ModelForward::logits`] at `cfg` as a head of the stack's output, in the form
/// [`fsdp::forward_step_on`](crate::fsdp::forward_step_on) takes: `(h, inputs, outer
/// weights) → logits`.
pub fn logits_head<M: ModelForward>(cfg: &M::Config) -> crate::fsdp::PostFn {
    let c = cfg.clone();
    Rc::new(move |h, x, w| {
        M::from_values(w.to_vec())?.logits(&c, h, &M::Inputs::from_values(x.to_vec())?)
    })
}
