//! Impls for an invalid declaration (sub-layer, module or model): the same types with bodies
//! that do nothing, so the macro's `compile_error!`s are the only errors its uses see.

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;

use super::check::Stub;
use super::expand::{identity, inputs_over_tensor, on_tensor, over_tensor};
use super::parse::Derive;
use crate::{primitive, private};

/// Impls for an invalid declaration: the same types, bodies that do nothing, so the
/// `compile_error!`s beside them are the only errors. The impls take the struct's generics as
/// written (bounds, `where` clause, extra parameters), so they hold wherever the struct is
/// well-formed; a missing `config` or `carry` is a placeholder type.
pub(crate) fn expand_stub(stub: &Stub) -> TokenStream {
    let p = private();
    let (usize_ty, str_ty) = (primitive("usize"), primitive("str"));
    let Stub {
        derive,
        ident,
        value_ty,
        generics,
        config,
        carry,
        fields,
        stack,
        inputs,
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
    let config_ty = match config {
        Some(config) => config.to_token_stream(),
        None => quote!(#missing_config),
    };
    let (config, config_placeholder) = match config {
        Some(config) => (quote_spanned!(config.span()=> type Config = #config;), None),
        None => (
            quote!(type Config = #missing_config;),
            Some(quote! {
                pub enum #missing_config {}
                impl #p::Clone for #missing_config {
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
    let stub_params = |value_ty: &TokenStream, len: usize| {
        quote! {
            const LEN: #usize_ty = #len;

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
    let struct_params = stub_params(&value_ty, len);
    let trait_impl = match derive {
        Derive::SubLayer => quote! {
            #[automatically_derived]
            impl #impl_generics #p::SubLayer for #self_ty #sublayer_where {
                #config
                #carry
                type Of<#of> = #invalid_params<#of>;
                const NAME: &'static #str_ty = #type_name;
                const IDENTITY: &'static #str_ty = #identity;

                fn param_specs(_: &Self::Config) -> #p::Vec<#p::ParamSpec> {
                    #p::Vec::new()
                }
            }
        },
        Derive::Model => model_stub(stub, &config, &config_ty, stack.as_ref(), inputs.as_ref()),
        Derive::Inputs => quote! {
            #[automatically_derived]
            impl #impl_generics #p::Inputs for #self_ty #sublayer_where {
                #config

                fn input_specs(_: &Self::Config) -> #p::Vec<#p::InputSpec> {
                    #p::Vec::new()
                }
            }
        },
        Derive::Module => quote! {
            #[automatically_derived]
            impl #impl_generics #p::Module for #self_ty #sublayer_where {
                #config
                type Of<#of> = #invalid_params<#of>;

                fn param_specs(_: &Self::Config) -> #p::Vec<#p::ParamSpec> {
                    #p::Vec::new()
                }
            }
        },
    };
    let carry_placeholder = carry_placeholder.filter(|_| *derive == Derive::SubLayer);
    let of_params = stub_params(&quote!(#of), 0);
    quote! {
        const _: () = {
            #config_placeholder
            #carry_placeholder

            pub struct #invalid_params<#of>(fn() -> #of);

            #[automatically_derived]
            impl<#of> #p::Params<#of> for #invalid_params<#of> {
                #of_params
            }

            #trait_impl

            #[automatically_derived]
            impl #impl_generics #p::Params<#value_ty> for #self_ty #where_clause {
                #struct_params
            }
        };
    }
}

/// The `Model` impl of an invalid model declaration, so its `ModelForward` impl and its uses
/// (`stack_model::<M>`) add no errors: the stack and the inputs as written, or placeholders
/// whose names say what is missing; no parameters.
fn model_stub(
    stub: &Stub,
    config: &TokenStream,
    config_ty: &TokenStream,
    stack: Option<&syn::Type>,
    inputs: Option<&syn::TypePath>,
) -> TokenStream {
    let p = private();
    let usize_ty = primitive("usize");
    let Stub {
        ident,
        value_ty,
        generics,
        ..
    } = stub;
    let (impl_generics, self_ty) = match value_ty {
        Some(t) => over_tensor(ident, t, generics),
        None => {
            let (impl_generics, ty_generics, _) = generics.split_for_impl();
            (impl_generics.to_token_stream(), quote!(#ident #ty_generics))
        }
    };
    let where_clause = generics.where_clause.as_ref().map(|w| &w.predicates);
    let no_stack = format_ident!("NoStackFieldInModel");
    let no_inputs = format_ident!("NoInputsInModelAttribute");
    let (stack_item, stack_bounds, stack_placeholder) = match stack {
        Some(ty) => {
            let ty = match value_ty {
                Some(t) => on_tensor(ty, t),
                None => ty.to_token_stream(),
            };
            let of = quote!(<#ty as #p::StackField>::Stack);
            (
                quote!(type Stack = #of;),
                quote!(#ty: #p::StackField, #of: #p::LayerStack<Config = #config_ty>,),
                None,
            )
        }
        None => (quote!(type Stack = #no_stack;), TokenStream::new(), {
            let stub = crate::stack::expand::stub_impl(
                &quote!(#no_stack),
                config_ty,
                "model without a stack field",
            );
            Some(quote! {
                pub enum #no_stack {}

                #stub
            })
        }),
    };
    let (inputs_item, inputs_placeholder) = match inputs {
        Some(i) => {
            let ty = inputs_over_tensor(i, value_ty.as_ref());
            (quote_spanned!(i.span()=> type Inputs = #ty;), None)
        }
        None => (
            quote!(type Inputs = #no_inputs;),
            Some(quote! {
                pub enum #no_inputs {}

                #[automatically_derived]
                impl #p::Params<#p::Tensor> for #no_inputs {
                    const LEN: #usize_ty = 0;

                    fn from_values(_: #p::Vec<#p::Tensor>) -> #p::Result<Self> {
                        #p::Err(#p::invalid_declaration("model inputs"))
                    }

                    fn into_values(self) -> #p::Vec<#p::Tensor> {
                        match self {}
                    }

                    fn values(&self) -> #p::Vec<&#p::Tensor> {
                        match *self {}
                    }
                }

                #[automatically_derived]
                impl #p::Inputs for #no_inputs {
                    type Config = #config_ty;

                    fn input_specs(_: &Self::Config) -> #p::Vec<#p::InputSpec> {
                        #p::Vec::new()
                    }
                }
            }),
        ),
    };
    quote! {
        #stack_placeholder
        #inputs_placeholder

        #[automatically_derived]
        impl #impl_generics #p::Model for #self_ty
        where
            Self: 'static + #p::Params<#p::Tensor>,
            #stack_bounds
            #where_clause
        {
            #config
            #stack_item
            #inputs_item

            fn outer_specs(_: &Self::Config) -> #p::Vec<#p::ParamSpec> {
                #p::Vec::new()
            }
        }
    }
}
