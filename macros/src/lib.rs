//! Procedural macros of stackscan, re-exported by the `stackscan` crate: use them as
//! `stackscan::SubLayer` and `stackscan::layer_stack`.
//!
//! Each macro parses its input into a model that keeps the user's syntax for spans, checks the
//! whole model (collecting every error), and expands a validated model; the planner itself
//! lives once, in `stackscan::plan`, and the generated code calls it. What cannot be checked
//! syntactically fails through trait bounds and `const` evaluation spanned on the user's
//! tokens. Generated code names the DSL through `::stackscan::__private`, or
//! `<path>::__private` under the macros' `crate = "path"` option.

mod args;
mod config;
mod errors;
#[cfg(test)]
mod fuzz_tests;
mod stack;
mod sublayer;
#[cfg(test)]
mod tests;

use proc_macro::TokenStream;

/// Derives `stackscan::layer::SubLayer` (on `S<Tensor>`) and `stackscan::layer::Params`
/// (on `S<T>` for every `T`) for a struct with one type parameter and one field per parameter.
///
/// ```ignore
/// #[derive(SubLayer)]
/// #[sublayer(config = ToyConfig, carry = Hidden, name = "A")]
/// pub struct Mlp<T> {
///     #[param(shape = [cfg.d, cfg.f], shard = 0)]
///     w1: T,
///     #[param(shape = [cfg.f, cfg.d], shard = 1, init = normal(0.02 / 2.0))]
///     w2: T,
///     #[param(shape = [cfg.d], replicated)]
///     gain: T,
/// }
/// ```
///
/// Struct attribute `#[sublayer(...)]`:
/// - `config = Type` (required): the config the shapes are computed from;
/// - `carry = Type` (required): an `ActivationMarker` naming the activation the layer reads
///   and writes; every sub-layer of a stack has the same carry;
/// - `name = "kind"`: the kind name in plans (default: the struct's name);
/// - `crate = "path"`: the path the `stackscan` crate is reached by (default `::stackscan`),
///   for a renamed dependency or a re-export, as serde's `#[serde(crate = "...")]`.
///
/// Field attribute `#[param(...)]`, one per field:
/// - `shape = [e0, e1, …]` (required): `i64` expressions; the config is bound to `cfg`
///   (a `&Config`), so `shape = [cfg.d_model, cfg.ffn]`. The macro renames each such `cfg` to
///   a binding of its own, so an item named `cfg` in scope (a `const` or `static`) does not
///   turn the binding into a pattern; a `cfg` inside a format string is not renamed;
/// - `shard = d` or `replicated` (one of them): the dimension sharded over the FSDP axis,
///   a literal below the shape's rank, or a parameter every device holds whole;
/// - `init = normal(std) | ones | zeros`: default `normal(0.02)` when sharded, `ones` when
///   replicated; `std` is an `f64` expression that may read `cfg`;
/// - `dtype = f32 | bf16 | f64`: default `f32`;
/// - `name = "checkpoint_name"`: default the field's name; names are unique per sub-layer.
///
/// Frozen (untrained) parameters are not supported: every parameter is differentiated.
/// Field attribute `#[module]` (or `#[module(config = <expr>)]`): the field is a sub-module,
/// a `#[derive(Module)]` struct over the same value type (`attn: Attention<T>`); its
/// parameters are named `<field>.<name>` (`attn.wq`). Fields are marked rather than inferred
/// from their type because the derive sees only tokens: `Attention<T>` and an alias of `T`
/// look alike, and the mark carries the config projection. `config = <expr>` computes the
/// sub-module's config from the enclosing `cfg` (a `&Config`), e.g. `config = cfg.attention()`;
/// without it the sub-module reads the enclosing config itself.
#[proc_macro_derive(SubLayer, attributes(sublayer, param, module))]
pub fn derive_sublayer(input: TokenStream) -> TokenStream {
    sublayer::derive(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Derives `stackscan::Module` (on `M<Tensor>`) and `stackscan::layer::Params` (on `M<T>` for
/// every `T`) for a reusable part of a layer (attention, an MLP): a struct with one type
/// parameter whose fields are `#[param(...)]` tensors (as in `#[derive(SubLayer)]`) or
/// `#[module]` sub-modules.
///
/// ```ignore
/// #[derive(Module)]
/// #[module(config = AttentionDims)]
/// pub struct Attention<T> {
///     #[param(shape = [cfg.d, cfg.heads * cfg.head_dim], shard = 0)]
///     wq: T,
///     #[param(shape = [cfg.heads * cfg.head_dim, cfg.d], shard = 0)]
///     wo: T,
/// }
/// ```
///
/// Struct attribute `#[module(...)]`: `config = Type` (required), `crate = "path"`.
#[proc_macro_derive(Module, attributes(module, param))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    sublayer::derive_module(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Derives `stackscan::Model` (on `M<Tensor>`) and `stackscan::layer::Params` for a whole
/// model: `#[param]` and `#[module]` fields for the parts outside the stack (named by their
/// path: `embed`, `final_norm`), and one `#[stack]` field of type
/// `stackscan::model::Layers<S>` for a `#[layer_stack]` type `S`. The model may be generic
/// over its stack (`struct Llama<T, S>`). The user implements `stackscan::model::ModelForward`
/// (`embed` before the stack, `loss` after it); `stackscan::model::stack_model` builds it.
///
/// ```ignore
/// #[derive(Model)]
/// #[model(config = LlamaConfig, inputs = Tokens)]
/// pub struct Llama<T, S> {
///     #[param(shape = [cfg.vocab, cfg.d_model], shard = 0)]
///     embed: T,
///     #[stack]
///     layers: Layers<S>,
///     #[param(shape = [cfg.d_model], replicated)]
///     final_norm: T,
/// }
/// ```
///
/// Struct attribute `#[model(...)]`: `config = Type` and `inputs = Type` (the path of a
/// `#[derive(Inputs)]` struct, named without its type parameter, `inputs = Batch`, or over the
/// model's, `inputs = Batch<T>`) required, `crate = "path"`. Field attribute
/// `#[stack]`, without options: the depth is the stack's (`#[layer_stack(layers =
/// cfg.layers)]`), written once there, and checked when the model is built.
#[proc_macro_derive(Model, attributes(model, param, module, stack))]
pub fn derive_model(input: TokenStream) -> TokenStream {
    sublayer::derive_model(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Derives `stackscan::Inputs` (on `I<Tensor>`) and `stackscan::layer::Params` for a model's
/// inputs, declared once: one `#[input(shape = [...], dtype = i32, values = 0..cfg.vocab)]`
/// field per input. `shape` is the per-device shape (`i64` expressions over `cfg`), `dtype`
/// one of `i32`, `i64`, `f32`, `bf16`, `f64` (required), `values` the range an integer input
/// may hold (checked on the host before upload), `name` defaults to the field's. Struct
/// attribute `#[inputs(config = Type)]`.
#[proc_macro_derive(Inputs, attributes(inputs, input))]
pub fn derive_inputs(input: TokenStream) -> TokenStream {
    sublayer::derive_inputs(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Declares a model's layer stack on a struct and implements `stackscan::layer::LayerStack`
/// for it: the `Stack`, the `PlanOptions` (checked at compile time), the plan from the one
/// planner, and the `LayerKind`s that make a `StackModel`.
///
/// ```ignore
/// #[layer_stack(
///     block = [Gdn, Gdn, Gdn, Attention],
///     layers = cfg.layers,
///     prefetch_fsdp_weights,
///     defer_grad_reduce_scatter,
/// )]
/// pub struct Qwen35;
/// ```
///
/// Options:
/// - `block = [A, B, …]` (required): sub-layer types (`#[derive(SubLayer)]` structs, named
///   without their type parameter);
/// - `repeat = n` or `layers = n` (one of them): how often the block repeats, or the total
///   number of layers (prefix included, so the prefix plus a whole number of blocks). A
///   literal or a `const` expression is checked at compile time; an expression over the
///   config `cfg` (`layers = cfg.layers`, any integer type) is read when the stack is built
///   (`LayerStack::stack(&cfg)`), so one stack type serves every depth, and a value the
///   pattern cannot hold is `Error::Depth`, naming the field and the pattern's lengths. The
///   depth is written here only: a model's `#[stack]` field takes none;
/// - `prefix = [A, …]`: layers before the repeated block (DeepSeek-V3's dense layers);
/// - `prefetch_fsdp_weights`, `defer_grad_reduce_scatter` (which needs the former): flags;
/// - `unroll = 1 | 2`: layers per loop trip (default 2);
/// - `precision = "f32" | "bf16" | "bf16-reduce-bf16"`: the mixed-precision policy
///   (`stackscan::Precision`; default `"f32"`): bf16 gathers and compute, gradients reduced
///   in f32 or, with the last, in bf16. Master weights and optimizer state stay f32;
/// - `config = Type`: the stack's config (default: the first entry's, reached through a bound
///   on the impl, so a public stack may hold private sub-layers either way). Every entry must
///   have this config;
/// - `crate = "path"`: the path the `stackscan` crate is reached by (default `::stackscan`).
///
/// An entry is any spelling of a sub-layer: its name (`Mlp`, the value type inferred), a
/// path, `Mlp<Tensor>`, a type alias (generic or not), a `use … as` rename or a
/// `macro_rules!` fragment. Kinds are types, not spellings: two spellings of one sub-layer are
/// one kind. Without `config = Type` the first entry is also named as a type, `Mlp<Tensor>`,
/// to read the config (a type position, where the value type cannot be inferred), so a
/// non-generic alias there (`type Dense = Mlp<Tensor>`) fails with E0107: give
/// `config = Type`, make the alias generic (`type Dense<T> = Mlp<T>`) or put it later. Every sub-layer must have the same config and carry as the first; distinct
/// sub-layer types must have distinct kind names. Errors point at the offending entry or
/// option.
#[proc_macro_attribute]
pub fn layer_stack(attr: TokenStream, item: TokenStream) -> TokenStream {
    stack::layer_stack(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

thread_local! {
    /// The `crate = "path"` of the macro invocation being expanded, if it gave one. A proc
    /// macro expands one invocation at a time on its thread; [`CrateScope`] sets and clears it.
    static CRATE_PATH: std::cell::RefCell<Option<syn::Path>> = const { std::cell::RefCell::new(None) };
}

/// Sets the DSL's path for one expansion (`crate = "path"`, for a renamed dependency or a
/// re-export) and restores the default when dropped, even if the expansion unwinds.
struct CrateScope;

impl CrateScope {
    fn new(path: Option<syn::Path>) -> Self {
        CRATE_PATH.with(|c| *c.borrow_mut() = path);
        Self
    }
}

impl Drop for CrateScope {
    fn drop(&mut self) {
        CRATE_PATH.with(|c| *c.borrow_mut() = None);
    }
}

/// The path generated code reaches the DSL by: `::stackscan::__private`, or
/// `<path>::__private` under `crate = "path"`.
fn private() -> proc_macro2::TokenStream {
    match CRATE_PATH.with(|c| c.borrow().clone()) {
        Some(path) => quote::quote!(#path::__private),
        None => quote::quote!(::stackscan::__private),
    }
}

/// The primitive type `name` (`usize`, `str`) through [`private`]: a user type of that name in
/// scope (`struct usize;`) would otherwise be the one generated code names.
fn primitive(name: &str) -> proc_macro2::TokenStream {
    let (p, name) = (
        private(),
        syn::Ident::new(name, proc_macro2::Span::call_site()),
    );
    quote::quote!(#p::primitive::#name)
}

/// `tokens` with every span set to `span`: a call whose path is [`private`] then spans only the
/// user's entry, so a failed bound on an argument does not underline the whole attribute.
fn respan(tokens: proc_macro2::TokenStream, span: proc_macro2::Span) -> proc_macro2::TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let proc_macro2::TokenTree::Group(g) = &tt {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = proc_macro2::TokenTree::Group(group);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

/// Reads `crate = "path"`: the path the DSL is reached by, as serde's `#[serde(crate = "…")]`.
fn crate_path(arg: &args::Arg, errors: &mut errors::Errors) -> Option<syn::Path> {
    let lit: syn::LitStr = arg.parse("\"path::to::stackscan\"", errors)?;
    match lit.parse::<syn::Path>() {
        Ok(path) => Some(path),
        Err(_) => {
            errors.error_spanned_by(
                &lit,
                format!(
                    "`crate = {}` is not a path; expected the path the `stackscan` crate is reached by, e.g. `crate = \"ss\"` for a dependency renamed to `ss`",
                    lit.token()
                ),
            );
            None
        }
    }
}
