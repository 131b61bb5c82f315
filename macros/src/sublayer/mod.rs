//! `#[derive(SubLayer)]`: parse → check → expand.

mod check;
pub(crate) mod expand;
mod parse;

use proc_macro2::TokenStream;

use crate::errors::Errors;

/// The derive's output: the impls of a valid declaration, or stub impls beside the errors.
pub(crate) fn derive(input: TokenStream) -> syn::Result<TokenStream> {
    let input: syn::DeriveInput = syn::parse2(input)?;
    let mut errors = Errors::new();
    let mut parsed = parse::parse(&input, &mut errors);
    let _scope = crate::CrateScope::new(parsed.krate.take());
    match check::check(parsed, &mut errors) {
        check::Checked::Valid(model) => {
            errors.finish()?;
            Ok(expand::expand(&model))
        }
        check::Checked::Invalid(stub) => {
            let stub = expand::expand_stub(&stub);
            let compile_errors = errors.into_compile_errors();
            Ok(quote::quote!(#compile_errors #stub))
        }
    }
}
