//! Rules over a whole `#[layer_stack]` declaration → the [`Model`] `expand` reads.
//!
//! What is known syntactically (literal counts, the block length, the option set) is checked
//! here with a span on the culprit; what is not (a count given as a `const` expression, the
//! sub-layers' carries and kind names) is left to `const` evaluation and trait bounds in the
//! expansion, which carry the same spans; a count read from the config is checked by the DSL
//! when the stack is built, against the same rule.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;
use syn::{Expr, Ident, Type};

use super::parse::{Count, Input, List};
use crate::errors::Errors;
use crate::private;

/// A validated stack. When the declaration has errors, [`check`] still returns one built from
/// its valid parts (defaults in place of invalid options) so the impl exists and uses of the
/// model type-check: the `compile_error!`s are then the only errors.
pub(crate) struct Model {
    pub(crate) ident: Ident,
    pub(crate) prefix: Vec<Entry>,
    pub(crate) block: Vec<Entry>,
    pub(crate) repeat: Repeat,
    pub(crate) prefetch: bool,
    pub(crate) defer: bool,
    pub(crate) unroll: Value,
    /// The name of the `Precision` constant `precision = "…"` names (`F32` unless written).
    pub(crate) precision: Ident,
    /// `config = Type`, if written.
    pub(crate) config: Option<Type>,
}

/// A block or prefix entry.
pub(crate) struct Entry {
    /// The type as written.
    pub(crate) written: Type,
    /// The sub-layer type: a bare generic name `Mlp` becomes `Mlp<Tensor>`. Only the stack's
    /// `type Config` (when no `config = Type` is given) names it: a type position, where
    /// generic arguments cannot be inferred.
    pub(crate) ty: Type,
    /// The entry as a `__private::EntryOf` value, `Mlp::__STACKSCAN_ENTRY`: everything else
    /// the stack generates names the entry this way, so `Mlp` is `Mlp<Tensor>` by inference
    /// and an entry that is not generic (an alias of `Attn<Tensor>`) is taken as it is.
    pub(crate) value: TokenStream,
}

/// How many times the block repeats.
pub(crate) enum Repeat {
    /// `repeat = n`.
    Repeat(Value),
    /// `layers = n`: prefix plus a whole number of blocks.
    Layers(Value),
}

/// A count: a literal already checked, an expression checked by `const` evaluation, or an
/// expression over the config (`cfg.layers`), checked when the stack is built.
pub(crate) enum Value {
    Literal(u64),
    Expr(Expr),
    Config(Expr),
}

/// A count that is not a literal: read from the config if it names `cfg`, else a constant.
fn expr_value(expr: Expr) -> Value {
    if crate::config::reads_config(&expr) {
        Value::Config(expr)
    } else {
        Value::Expr(expr)
    }
}

pub(crate) fn check(input: Input, errors: &mut Errors) -> (syn::Item, Option<Model>) {
    let ident = match &input.item {
        syn::Item::Struct(s) => {
            if !s.generics.params.is_empty() {
                errors.error_spanned_by(
                    &s.generics,
                    "`#[layer_stack]` does not support generic structs; the stack is fixed at compile time",
                );
            }
            // An impl on a generic struct would add errors of its own.
            s.generics.params.is_empty().then(|| s.ident.clone())
        }
        other => {
            errors.error_at(
                first_token_span(other),
                "`#[layer_stack]` goes on a struct naming the model (`pub struct Qwen;`)",
            );
            None
        }
    };
    let block = match &input.block {
        None if input.is_malformed("block") => None,
        None => {
            errors.error_at(
                input.anchor,
                "missing `block = [SubLayer, ...]`: the sub-layers of the repeated block",
            );
            None
        }
        Some(List { bracket, entries }) if entries.is_empty() => {
            errors.error_at(
                *bracket,
                "the block is empty; expected at least one sub-layer: `block = [SubLayer, ...]`",
            );
            None
        }
        Some(list) => Some(entries(list)),
    };
    let prefix = input.prefix.as_ref().map(entries).unwrap_or_default();
    let block_len = block.as_ref().map(Vec::len);
    // A count written but unreadable has its own error; it is not missing as well.
    let count_malformed = input.is_malformed("repeat") || input.is_malformed("layers");
    let repeat = match (input.repeat, input.layers) {
        (Some(_), Some(layers)) => {
            errors.error_spanned_by(
                &layers.key,
                "`layers` conflicts with `repeat`; give one of them",
            );
            None
        }
        (None, None) if count_malformed => None,
        (None, None) => {
            errors.error_at(
                input.anchor,
                "missing `repeat = <count>` or `layers = <count>`",
            );
            None
        }
        (Some(r), None) => check_repeat(r, prefix.len(), block_len, errors).map(Repeat::Repeat),
        (None, Some(l)) => check_layers(l, prefix.len(), block_len, errors).map(Repeat::Layers),
    };
    let prefetch = input.prefetch.as_ref().is_some_and(|f| f.on);
    let defer = match &input.defer {
        Some(f) if f.on && !prefetch => {
            errors.error_spanned_by(
                &f.key,
                "`defer_grad_reduce_scatter` needs `prefetch_fsdp_weights`; add it or remove this option",
            );
            false
        }
        Some(f) => f.on,
        None => false,
    };
    let unroll = match input.unroll {
        None => Some(Value::Literal(2)),
        Some(Count {
            literal: Some(n @ (1 | 2)),
            ..
        }) => Some(Value::Literal(n)),
        Some(Count {
            literal: Some(n),
            expr,
            ..
        }) => {
            errors.error_spanned_by(expr, format!("`unroll` must be 1 or 2, got {n}"));
            None
        }
        Some(Count { expr, .. }) if crate::config::reads_config(&expr) => {
            errors.error_spanned_by(
                &expr,
                "`unroll` is a constant: the options are checked at compile time, so it cannot read `cfg`",
            );
            None
        }
        Some(Count { expr, .. }) => Some(Value::Expr(expr)),
    };
    let precision = precision_constant(input.precision.as_ref(), errors);
    let model = match (ident, block) {
        (Some(ident), Some(block)) => Some(Model {
            ident,
            prefix,
            block,
            repeat: repeat.unwrap_or(Repeat::Repeat(Value::Literal(1))),
            prefetch,
            defer,
            unroll: unroll.unwrap_or(Value::Literal(2)),
            precision,
            config: input.config,
        }),
        _ => None,
    };
    (input.item, model)
}

