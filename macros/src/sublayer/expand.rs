//! A validated sub-layer → its `Params` and `SubLayer` impls. Infallible.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;

use super::check::{Init, InputMember, Member, Model, Param};
use super::parse::Derive;
use crate::{config, primitive, private, respan};

pub(crate) fn expand(model: &Model) -> TokenStream {
    let p = private();
    let Model {
        derive,
        ident,
        value_ty,
        config,
        carry,
        name,
        members,
        generics,
        ..
    } = model;
    let cfg = config::binding();
    let specs_name = syn::Ident::new("__stackscan_specs", Span::mixed_site());
    let specs = members.iter().map(|member| match member {
        Member::Param(param) => {
            let spec = param_spec(param);
            quote!(#specs_name.push(#spec);)
        }
        Member::Module(sub) => {
            let name = &sub.name;
            let ty = on_tensor(&sub.ty, value_ty);
            // Spanned on the field's type: "not a module" and a config of the wrong type are
            // reported where the user wrote the field.
            let span = sub.ty.span();
            let sub_cfg = match &sub.config {
                Some(expr) => {
                    let expr = config::rebind(expr);
                    quote!(&(#expr))
                }
                None => {
                    let cfg = config::binding_at(span);
                    quote_spanned! {span=>
                        #p::SameConfig::<<#ty as #p::Module>::Config>::same(#cfg)
                    }
                }
            };
            let specs = quote_spanned! {span=>
                <#ty as #p::Module>::param_specs(#sub_cfg)
            };
            quote!(#specs_name.append(&mut #p::nested(#name, #specs));)
        }
        Member::Stack(_) | Member::Input(_) => TokenStream::new(),
    });
    let specs: Vec<TokenStream> = specs.collect();
    let specs_fn = |fn_name: &str| {
        let fn_name = syn::Ident::new(fn_name, Span::call_site());
        quote! {
            fn #fn_name(#cfg: &Self::Config) -> #p::Vec<#p::ParamSpec> {
                let _ = #cfg;
                let mut #specs_name = #p::Vec::new();
                #(#specs)*
                #specs_name
            }
        }
    };
    let param_specs = specs_fn("param_specs");
    let trait_impl = match (derive, carry) {
        (Derive::SubLayer, Some(carry)) => {
            sublayer_impl(ident, value_ty, config, carry, name, param_specs)
        }
        (Derive::Model, _) => model_impl(model, specs_fn("outer_specs")),
        (Derive::Inputs, _) => inputs_impl(ident, config, members),
        _ => module_impl(ident, value_ty, config, param_specs),
    };
    let params = params_impl(ident, value_ty, generics, members);
    quote! {
        const _: () = {
            #trait_impl

            #params
        };
    }
}

/// One parameter's `ParamSpec` expression.
fn param_spec(param: &Param) -> TokenStream {
    let p = private();
    let name = &param.name;
    let dims = param.dims.iter().map(config::rebind);
    let dtype = format_ident!("{}", param.dtype);
    let init = match &param.init {
        Init::Normal(std) => {
            let std = config::rebind(std);
            quote!(#p::Init::Normal(#std))
        }
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
}

/// `Params<T>` for the struct over every value type: its own parameters one value each, a
/// sub-module's as a run of `LEN` values, in declaration order.
fn params_impl(
    ident: &syn::Ident,
    value_ty: &syn::Ident,
    generics: &syn::Generics,
    members: &[Member],
) -> TokenStream {
    let p = private();
    // Bindings have names no user item plausibly has: a `const` of the same name in scope
    // would turn a binding into a pattern (items are not hygienic).
    let values = syn::Ident::new("__stackscan_values", Span::mixed_site());
    let out = syn::Ident::new("__stackscan_out", Span::mixed_site());
    let type_name = ident.unraw().to_string();
    let mut lens = Vec::new();
    let mut build = Vec::new();
    let mut into = Vec::new();
    let mut refs = Vec::new();
    for member in members {
        match member {
            Member::Stack(stack) => {
                let field = &stack.field;
                let span = stack.ty.span();
                let p = respan(p.clone(), span);
                build.push(quote_spanned!(span=> #field: #p::Layers::new()));
            }
            Member::Input(InputMember { field, .. }) | Member::Param(Param { field, .. }) => {
                build.push(quote!(#field: #values.one()?));
                into.push(quote!(#out.push(self.#field);));
                refs.push(quote!(#out.push(&self.#field);));
            }
            Member::Module(sub) => {
                let (field, ty) = (&sub.field, &sub.ty);
                // No `where` bound: a derived part is `Params<T>` for every `T`, and a bound
                // would fail again at every use of the struct; spanned uses fail once, on
                // the field (identical errors at one span are reported once).
                let span = ty.span();
                let params = quote_spanned!(span=> <#ty as #p::Params<#value_ty>>);
                lens.push(quote_spanned!(span=> #params::LEN));
                build.push(quote_spanned!(span=> #field: #values.module::<#ty>()?));
                into.push(quote_spanned! {span=>
                    #out.append(&mut #params::into_values(self.#field));
                });
                refs.push(quote_spanned! {span=>
                    #out.append(&mut #params::values(&self.#field));
                });
            }
        }
    }
    let own = members
        .iter()
        .filter(|m| matches!(m, Member::Param(_) | Member::Input(_)))
        .count();
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let usize_ty = primitive("usize");
    quote! {
        #[automatically_derived]
        impl #impl_generics #p::Params<#value_ty> for #ident #ty_generics #where_clause {
            const LEN: #usize_ty = #own #(+ #lens)*;

            fn from_values(#values: #p::Vec<#value_ty>) -> #p::Result<Self> {
                let mut #values = #p::Values::new(
                    #values,
                    #type_name,
                    <Self as #p::Params<#value_ty>>::LEN,
                )?;
                #p::Ok(#ident { #(#build),* })
            }

            fn into_values(self) -> #p::Vec<#value_ty> {
                let mut #out = #p::Vec::with_capacity(<Self as #p::Params<#value_ty>>::LEN);
                #(#into)*
                #out
            }

            fn values(&self) -> #p::Vec<&#value_ty> {
                let mut #out = #p::Vec::with_capacity(<Self as #p::Params<#value_ty>>::LEN);
                #(#refs)*
                #out
            }
        }
    }
}

/// `ty` with the value type parameter replaced by the DSL's `Tensor`: the field type
/// `Attention<T>` of `S<T>` as it is in `S<Tensor>`, whose `Module` impl gives its specs.
pub(super) fn on_tensor(ty: &syn::Type, value_ty: &syn::Ident) -> TokenStream {
    fn replace(tokens: TokenStream, value_ty: &syn::Ident, tensor: &TokenStream) -> TokenStream {
        tokens
            .into_iter()
            .map(|tree| match tree {
                TokenTree::Ident(i) if i == *value_ty => tensor.clone(),
                TokenTree::Group(g) => {
                    let mut group = proc_macro2::Group::new(
                        g.delimiter(),
                        replace(g.stream(), value_ty, tensor),
                    );
                    group.set_span(g.span());
                    TokenTree::Group(group).into()
                }
                other => other.into(),
            })
            .collect()
    }
    let p = private();
    // On the field's span, so an error about the substituted type lands on the field.
    let tensor = respan(quote!(#p::Tensor), ty.span());
    replace(ty.to_token_stream(), value_ty, &tensor)
}

/// `Model` for the model struct over `Tensor` (other type parameters, the stack's, kept).
fn model_impl(model: &Model, outer_specs: TokenStream) -> TokenStream {
    let p = private();
    let Model {
        ident,
        value_ty,
        config,
        members,
        inputs,
        generics,
        ..
    } = model;
    let Some(stack) = members.iter().find_map(|m| match m {
        Member::Stack(s) => Some(s),
        _ => None,
    }) else {
        return TokenStream::new();
    };
    let (impl_generics, self_ty) = over_tensor(ident, value_ty, generics);
    let stack_ty = on_tensor(&stack.ty, value_ty);
    let span = stack.ty.span();
    let ps = respan(p.clone(), span);
    let stack_of = quote_spanned!(span=> <#stack_ty as #ps::StackField>::Stack);
    let stack_bounds = quote_spanned! {span=>
        #stack_ty: #ps::StackField,
        #stack_of: #ps::LayerStack<Config = #config>,
    };
    let where_clause = generics.where_clause.as_ref().map(|w| &w.predicates);
    let inputs = inputs.as_ref().map(|i| {
        let ty = inputs_over_tensor(i, Some(value_ty));
        quote_spanned!(i.span()=> type Inputs = #ty;)
    });
    let config_item = quote_spanned!(config.span()=> type Config = #config;);
    quote! {
        #[automatically_derived]
        impl #impl_generics #p::Model for #self_ty
        where
            #stack_bounds
            Self: 'static,
            #where_clause
        {
            #config_item
            type Stack = #stack_of;
            #inputs

            #outer_specs
        }
    }
}

/// A model's `inputs = …` over `Tensor`: `Batch` → `Batch<Tensor>`, `Batch<T>` →
/// `Batch<Tensor>` for the model's value type `T` (when known), any other arguments as written.
pub(super) fn inputs_over_tensor(
    path: &syn::TypePath,
    value_ty: Option<&syn::Ident>,
) -> TokenStream {
    let p = private();
    let written_bare = path
        .path
        .segments
        .last()
        .is_none_or(|s| s.arguments.is_none());
    match value_ty {
        _ if written_bare => quote_spanned!(path.span()=> #path<#p::Tensor>),
        Some(t) => on_tensor(&syn::Type::Path(path.clone()), t),
        None => path.to_token_stream(),
    }
}

/// The struct's generics without the value type, and the struct over `Tensor`.
pub(super) fn over_tensor(
    ident: &syn::Ident,
    value_ty: &syn::Ident,
    generics: &syn::Generics,
) -> (TokenStream, TokenStream) {
    let p = private();
    let rest: Vec<_> = generics
        .params
        .iter()
        .filter(|g| !matches!(g, syn::GenericParam::Type(t) if t.ident == *value_ty))
        .collect();
    let args = generics.params.iter().map(|g| match g {
        syn::GenericParam::Type(t) if t.ident == *value_ty => quote!(#p::Tensor),
        syn::GenericParam::Type(t) => t.ident.to_token_stream(),
        syn::GenericParam::Lifetime(l) => l.lifetime.to_token_stream(),
        syn::GenericParam::Const(c) => c.ident.to_token_stream(),
    });
    let impl_generics = if rest.is_empty() {
        TokenStream::new()
    } else {
        quote!(<#(#rest),*>)
    };
    (impl_generics, quote!(#ident<#(#args),*>))
}

/// `Inputs` for the inputs struct over `Tensor`.
fn inputs_impl(ident: &syn::Ident, config: &syn::Type, members: &[Member]) -> TokenStream {
    let p = private();
    let cfg = config::binding();
    let specs = members.iter().filter_map(|m| match m {
        Member::Input(i) => Some(i),
        _ => None,
    });
    let specs = specs.map(|i| {
        let name = &i.name;
        let dims = i.dims.iter().map(config::rebind);
        let dtype = format_ident!("{}", i.dtype);
        let values = i.values.as_ref().map(|v| {
            let span = v.span();
            let v = config::rebind(v);
            quote_spanned!(span=> .with_values(#v))
        });
        quote! {
            #p::InputSpec::new(
                #name,
                #p::TensorType::new(#p::DType::#dtype, #p::list([#(#dims),*])),
            )#values
        }
    });
    let config_item = quote_spanned!(config.span()=> type Config = #config;);
    quote! {
        #[automatically_derived]
        impl #p::Inputs for #ident<#p::Tensor> {
            #config_item

            fn input_specs(#cfg: &Self::Config) -> #p::Vec<#p::InputSpec> {
                let _ = #cfg;
                #p::list([#(#specs),*])
            }
        }
    }
}

fn module_impl(
    ident: &syn::Ident,
    value_ty: &syn::Ident,
    config: &syn::Type,
    param_specs: TokenStream,
) -> TokenStream {
    let p = private();
    let config_item = quote_spanned!(config.span()=> type Config = #config;);
    quote! {
        #[automatically_derived]
        impl #p::Module for #ident<#p::Tensor> {
            #config_item
            type Of<#value_ty> = #ident<#value_ty>;

            #param_specs
        }
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
    let str_ty = primitive("str");
    quote! {
        #[automatically_derived]
        impl #p::SubLayer for #ident<#p::Tensor> {
            #config_item
            #carry_item
            type Of<#value_ty> = #ident<#value_ty>;
            const NAME: &'static #str_ty = #name;
            const IDENTITY: &'static #str_ty = #identity;

            #param_specs
        }
    }
}

/// `SubLayer::IDENTITY`: the module path and name of the struct and where its derive is, so two
/// structs of one name in two functions of one module differ too.
pub(super) fn identity(ident: &syn::Ident) -> TokenStream {
    let name = ident.unraw().to_string();
    let p = private();
    quote! {
        #p::concat!(
            #p::module_path!(), "::", #name, ":", #p::line!(), ":", #p::column!()
        )
    }
}
