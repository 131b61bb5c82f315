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
//! #[layer_stack(block = [Mlp], layers = 5, prefetch_fsdp_weights)]
//! pub struct Deep;
//!
//! let (forward, backward) = Deep::plan_notation()?;
//! assert_eq!(forward, "[mlp 0 … mlp 3] → [mlp 4]");
//! assert_eq!(backward, "[mlp 4 … mlp 1] → [mlp 0]");
//! let kinds = Deep::kinds(&Config { d: 8, f: 16 });
//! assert_eq!(kinds[0].params[1].shape, [16, 8]);
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
/// `'static`: a stack is a type-level declaration (a unit struct), named in models and kinds.
pub trait LayerStack: 'static {
    /// The config every sub-layer of the stack reads.
    type Config: Clone + 'static;
    /// The plan options, checked at compile time with [`PlanOptions::validate`].
    const OPTIONS: PlanOptions;
    /// Number of layers (prefix included).
    const LAYERS: usize;
    /// How often the block repeats.
    const REPEAT: usize;

    /// The order of kinds.
    fn stack() -> Result<Stack>;

    /// One [`LayerKind`] per distinct sub-layer, in order of first appearance.
    fn kinds(cfg: &Self::Config) -> Vec<LayerKind>;

    /// The schedule, from the one planner.
    fn plan() -> Result<Plan> {
        Plan::new(&Self::stack()?, Self::OPTIONS)
    }

    /// The forward and backward schedule in the plan notation
    /// (`[GDN 0, GDN 1] → [GDN 2] → [attention]`).
    fn plan_notation() -> Result<(String, String)> {
        let stack = Self::stack()?;
        let plan = Plan::new(&stack, Self::OPTIONS)?;
        Ok((
            plan.forward.notation(&stack),
            plan.backward.notation(&stack),
        ))
    }

    /// Both passes with loop shapes, one per line.
    fn describe() -> Result<String> {
        let stack = Self::stack()?;
        Ok(Plan::new(&stack, Self::OPTIONS)?.describe(&stack))
    }

    /// Checks a config's depth against the declared one, once, when a model is built: the
    /// block pattern is fixed at compile time, so a config field that also holds the depth
    /// (`LlamaConfig.layers`, read by initialisers) must agree with it. `field` names that
    /// field in the error.
    fn check_depth(field: &'static str, layers: usize) -> Result<()> {
        if layers == Self::LAYERS {
            return Ok(());
        }
        Err(crate::error::Error::DepthMismatch {
            stack: core::any::type_name::<Self>()
                .rsplit("::")
                .next()
                .unwrap_or_default(),
            field,
            config: layers,
            declared: Self::LAYERS,
            repeat: Self::REPEAT,
        })
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
            stack: Self::stack()?,
            kinds: Self::kinds(cfg),
            activation,
            inputs,
            outer_params,
            pre,
            post,
        })
    }
}

/// What the macros' generated code names; not public API.
#[doc(hidden)]
pub mod __private {
    use core::any::TypeId;
    use core::marker::PhantomData;

    pub use super::{ActivationMarker, Forward, LayerStack, Params, SubLayer, layer_kind};
    pub use crate::builder::Tensor;
    pub use crate::error::Result;
    pub use crate::fsdp::InputSpec;
    pub use crate::fsdp::{Init, LayerKind, ParamSpec};
    pub use crate::model::{Inputs, Layers, Model, StackField};
    pub use crate::module::Module;
    pub use crate::plan::{PlanOptions, Stack};
    pub use crate::types::TensorType;
    pub use crate::{DType, Error};
    pub use core::convert::TryFrom;
    pub use core::option::Option::{self, None, Some};
    pub use core::result::Result::{Err, Ok};
    pub use std::string::String;
    pub use std::vec::Vec;

    /// A block entry as a value: `Mlp::__STACKSCAN_ENTRY` names `Mlp<_>`, and the bounds of
    /// the function it is passed to infer `_` (`Tensor`, the one value type with a `SubLayer`
    /// impl). So the stack never writes `Mlp<Tensor>` itself, and an entry that is not
    /// generic (a type alias `type AttnT = Attn<Tensor>`, a struct whose derive failed) is
    /// named correctly too.
    pub struct EntryOf<T: ?Sized>(PhantomData<fn() -> T>);

    impl<T: ?Sized> Clone for EntryOf<T> {
        fn clone(&self) -> Self {
            *self
        }
    }

    impl<T: ?Sized> Copy for EntryOf<T> {}