/// The precision policies `precision = "…"` names, and the `Precision` constant of each.
const PRECISIONS: [(&str, &str); 3] = [
    ("f32", "F32"),
    ("bf16", "BF16"),
    ("bf16-reduce-bf16", "BF16_REDUCE_BF16"),
];

/// The `Precision` constant `precision = "…"` names: `F32` when absent, and after an error
/// on the literal when it names no policy.
fn precision_constant(lit: Option<&syn::LitStr>, errors: &mut Errors) -> Ident {
    let span = lit.map_or_else(Span::call_site, syn::LitStr::span);
    let name = match lit {
        None => "F32",
        Some(l) => match PRECISIONS.iter().find(|(spelled, _)| *spelled == l.value()) {
            Some((_, constant)) => constant,
            None => {
                let names: Vec<&str> = PRECISIONS.iter().map(|(n, _)| *n).collect();
                errors.error_spanned_by(
                    l,
                    format!(
                        "unknown precision {}; expected {}",
                        l.token(),
                        crate::args::one_of(&names)
                    ),
                );
                "F32"
            }
        },
    };
    Ident::new(name, span)
}

fn entries(list: &List) -> Vec<Entry> {
    list.entries
        .iter()
        .map(|written| Entry {
            written: written.clone(),
            ty: with_value_type(written),
            value: entry_value(written),
        })
        .collect()
}

