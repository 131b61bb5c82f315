//! A validated sub-layer → its `Params` and `SubLayer` impls. Infallible.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
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
    let type_name = ident.unraw().to_string();
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
/// `compile_error!`s beside them are the only errors. The impls take the struct's generics as
/// written (bounds, `where` clause, extra parameters), so they hold wherever the struct is
/// well-formed; a missing `config` or `carry` is a placeholder type.
pub(crate) fn expand_stub(stub: &Stub) -> TokenStream {
    let p = private();
    let Stub {
        ident,
        value_ty,
        generics,
        config,
        carry,
        fields,
    } = stub;
    let type_name = ident.unraw().to_string();
    let identity = identity(ident);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let self_ty = quote!(#ident #ty_generics);
    // Placeholders show in the errors of code using the stub (a `Forward` impl, a stack), so
    // their names say what is wrong; no user item plausibly has them.
    let missing_config = format_ident!("NoConfigInSublayerAttribute");
    let missing_carry = format_ident!("NoCarryInSublayerAttribute");
    let invalid_params = format_ident!("__StackscanInvalidParams");
    let of = format_ident!("__StackscanValue");
    let (config, config_placeholder) = match config {
        Some(config) => (quote_spanned!(config.span()=> type Config = #config;), None),
        None => (
            quote!(type Config = #missing_config;),
            Some(quote! {
                pub enum #missing_config {}
                impl ::core::clone::Clone for #missing_config {
                    fn clone(&self) -> Self {
                        match *self {}
                    }
                }
            }),
        ),
    };
    let (carry, carry_placeholder) = match carry {
        Some(carry) => (quote_spanned!(carry.span()=> type Carry = #carry;), None),
        None => (
            quote!(type Carry = #missing_carry;),
            Some(quote! {
                pub enum #missing_carry {}
                impl #p::ActivationMarker for #missing_carry {}
            }),
        ),
    };
    // Generic over the struct's parameters rather than on `S<Tensor>`: the struct's bounds
    // need not hold for `Tensor`, and `Of<T>` is a type without bounds of its own.
    let mut sublayer_where = where_clause
        .cloned()
        .unwrap_or_else(|| syn::parse_quote!(where));
    sublayer_where
        .predicates
        .push(syn::parse_quote!(#self_ty: 'static + #p::Params<#p::Tensor>));
    let len = fields.len();
    let params_impl = |value_ty: &TokenStream, len: usize| {
        quote! {
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
    // A struct without a type parameter (the mistake its error names) holds `Tensor`s in the
    // stub, so `Params<Tensor>` and the `SubLayer` bound on it hold.
    let value_ty = match value_ty {
        Some(t) => quote!(#t),
        None => quote!(#p::Tensor),
    };
    let struct_params = params_impl(&value_ty, len);
    let of_params = params_impl(&quote!(#of), 0);
    quote! {
        const _: () = {
            #config_placeholder
            #carry_placeholder

            pub struct #invalid_params<#of>(fn() -> #of);

            #[automatically_derived]
            impl<#of> #p::Params<#of> for #invalid_params<#of> {
                #of_params
            }

            #[automatically_derived]
            impl #impl_generics #p::SubLayer for #self_ty #sublayer_where {
                #config
                #carry
                type Of<#of> = #invalid_params<#of>;
                const NAME: &'static str = #type_name;
                const IDENTITY: &'static str = #identity;

                fn param_specs(_: &Self::Config) -> #p::Vec<#p::ParamSpec> {
                    #p::Vec::new()
                }
            }

            #[automatically_derived]
            impl #impl_generics #p::Params<#value_ty> for #self_ty #where_clause {
                #struct_params
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
    let identity = identity(ident);
    quote! {
        #[automatically_derived]
        impl #p::SubLayer for #ident<#p::Tensor> {
            #config_item
            #carry_item
            type Of<#value_ty> = #ident<#value_ty>;
            const NAME: &'static str = #name;
            const IDENTITY: &'static str = #identity;

            #param_specs
        }
    }
}

/// `SubLayer::IDENTITY`: the module path and name of the struct and where its derive is, so two
/// structs of one name in two functions of one module differ too.
fn identity(ident: &syn::Ident) -> TokenStream {
    let name = ident.unraw().to_string();
    quote! {
        ::core::concat!(
            ::core::module_path!(), "::", #name, ":", ::core::line!(), ":", ::core::column!()
        )
    }
}
