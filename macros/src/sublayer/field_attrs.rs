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

/// A model's `#[stack]` field attribute.
pub(crate) struct StackAttr {
    /// The attribute's path, where a misplaced or repeated stack field is reported.
    pub(crate) path: syn::Path,
}

/// A field's `#[stack]`. It takes no options: the block pattern, the depth and the options
/// are the `#[layer_stack]` type's, written once there (the stack is planned, printed and
/// tested without a model, so it must know its own depth).
pub(super) fn stack_attr(attr: &syn::Attribute, errors: &mut Errors) -> StackAttr {
    let out = StackAttr {
        path: attr.path().clone(),
    };
    let Some(tokens) = options(attr, "`#[stack]` on the stack field", errors) else {
        return out;
    };
    for arg in args::split(tokens, errors) {
        let message = match arg.key.to_string().as_str() {
            "layers" | "repeat" => format!(
                "the depth is written once, on the stack: `#[layer_stack(..., {} = <count or cfg.field>)]`; remove it here",
                arg.key
            ),
            other => format!(
                "unknown stack field option `{other}`; `#[stack]` takes none (the block pattern, the depth and the options are the `#[layer_stack]` type's)"
            ),
        };
        errors.error_spanned_by(&arg.key, message);
    }
    out
}

/// A field's `#[module]` or `#[module(config = <expr>)]`.
pub(super) fn module_attr(attr: &syn::Attribute, errors: &mut Errors) -> ModuleAttr {
    let mut out = ModuleAttr { config: None };
    let Some(tokens) = options(
        attr,
        "`#[module]` or `#[module(config = <expr>)]` on a sub-module field",
        errors,
    ) else {
        return out;
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

/// The options inside a field attribute that may also stand alone: `#[attr(...)]`'s tokens;
/// `None` for a bare `#[attr]`, and for `#[attr = …]`, reported as not the `expected` form.
fn options(
    attr: &syn::Attribute,
    expected: &str,
    errors: &mut Errors,
) -> Option<proc_macro2::TokenStream> {
    match &attr.meta {
        syn::Meta::Path(_) => None,
        syn::Meta::List(list) => Some(list.tokens.clone()),
        syn::Meta::NameValue(nv) => {
            errors.error_spanned_by(nv, format!("expected {expected}"));
            None
        }
    }
}
