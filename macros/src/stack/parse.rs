//! `#[layer_stack(...)]` arguments and item → a model that keeps the user's syntax nodes.

use proc_macro2::Span;
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Token, Type};

use crate::args::{self, Arg};
use crate::errors::Errors;

/// The options of `#[layer_stack(...)]`.
pub(crate) const KEYS: &[&str] = &[
    "block",
    "prefix",
    "repeat",
    "layers",
    "prefetch_fsdp_weights",
    "defer_grad_reduce_scatter",
    "unroll",
    "precision",
    "config",
    "crate",
];

/// The attribute and the item it is on.
pub(crate) struct Input {
    /// The item, re-emitted as written.
    pub(crate) item: syn::Item,
    /// Where a missing option is reported: the first option, or the item's name.
    pub(crate) anchor: Span,
    pub(crate) block: Option<List>,
    pub(crate) prefix: Option<List>,
    pub(crate) repeat: Option<Count>,
    pub(crate) layers: Option<Count>,
    pub(crate) prefetch: Option<Flag>,
    pub(crate) defer: Option<Flag>,
    pub(crate) unroll: Option<Count>,
    /// `precision = "bf16"`: the policy's name, as written.
    pub(crate) precision: Option<syn::LitStr>,
    /// `config = Type`: the stack's config, written out instead of taken from the first entry.
    pub(crate) config: Option<Type>,
    /// `crate = "path"`: how generated code reaches the DSL.
    pub(crate) krate: Option<syn::Path>,
    /// Options written but unreadable (an error was reported): not reported missing as well.
    pub(crate) malformed: Vec<Ident>,
}

impl Input {
    /// Whether option `key` was written but could not be read.
    pub(crate) fn is_malformed(&self, key: &str) -> bool {
        self.malformed.iter().any(|k| k == key)
    }
}

/// `[A, B, …]`.
pub(crate) struct List {
    pub(crate) bracket: Span,
    pub(crate) entries: Vec<Type>,
}

/// A count: an expression, and its value when it is an integer literal.
pub(crate) struct Count {
    pub(crate) key: Ident,
    pub(crate) expr: Expr,
    pub(crate) literal: Option<u64>,
}

/// A flag and its value.
pub(crate) struct Flag {
    pub(crate) key: Ident,
    pub(crate) on: bool,
}

pub(crate) fn parse(attr: proc_macro2::TokenStream, item: syn::Item, errors: &mut Errors) -> Input {
    let anchor = attr
        .clone()
        .into_iter()
        .next()
        .map(|tt| tt.span())
        .unwrap_or_else(|| item_name_span(&item));
    let mut input = Input {
        item,
        anchor,
        block: None,
        prefix: None,
        repeat: None,
        layers: None,
        prefetch: None,
        defer: None,
        unroll: None,
        precision: None,
        config: None,
        krate: None,
        malformed: Vec::new(),
    };
    for arg in args::split(attr, errors) {
        let key = arg.key.to_string();
        let before = errors.len();
        match key.as_str() {
            "block" => set(&mut input.block, &arg, errors, list),
            "prefix" => set(&mut input.prefix, &arg, errors, list),
            "repeat" => set(&mut input.repeat, &arg, errors, count),
            "layers" => set(&mut input.layers, &arg, errors, count),
            "unroll" => set(&mut input.unroll, &arg, errors, count),
            "precision" => set(&mut input.precision, &arg, errors, |a, e| {
                a.parse("\"f32\" | \"bf16\" | \"bf16-reduce-bf16\"", e)
            }),
            "config" => set(&mut input.config, &arg, errors, |a, e| a.parse("<type>", e)),
            "crate" => set(&mut input.krate, &arg, errors, crate::crate_path),
            "prefetch_fsdp_weights" => set(&mut input.prefetch, &arg, errors, flag),
            "defer_grad_reduce_scatter" => set(&mut input.defer, &arg, errors, flag),
            other => errors.error_spanned_by(
                &arg.key,
                format!(
                    "unknown layer_stack option `{other}`; expected {}",
                    args::one_of(KEYS)
                ),
            ),
        }
        if errors.len() > before {
            input.malformed.push(arg.key);
        }
    }
    input
}

/// The span of the item's name (or its first token).
pub(crate) fn item_name_span(item: &syn::Item) -> Span {
    match item {
        syn::Item::Struct(s) => s.ident.span(),
        syn::Item::Enum(e) => e.ident.span(),
        syn::Item::Fn(f) => f.sig.ident.span(),
        other => quote::ToTokens::to_token_stream(other)
            .into_iter()
            .next()
            .map_or_else(Span::call_site, |tt| tt.span()),
    }
}

fn set<T>(
    slot: &mut Option<T>,
    arg: &Arg,
    errors: &mut Errors,
    parse: impl FnOnce(&Arg, &mut Errors) -> Option<T>,
) {
    let value = parse(arg, errors);
    if slot.is_some() {
        errors.error_spanned_by(
            &arg.key,
            format!("duplicate layer_stack option `{}`", arg.key),
        );
    } else {
        *slot = value;
    }
}

fn list(arg: &Arg, errors: &mut Errors) -> Option<List> {
    let (bracket, tokens) = args::bracketed(arg, "SubLayer, ...", errors)?;
    let key = &arg.key;
    if let Some(semi) = args::top_level_semicolon(&tokens) {
        let hint = if key == "block" {
            "write each entry (`block = [Mlp, Mlp]`), or repeat the block with `repeat = <count>`"
        } else {
            "write each entry (`prefix = [Mlp, Mlp]`)"
        };
        errors.error_at(
            semi,
            format!("`{key} = [Entry; n]` is not supported; {hint}"),
        );
        return None;
    }
    // A string entry (`"Mlp"`) is the one likely mistake a type parser reports obscurely.
    let strings: Vec<_> = tokens
        .clone()
        .into_iter()
        .filter_map(|tt| match tt {
            proc_macro2::TokenTree::Literal(lit) => {
                syn::parse2::<syn::LitStr>(proc_macro2::TokenTree::Literal(lit).into()).ok()
            }
            _ => None,
        })
        .collect();
    if !strings.is_empty() {
        for lit in &strings {
            errors.error_spanned_by(
                lit,
                format!(
                    "a `{key}` entry is a sub-layer type, not a string: write `{}` without quotes",
                    lit.value()
                ),
            );
        }
        return None;
    }
    let parser = Punctuated::<Type, Token![,]>::parse_terminated;
    match syn::parse::Parser::parse2(parser, tokens) {
        Ok(entries) => Some(List {
            bracket,
            entries: entries.into_iter().collect(),
        }),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

fn count(arg: &Arg, errors: &mut Errors) -> Option<Count> {
    let expr: Expr = arg.parse("<count>", errors)?;
    let literal = match &expr {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(lit),
            ..
        }) => match lit.base10_parse::<u64>() {
            Ok(v) => Some(v),
            Err(e) => {
                errors.push(e);
                return None;
            }
        },
        Expr::Lit(other) => {
            errors.error_spanned_by(
                other,
                format!("expected `{} = <count>`, a non-negative integer", arg.key),
            );
            return None;
        }
        _ => None,
    };
    Some(Count {
        key: arg.key.clone(),
        expr,
        literal,
    })
}

fn flag(arg: &Arg, errors: &mut Errors) -> Option<Flag> {
    arg.flag(errors).map(|on| Flag {
        key: arg.key.clone(),
        on,
    })
}
