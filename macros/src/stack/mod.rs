//! `#[layer_stack(...)]`: parse → check → expand.

mod check;
pub(crate) mod expand;
mod parse;

use proc_macro2::TokenStream;
use quote::quote;

use crate::errors::Errors;

/// The attribute's output: the item as written, the impl of its model (built from the valid
/// parts when there are errors), and the errors.
pub(crate) fn layer_stack(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let item: syn::Item = syn::parse2(item)?;
    let mut errors = Errors::new();
    let mut input = parse::parse(attr, item, &mut errors);
    let _scope = crate::CrateScope::new(input.krate.take());
    let (item, model) = check::check(input, &mut errors);
    // An invalid declaration whose struct is known still gets an impl, so uses of the model
    // add no errors of their own: the `compile_error!`s are the only ones.
    let expanded = match &model {
        Some(model) => Some(expand::expand(model)),
        None => match &item {
            syn::Item::Struct(s) if s.generics.params.is_empty() => {
                Some(expand::expand_stub(&s.ident))
            }
            _ => None,
        },
    };
    let compile_errors = errors.into_compile_errors();
    Ok(quote!(#item #expanded #compile_errors))
}
