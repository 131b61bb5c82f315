//! Expansions of sub-module fields, `#[derive(Module)]` and `#[derive(Model)]` (issue 10,
//! items 1 to 3).

use super::*;

#[test]
fn sub_module_fields_nest_their_names_and_check_their_types() {
    let out = derive(quote! {
        #[sublayer(config = Cfg, carry = Hidden)]
        pub struct Block<T> {
            #[param(shape = [cfg.d], replicated)]
            norm: T,
            #[module(config = cfg.attention())]
            attn: Attention<T>,
            #[module]
            mlp: layers::SwiGlu<T>,
        }
    })
    .unwrap();
    assert!(compile_errors(&out).is_empty());
    assert_contains(
        &out,
        &[
            "::stackscan::__private::nested(\"attn\", <Attention<::stackscan::__private::Tensor> as ::stackscan::__private::Module>::param_specs(&(__stackscan_cfg.attention())))",
            "::stackscan::__private::nested(\"mlp\", <layers::SwiGlu<::stackscan::__private::Tensor> as ::stackscan::__private::Module>::param_specs(::stackscan::__private::SameConfig::<<layers::SwiGlu<::stackscan::__private::Tensor> as ::stackscan::__private::Module>::Config>::same(__stackscan_cfg)))",
            "const LEN: ::stackscan::__private::primitive::usize = 1usize + <Attention<T> as ::stackscan::__private::Params<T>>::LEN + <layers::SwiGlu<T> as ::stackscan::__private::Params<T>>::LEN;",
            "attn: __stackscan_values.module::<Attention<T>>()?",
        ],
    );
    let module = crate::sublayer::derive_module(quote! {
        #[module(config = AttnDims)]
        pub struct Attention<T> {
            #[param(shape = [cfg.d, cfg.d], shard = 0)]
            wq: T,
        }
    })
    .unwrap();
    assert!(compile_errors(&module).is_empty());
    assert_contains(
        &module,
        &[
            "impl ::stackscan::__private::Module for Attention<::stackscan::__private::Tensor>",
            "type Config = AttnDims;",
            "type Of<T> = Attention<T>;",
        ],
    );
}

#[test]
fn a_model_over_its_stack_builds_the_stack_field() {
    let out = crate::sublayer::derive_model(quote! {
        #[model(config = LlamaConfig, inputs = Tokens)]
        pub struct Llama<T, S> {
            #[param(shape = [cfg.vocab, cfg.d], shard = 0)]
            embed: T,
            #[stack]
            layers: Layers<S>,
            #[module]
            head: Head<T>,
        }
    })
    .unwrap();
    assert!(compile_errors(&out).is_empty());
    golden("model.rs", &pretty(out.clone()));
    assert_contains(
        &out,
        &[
            "impl<S> ::stackscan::__private::Model for Llama<::stackscan::__private::Tensor, S>",
            "type Inputs = Tokens<::stackscan::__private::Tensor>;",
            "type Stack = <Layers<S> as ::stackscan::__private::StackField>::Stack;",
            "layers: ::stackscan::__private::Layers::new()",
            "impl<T, S> ::stackscan::__private::Params<T> for Llama<T, S>",
            "const LEN: ::stackscan::__private::primitive::usize = 1usize + <Head<T> as ::stackscan::__private::Params<T>>::LEN;",
        ],
    );
    let missing = crate::sublayer::derive_model(quote! {
        #[model(config = Cfg, inputs = Batch)]
        pub struct Tiny<T> {
            #[param(shape = [4], replicated)]
            embed: T,
        }
    })
    .unwrap();
    assert_eq!(
        compile_errors(&missing),
        ["a model needs its stack as a field: `#[stack] layers: Layers<MyStack>`"]
    );
}
