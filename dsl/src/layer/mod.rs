//! Sub-layers and layer stacks declared as structs: the traits `#[derive(SubLayer)]` and
//! `#[layer_stack(...)]` implement, and the glue from them to a [`StackModel`].
//!
//! A sub-layer is a struct generic over the value type of its parameters, one field per
//! parameter, so the same declaration holds host arrays, traced [`Tensor`]s or gathered
//! weights. Its *carry* is a marker type naming the activation it reads and writes; a stack
//! passes one activation from layer to layer, so every sub-layer of a stack must have the same
//! carry (and the same config type), which the compiler checks on each block entry.
//!
//! ```
//! use stackscan::layer::{ActivationMarker, Forward, LayerStack};
//! use stackscan::{Result, SubLayer, Tensor, layer_stack};
//!
//! #[derive(Clone, Debug)]
//! pub struct Config {
//!     d: i64,
//!     f: i64,
//!     layers: usize,
//! }
//!
//! /// The activation `[batch, d]` passed between layers.
//! pub enum Hidden {}
//! impl ActivationMarker for Hidden {}
//!
//! #[derive(SubLayer)]
//! #[sublayer(config = Config, carry = Hidden, name = "mlp")]
//! pub struct Mlp<T> {
//!     #[param(shape = [cfg.d, cfg.f], shard = 0)]
//!     up: T,
//!     #[param(shape = [cfg.f, cfg.d], shard = 1, init = normal(0.01))]
//!     down: T,
//! }
//!
//! impl Forward for Mlp<Tensor> {
//!     fn forward(&self, _cfg: &Config, h: &Tensor) -> Result<Tensor> {
//!         h.add(&h.matmul(&self.up)?.tanh()?.matmul(&self.down)?)
//!     }
//! }
//!
//! // The block pattern is fixed here; the depth is the config's.
//! #[layer_stack(block = [Mlp], layers = cfg.layers, prefetch_fsdp_weights)]
//! pub struct Deep;
//!
//! let cfg = Config { d: 8, f: 16, layers: 5 };
//! let (forward, backward) = Deep::plan_notation(&cfg)?;
//! assert_eq!(forward, "[mlp 0 … mlp 3] → [mlp 4]");
//! assert_eq!(backward, "[mlp 4 … mlp 1] → [mlp 0]");
//! assert_eq!(Deep::layers(&Config { layers: 32, ..cfg.clone() })?, 32);
//! let kinds = Deep::kinds(&cfg);
//! assert_eq!(kinds[0].params[1].shape, [16, 8]);
//! // A depth the pattern cannot hold is an error naming the field, checked once per build.
//! let e = Deep::stack(&Config { layers: 0, ..cfg }).unwrap_err();
//! assert_eq!(
//!     e.to_string(),
//!     "`Config.layers` is 0, which is not a positive multiple of the block's 1 sub-layer (stack `Deep`); the smallest is 1"
//! );
//! # Ok::<(), stackscan::Error>(())
//! ```

use std::rc::Rc;

use crate::builder::Tensor;
use crate::error::Result;
use crate::fsdp::{InputSpec, LayerKind, ParamSpec, PostFn, PreFn, StackModel};
use crate::plan::{Plan, PlanOptions, Stack};
use crate::types::TensorType;

/// A type naming an activation passed between layers (`Hidden`, `Residual`, …).
///
/// Implement it on an empty enum; it exists only at the type level.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an activation marker",
    label = "not an activation marker",
    note = "declare one with `pub enum Hidden {{}}` and `impl stackscan::layer::ActivationMarker for Hidden {{}}`"
)]
pub trait ActivationMarker: 'static {}

/// A sub-layer's parameters as values of type `T`, in declaration order.
///
/// `#[derive(SubLayer)]` and `#[derive(Module)]` implement it for every `T`, so one
/// declaration holds host arrays, traced tensors or gathered weights; a sub-module's values
/// are a run inside its parent's.
#[diagnostic::on_unimplemented(
    message = "`{Self}` holds no parameters over `{T}`",
    label = "not a module or sub-layer over `{T}`",
    note = "a `#[module]` field's type must be a struct with `#[derive(Module)]`, over the enclosing struct's value type"
)]
pub trait Params<T>: Sized {
    /// Number of parameters.
    const LEN: usize;

    /// Builds the struct from one value per parameter, in declaration order.
    fn from_values(values: Vec<T>) -> Result<Self>;

    /// The values in declaration order.
    fn into_values(self) -> Vec<T>;

    /// References to the values in declaration order.
    fn values(&self) -> Vec<&T>;
}

