//! `#[derive(SubLayer)]` and `#[derive(Module)]`: parse → check → expand. A module is a
//! sub-layer without a carry or a kind name, so both derives share one model.

mod check;
pub(crate) mod expand;
mod field_attrs;
mod kind;
mod parse;
mod stub;

use proc_macro2::TokenStream;

use crate::errors::Errors;

/// `#[derive(SubLayer)]`'s output: the impls of a valid declaration, or stub impls beside the
/// errors.
pub(crate) fn derive(input: TokenStream) -> syn::Result<TokenStream> {
    derive_as(input, parse::Derive::SubLayer)
}

/// `#[derive(Model)]`'s output.
pub(crate) fn derive_model(input: TokenStream) -> syn::Result<TokenStream> {
    derive_as(input, parse::Derive::Model)
}

/// `#[derive(Inputs)]`'s output.
pub(crate) fn derive_inputs(input: TokenStream) -> syn::Result<TokenStream> {
    derive_as(input, parse::Derive::Inputs)
}

/// `#[derive(Module)]`'s output.
pub(crate) fn derive_module(input: TokenStream) -> syn::Result<TokenStream> {
    derive_as(input, parse::Derive::Module)
}

fn derive_as(input: TokenStream, derive: parse::Derive) -> syn::Result<TokenStream> {
    let input: syn::DeriveInput = syn::parse2(input)?;
    let mut errors = Errors::new();
    let mut parsed = parse::parse(&input, derive, &mut errors);
    let _scope = crate::CrateScope::new(parsed.krate.take());
    match check::check(parsed, &mut errors) {
        check::Checked::Valid(model) => {
            errors.finish()?;
            Ok(expand::expand(&model))
        }
        check::Checked::Invalid(stub) => {
            let stub = stub::expand_stub(&stub);
            let compile_errors = errors.into_compile_errors();
            Ok(quote::quote!(#compile_errors #stub))
        }
    }
}
