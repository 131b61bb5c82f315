//! A validated sub-layer → its `Params` and `SubLayer` impls. Infallible.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::check::{Init, Model, Stub};
use crate::private;

/// The name the shape and init expressions see the config by.
pub(crate) const CONFIG_BINDING: &str = "cfg";

pub(crate) fn expand(model: &Model) -> TokenStream {
    let p = private();
    let Model {
        ident,
        value_ty,
        config,
        carry,
        name,
        params,
    } = model;
    let cfg = syn::Ident::new(CONFIG_BINDING, Span::call_site());
    let specs = params.iter().map(|param| {
        let name = &param.name;
        let dims = &param.dims;
        let dtype = format_ident!("{}", param.dtype);
        let init = match &param.init {
            Init::Normal(std) => quote!(#p::Init::Normal(#std)),
            Init::NormalDefault => quote!(#p::Init::Normal(0.02)),
            Init::Ones => quote!(#p::Init::Ones),
            Init::Zeros => quote!(#p::Init::Zeros),
        };
        // Through the public constructors: each dimension is checked against `i64` on its own.
        let shape = quote!(&[#(#dims),*]);
        match param.shard {
            Some(d) => quote! {
                #p::ParamSpec::sharded(#name, #shape, #p::DType::#dtype, #d).with_init(#init)
            },
            None => quote! {
                #p::ParamSpec::replicated(#name, #shape, #p::DType::#dtype).with_init(#init)
            },
        }
    });
    let fields: Vec<_> = params.iter().map(|param| &param.field).collect();
    let sublayer = sublayer_impl(
        ident,
        value_ty,
        config,
        carry,
        name,
        quote! {
            fn param_specs(#cfg: &Self::Config) -> #p::Vec<#p::ParamSpec> {
                let _ = #cfg;
                #p::list([#(#specs),*])
            }
        },
    );
    let len = fields.len();
    let locals: Vec<_> = (0..len)
        .map(|i| syn::Ident::new(&format!("__stackscan_value{i}"), Span::mixed_site()))
        .collect();
    // Bindings have names no user item plausibly has: a `const` of the same name in scope
    // would turn a binding into a pattern (items are not hygienic).
    let values = syn::Ident::new("__stackscan_values", Span::mixed_site());
    let type_name = ident.to_string();
    quote! {
        const _: () = {
            #sublayer

            #[automatically_derived]
            impl<#value_ty> #p::Params<#value_ty> for #ident<#value_ty> {
                const LEN: usize = #len;

                fn from_values(#values: #p::Vec<#value_ty>) -> #p::Result<Self> {
                    match <[#value_ty; #len] as #p::TryFrom<#p::Vec<#value_ty>>>::try_from(#values) {
                        #p::Ok([#(#locals),*]) => #p::Ok(#ident { #(#fields: #locals),* }),
                        #p::Err(#values) => {
                            #p::Err(#p::wrong_count(#type_name, #len, #values.len()))
                        }
                    }
                }

                fn into_values(self) -> #p::Vec<#value_ty> {
                    #p::list([#(self.#fields),*])
                }

                fn values(&self) -> #p::Vec<&#value_ty> {
                    #p::list([#(&self.#fields),*])
                }
            }
        };
    }
}

/// Impls for an invalid declaration: the same types, bodies that do nothing, so the
/// `compile_error!`s beside them are the only errors.
pub(crate) fn expand_stub(stub: &Stub) -> TokenStream {
    let p = private();
    let Stub {
        ident,
        value_ty,
        config,
        carry,
        fields,
    } = stub;
    let type_name = ident.to_string();
    let sublayer = sublayer_impl(
        ident,
        value_ty,
        config,
        carry,
        &type_name,
        quote! {
            fn param_specs(_: &Self::Config) -> #p::Vec<#p::ParamSpec> {
                #p::Vec::new()
            }
        },
    );
    let len = fields.len();
    quote! {
        const _: () = {
            #sublayer

            #[automatically_derived]
            impl<#value_ty> #p::Params<#value_ty> for #ident<#value_ty> {
                const LEN: usize = #len;

                fn from_values(_: #p::Vec<#value_ty>) -> #p::Result<Self> {
                    #p::Err(#p::invalid_declaration(#type_name))
                }

                fn into_values(self) -> #p::Vec<#value_ty> {
                    #p::Vec::new()
                }

                fn values(&self) -> #p::Vec<&#value_ty> {
                    #p::Vec::new()
                }
            }
        };
    }
}

fn sublayer_impl(
    ident: &syn::Ident,
    value_ty: &syn::Ident,
    config: &syn::Type,
    carry: &syn::Type,
    name: &str,
    param_specs: TokenStream,
) -> TokenStream {
    let p = private();
    // The bounds on `Config` and `Carry` fail on the user's type, not on the derive.
    let config_item = quote_spanned!(config.span()=> type Config = #config;);
    let carry_item = quote_spanned!(carry.span()=> type Carry = #carry;);
    quote! {
        #[automatically_derived]
        impl #p::SubLayer for #ident<#p::Tensor> {
            #config_item
            #carry_item
            type Of<#value_ty> = #ident<#value_ty>;
            const NAME: &'static str = #name;

            #param_specs
        }
    }
}