/// One kind of sub-layer: its parameters, its config and the activation it carries.
///
/// Implemented by `#[derive(SubLayer)]` on `S<Tensor>` for a struct `S<T>`; `S<T>` for other
/// `T` is [`SubLayer::Of<T>`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sub-layer",
    label = "not a sub-layer",
    note = "a block entry must be a struct with `#[derive(SubLayer)]`"
)]
pub trait SubLayer: Params<Tensor> + 'static {
    /// The model config the parameter shapes are computed from.
    type Config: Clone + 'static;
    /// The activation this sub-layer reads and writes.
    type Carry: ActivationMarker;
    /// The same struct over another value type.
    type Of<T>: Params<T>;
    /// The kind name (in plans and checkpoints).
    const NAME: &'static str;
    /// Where the struct is declared (module path, name, line and column of its derive), set by
    /// `#[derive(SubLayer)]`. A stack compares it at compile time, where `TypeId` is not
    /// available, to tell one sub-layer spelled two ways (a type alias, a `use … as` rename)
    /// from two sub-layers sharing a kind name. Empty, the default, means unknown: such an
    /// entry is one kind with another only when both are spelled alike.
    #[doc(hidden)]
    const IDENTITY: &'static str = "";

    /// The parameters of one layer, in declaration order.
    fn param_specs(cfg: &Self::Config) -> Vec<ParamSpec>;
}

/// A sub-layer's forward function, written with the DSL on traced weights.
#[diagnostic::on_unimplemented(
    message = "sub-layer `{Self}` has no forward function",
    label = "no `Forward` impl",
    note = "implement `stackscan::layer::Forward` for it"
)]
pub trait Forward: SubLayer {
    /// Runs one layer on the activation `h`.
    fn forward(&self, cfg: &Self::Config, h: &Tensor) -> Result<Tensor>;
}

/// The [`LayerKind`] of sub-layer `L` for `cfg`: its parameters and its forward function.
pub fn layer_kind<L: Forward>(cfg: &L::Config) -> LayerKind {
    let c = cfg.clone();
    LayerKind {
        name: L::NAME.to_owned(),
        params: L::param_specs(cfg),
        forward: Rc::new(move |h, w| L::from_values(w.to_vec())?.forward(&c, h)),
    }
}

/// A layer stack: sub-layer kinds in order and the plan options; implemented by
/// `#[layer_stack(...)]`.
///
/// The block pattern (prefix and block) is fixed by the type; the depth may be the config's
/// (`layers = cfg.layers`), so every function that needs it takes the config and one stack type
/// serves every depth. A depth read from the config is validated by [`LayerStack::stack`] (a
/// typed [`Error::Depth`](crate::Error::Depth) naming the field and the pattern); a literal or
/// `const` depth is checked at compile time.
///
/// `'static`: a stack is a type-level declaration (a unit struct), named in models and kinds.
pub trait LayerStack: 'static {
    /// The config every sub-layer of the stack reads.
    type Config: Clone + 'static;
    /// The plan options, checked at compile time with [`PlanOptions::validate`].
    const OPTIONS: PlanOptions;

    /// The order of kinds at `cfg`'s depth; the depth is checked here.
    fn stack(cfg: &Self::Config) -> Result<Stack>;

    /// One [`LayerKind`] per distinct sub-layer, in order of first appearance.
    fn kinds(cfg: &Self::Config) -> Vec<LayerKind>;

    /// Number of layers at `cfg`'s depth (prefix included).
    fn layers(cfg: &Self::Config) -> Result<usize> {
        Ok(Self::stack(cfg)?.len())
    }

    /// The schedule under the attribute's options, from the one planner.
    fn plan(cfg: &Self::Config) -> Result<Plan> {
        Plan::new(&Self::stack(cfg)?, Self::OPTIONS)
    }

    /// The forward and backward schedule in the plan notation
    /// (`[GDN 0, GDN 1] → [GDN 2] → [attention]`).
    fn plan_notation(cfg: &Self::Config) -> Result<(String, String)> {
        let stack = Self::stack(cfg)?;
        let plan = Plan::new(&stack, Self::OPTIONS)?;
        Ok((
            plan.forward.notation(&stack),
            plan.backward.notation(&stack),
        ))
    }

    /// Both passes with loop shapes, one per line.
    fn describe(cfg: &Self::Config) -> Result<String> {
        let stack = Self::stack(cfg)?;
        Ok(Plan::new(&stack, Self::OPTIONS)?.describe(&stack))
    }

    /// The stack model: these kinds with what runs before and after the stack.
    fn stack_model(
        cfg: &Self::Config,
        activation: TensorType,
        inputs: Vec<InputSpec>,
        outer_params: Vec<ParamSpec>,
        pre: PreFn,
        post: PostFn,
    ) -> Result<StackModel> {
        Ok(StackModel {
            stack: Self::stack(cfg)?,
            kinds: Self::kinds(cfg),
            activation,
            inputs,
            outer_params,
            pre,
            post,
        })
    }
}

mod depth;
pub use depth::CountValue;
pub(crate) use depth::message as depth_message;
#[doc(hidden)]
pub mod private;