/// `Mlp` → `Mlp<Tensor>`: the sub-layer impl is on the struct over traced tensors. The added
/// tokens carry the entry's span, so a failed bound points at the entry.
///
/// The expansion writes `<#ty as SubLayer>`, so `ty` must parse there whatever the entry is
/// (a wrong entry is the compiler's to report, at the entry, not a parse error of the whole
/// expansion):
/// - a path ending in `self`, `super`, `crate` (a module) or `try` (a reserved word) is kept
///   as written: syn reads these segments without generic arguments, so `super<Tensor>` does
///   not parse;
/// - a trait object or `impl` type may end in `+` (`dyn A +`), and `+ as` reads as a bound to
///   come, so the trailing `+` is dropped (the type is the same).
fn with_value_type(ty: &Type) -> Type {
    let mut ty = ty.clone();
    match &mut ty {
        // A `$t:ty` or `$p:path` fragment of a `macro_rules!` arrives in an invisible group.
        Type::Group(g) => return with_value_type(&g.elem),
        Type::Paren(p) => return with_value_type(&p.elem),
        Type::Path(p) => {
            if p.qself.is_none()
                && let Some(last) = p.path.segments.last_mut()
                && last.arguments.is_none()
                && !["self", "super", "crate", "try"]
                    .iter()
                    .any(|keyword| last.ident == keyword)
            {
                let span = last.ident.span();
                let private = private();
                last.arguments = syn::PathArguments::AngleBracketed(
                    syn::parse_quote_spanned!(span=> <#private::Tensor>),
                );
            }
        }
        Type::TraitObject(t) => {
            t.bounds.pop_punct();
        }
        Type::ImplTrait(t) => {
            t.bounds.pop_punct();
        }
        _ => {}
    }
    ty
}

/// `Mlp::__STACKSCAN_ENTRY`, the entry as a value whose generic arguments are inferred.
///
/// A plain path (`Mlp`, `crate::Mlp`, `Attn<Tensor>` with its arguments in turbofish form) is
/// written as a type-relative expression path, where Rust infers omitted arguments; any other
/// type (a reference, a tuple, a qualified path, a path ending in a keyword) as `<T>::…`, which
/// needs no inference because it is never a sub-layer anyway, or is already complete. Each
/// form re-parses whatever the entry is.
fn entry_value(ty: &Type) -> TokenStream {
    let span = ty.span();
    let entry = quote::format_ident!("__STACKSCAN_ENTRY", span = span);
    match ty {
        // A `$t:ty` or `$p:path` fragment of a `macro_rules!` arrives in an invisible group.
        Type::Group(g) => return entry_value(&g.elem),
        Type::Paren(p) => return entry_value(&p.elem),
        Type::Path(p)
            if p.qself.is_none()
                && p.path.segments.iter().all(|s| {
                    !matches!(s.arguments, syn::PathArguments::Parenthesized(_))
                        && !["self", "super", "crate", "Self", "try"]
                            .iter()
                            .any(|keyword| s.ident == keyword)
                }) =>
        {
            let mut path = p.path.clone();
            for segment in &mut path.segments {
                if let syn::PathArguments::AngleBracketed(args) = &mut segment.arguments {
                    args.colon2_token = Some(syn::parse_quote_spanned!(span=> ::));
                }
            }
            return quote::quote_spanned!(span=> #path::#entry);
        }
        _ => {}
    }
    let ty = with_value_type(ty);
    quote::quote_spanned!(span=> <#ty>::#entry)
}

/// `stackscan::plan::Stack::MAX_LAYERS`: deeper literal counts are rejected here, on the
/// literal, rather than by the planner at run time.
pub(super) const MAX_LAYERS: u64 = 1 << 20;

/// Checks a literal `repeat` against the limit on the whole stack, `prefix + repeat × block`:
/// the limit is on layers, so a modest `repeat` of a long block can exceed it.
fn check_repeat(
    count: Count,
    prefix: usize,
    block: Option<usize>,
    errors: &mut Errors,
) -> Option<Value> {
    match count.literal {
        Some(0) => {
            errors.error_spanned_by(&count.expr, "`repeat` must be at least 1");
            None
        }
        Some(n) if n > MAX_LAYERS => {
            errors.error_spanned_by(
                &count.expr,
                format!("`repeat = {n}` is too large; a stack has at most {MAX_LAYERS} layers"),
            );
            None
        }
        Some(n) => {
            let (p, b) = (prefix as u64, block.unwrap_or(0) as u64);
            let total = n.saturating_mul(b).saturating_add(p);
            if total > MAX_LAYERS {
                let prefix = if p == 0 {
                    String::new()
                } else {
                    format!("the prefix of {p} plus ")
                };
                errors.error_spanned_by(
                    &count.expr,
                    format!(
                        "`repeat = {n}` makes {prefix}{n} × {b} = {total} layers; a stack has at most {MAX_LAYERS} layers"
                    ),
                );
                return None;
            }
            Some(Value::Literal(n))
        }
        None => Some(expr_value(count.expr)),
    }
}

fn check_layers(
    count: Count,
    prefix: usize,
    block: Option<usize>,
    errors: &mut Errors,
) -> Option<Value> {
    let (Some(n), Some(b)) = (count.literal, block) else {
        return match count.literal {
            Some(n) => Some(Value::Literal(n)),
            None => Some(expr_value(count.expr)),
        };
    };
    let (p, b) = (prefix as u64, b as u64);
    if n > MAX_LAYERS {
        errors.error_spanned_by(
            &count.expr,
            format!("`layers = {n}` is too large; a stack has at most {MAX_LAYERS} layers"),
        );
        return None;
    }
    if n == 0 {
        errors.error_spanned_by(
            &count.expr,
            format!(
                "`layers` must be at least 1; the smallest stack has {} layers",
                p + b
            ),
        );
        return None;
    }
    if n <= p || (n - p) % b != 0 {
        let min = p + b;
        let choices = if n < min {
            format!("{min}")
        } else {
            let below = p + (n - p) / b * b;
            format!("{below} or {}", below + b)
        };
        let what = if p == 0 {
            format!("`layers = {n}` is not a multiple of the block length {b}")
        } else {
            format!(
                "`layers = {n}` is not the prefix length {p} plus a positive multiple of the block length {b}"
            )
        };
        errors.error_spanned_by(&count.expr, format!("{what}; expected {choices}"));
        return None;
    }
    Some(Value::Literal(n))
}

fn first_token_span(item: &syn::Item) -> Span {
    match item {
        syn::Item::Enum(e) => e.enum_token.span,
        syn::Item::Union(u) => u.union_token.span,
        syn::Item::Fn(f) => f.sig.fn_token.span,
        syn::Item::Type(t) => t.type_token.span,
        syn::Item::Impl(i) => i.impl_token.span,
        other => other.span(),
    }
}
