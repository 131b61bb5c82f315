//! What the macros' generated code names; not public API.

use core::any::TypeId;
use core::marker::PhantomData;

pub use super::depth::{Count, Misfit, Source, stack as stack_of, value as count_value};
pub use super::{ActivationMarker, Forward, LayerStack, Params, SubLayer, layer_kind};
pub use crate::builder::Tensor;
pub use crate::error::Result;
pub use crate::fsdp::InputSpec;
pub use crate::fsdp::{Init, LayerKind, ParamSpec};
pub use crate::model::{Inputs, Layers, Model, StackField};
pub use crate::module::Module;
pub use crate::plan::{PlanOptions, Stack};
pub use crate::types::TensorType;
pub use crate::{DType, Error, Precision};
pub use core::clone::Clone;
pub use core::convert::TryFrom;
// Through here rather than `::core`, which in an edition-2015 crate names a module of its
// root; and a user type named `usize` or `str` in scope is not the one generated code means.
pub use core::option::Option::{self, None, Some};
pub use core::primitive;
pub use core::result::Result::{Err, Ok};
pub use core::{column, concat, line, module_path, panic};
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