    impl<T: ?Sized> core::fmt::Debug for EntryOf<T> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str(core::any::type_name::<T>())
        }
    }

    /// Gives every type the constant [`EntryOf`] of itself.
    pub trait Entry {
        /// The entry.
        const __STACKSCAN_ENTRY: EntryOf<Self> = EntryOf(PhantomData);
    }

    impl<T: ?Sized> Entry for T {}

    /// The kind name of entry `L`.
    pub const fn name<L: SubLayer>(_: EntryOf<L>) -> &'static str {
        L::NAME
    }

    /// Whether entries `A` and `B` (spelled differently) with the same kind name are two
    /// sub-layers: their identities differ, or one is unknown.
    pub const fn clash<A: SubLayer, B: SubLayer>(_: EntryOf<A>, _: EntryOf<B>) -> bool {
        str_eq(A::NAME, B::NAME) && (A::IDENTITY.is_empty() || !str_eq(A::IDENTITY, B::IDENTITY))
    }

    /// The first entry `F` of a stack whose config is `C`, checked once to have that config,
    /// and the config seen as `F`'s: the kinds of the other entries are then checked against
    /// `F` alone, so a wrong `config = Type` is one error, on the first entry.
    pub fn with_config<C, F>(first: EntryOf<F>, cfg: &C) -> (EntryOf<F>, &F::Config)
    where
        F: SubLayer<Config = C>,
    {
        (first, cfg)
    }

    /// The kind of entry `L` of a stack whose first entry is `F`: the bounds check that `L`
    /// is a sub-layer with a forward function, the same config and the same carry. The
    /// `TypeId` lets [`distinct`] merge entries that are one type spelled two ways.
    pub fn kind<F, L>(_: EntryOf<F>, _: EntryOf<L>, cfg: &F::Config) -> (TypeId, LayerKind)
    where
        F: SubLayer,
        L: Forward + SubLayer<Config = F::Config, Carry = F::Carry>,
    {
        (TypeId::of::<L>(), layer_kind::<L>(cfg))
    }

    /// The kinds in order of first appearance, one per type.
    pub fn distinct<const N: usize>(kinds: [(TypeId, LayerKind); N]) -> Vec<LayerKind> {
        let mut seen = Vec::with_capacity(N);
        let mut out = Vec::with_capacity(N);
        for (id, kind) in kinds {
            if !seen.contains(&id) {
                seen.push(id);
                out.push(kind);
            }
        }
        out
    }

    /// The array as a `Vec`, without naming `From` (the caller's scope may lack the prelude).
    pub fn list<T, const N: usize>(items: [T; N]) -> Vec<T> {
        Vec::from(items)
    }

    /// `a == b`, usable in `const` items.
    pub const fn str_eq(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The error of [`Params::from_values`] given the wrong number of values.
    pub fn wrong_count(layer: &str, expected: usize, got: usize) -> Error {
        Error::invalid(
            "sub-layer",
            format!("`{layer}` has {expected} parameters, got {got} values"),
        )
    }

    /// The enclosing config handed to a sub-module without `config = <expr>`: compiles only
    /// when the sub-module reads the same config type.
    #[diagnostic::on_unimplemented(
        message = "the sub-module reads config `{B}`, but the enclosing config is `{Self}`",
        label = "reads another config",
        note = "project the enclosing config onto it: `#[module(config = <expression over cfg>)]`"
    )]
    pub trait SameConfig<B> {
        /// `self` as the sub-module's config.
        fn same(&self) -> &B;
    }

    impl<T> SameConfig<T> for T {
        fn same(&self) -> &T {
            self
        }
    }

    /// A sub-module's parameter specs renamed into its parent: `field.name`.
    pub fn nested(field: &str, specs: Vec<ParamSpec>) -> Vec<ParamSpec> {
        specs
            .into_iter()
            .map(|mut p| {
                p.name = crate::module::join(field, &p.name);
                p
            })
            .collect()
    }

    /// The values of a struct being rebuilt by [`Params::from_values`], consumed field by
    /// field; the caller has checked the count, so running out is reported, never a panic.
    #[derive(Debug)]
    pub struct Values<T> {
        values: std::vec::IntoIter<T>,
        layer: &'static str,
        expected: usize,
        got: usize,
    }

    impl<T> Values<T> {
        /// `values` for struct `layer` of `expected` parameters; a wrong count is an error.
        pub fn new(values: Vec<T>, layer: &'static str, expected: usize) -> Result<Self> {
            let got = values.len();
            if got != expected {
                return Err(wrong_count(layer, expected, got));
            }
            Ok(Values {
                values: values.into_iter(),
                layer,
                expected,
                got,
            })
        }

        /// The next parameter's value.
        pub fn one(&mut self) -> Result<T> {
            self.values
                .next()
                .ok_or_else(|| wrong_count(self.layer, self.expected, self.got))
        }

        /// The next sub-module, built from its `M::LEN` values.
        pub fn module<M: Params<T>>(&mut self) -> Result<M> {
            let values: Vec<T> = self.values.by_ref().take(M::LEN).collect();
            M::from_values(values)
        }
    }

    /// The error of a declaration that failed to compile (its stub is never called).
    pub fn invalid_declaration(layer: &str) -> Error {
        Error::invalid("sub-layer", format!("`{layer}` has an invalid declaration"))
    }

    /// The error of a layer stack whose declaration failed to compile (its stub is never
    /// called).
    pub fn invalid_stack(stack: &str) -> Error {
        Error::invalid(
            "layer stack",
            format!("`{stack}` has an invalid declaration"),
        )
    }
}
