//! The field attributes beside `#[param(...)]`: `#[module]` on a sub-module field and
//! `#[stack]` on a model's stack field.

use syn::Expr;

use super::parse::{FIELD_MODULE_KEYS, set};
use crate::args::{self, Arg};
use crate::errors::Errors;

/// A sub-module field's `#[module(...)]`.
pub(crate) struct ModuleAttr {
    /// `config = <expr>`: the sub-module's config computed from the enclosing `cfg`.
    pub(crate) config: Option<Expr>,
}

/// A model's `#[stack]` or `#[stack(layers = <expr>)]` field attribute.
pub(crate) struct StackAttr {
    /// The attribute's path, where a misplaced or repeated stack field is reported.
    pub(crate) path: syn::Path,
    /// `layers = <expr>`: the config's depth (`cfg.layers`), checked against the stack.
    pub(crate) layers: Option<Expr>,
}

/// A field's `#[stack]` or `#[stack(layers = <expr>)]`.
pub(super) fn stack_attr(attr: &syn::Attribute, errors: &mut Errors) -> StackAttr {
    let mut out = StackAttr {
        path: attr.path().clone(),
        layers: None,
    };
    let tokens = match &attr.meta {
        syn::Meta::Path(_) => return out,
        syn::Meta::List(list) => list.tokens.clone(),
        syn::Meta::NameValue(nv) => {
            errors.error_spanned_by(
                nv,
                "expected `#[stack]` or `#[stack(layers = <expr>)]` on the stack field",
            );
            return out;
        }
    };
    for arg in args::split(tokens, errors) {
        match arg.key.to_string().as_str() {
            "layers" => set(
                &mut out.layers,
                &arg,
                "<depth over cfg>",
                errors,
                Arg::parse,
            ),
            other => errors.error_spanned_by(
                &arg.key,
                format!(
                    "unknown stack field option `{other}`; expected `layers` (the block pattern and the options are the `#[layer_stack]` type's)"
                ),
            ),
        }
    }
    out
}

/// A field's `#[module]` or `#[module(config = <expr>)]`.
pub(super) fn module_attr(attr: &syn::Attribute, errors: &mut Errors) -> ModuleAttr {
    let mut out = ModuleAttr { config: None };
    let tokens = match &attr.meta {
        syn::Meta::Path(_) => return out,
        syn::Meta::List(list) => list.tokens.clone(),
        syn::Meta::NameValue(nv) => {
            errors.error_spanned_by(
                nv,
                "expected `#[module]` or `#[module(config = <expr>)]` on a sub-module field",
            );
            return out;
        }
    };
    for arg in args::split(tokens, errors) {
        match arg.key.to_string().as_str() {
            "config" => set(
                &mut out.config,
                &arg,
                "<expression over `cfg`>",
                errors,
                Arg::parse,
            ),
            other => errors.error_spanned_by(
                &arg.key,
                format!(
                    "unknown sub-module option `{other}`; expected {}",
                    args::one_of(FIELD_MODULE_KEYS)
                ),
            ),
        }
    }
    out
}
