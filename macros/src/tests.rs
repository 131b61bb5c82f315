//! Expansion tests: `quote!{}` input through the expanders, the output re-parsed as a
//! `syn::File`, pretty-printed, and asserted on. Two expansions are also kept as golden files
//! in `tests/expanded/` (`STACKSCAN_BLESS=1` rewrites them) so a change to the generated code
//! shows in review.

#![allow(
    clippy::unwrap_used,
    reason = "a test that cannot go on should fail loudly"
)]

use proc_macro2::TokenStream;
use quote::quote;

use crate::stack::layer_stack;
use crate::sublayer::derive;

fn file(tokens: TokenStream) -> syn::File {
    match syn::parse2::<syn::File>(tokens.clone()) {
        Ok(f) => f,
        Err(e) => panic!("the expansion is not a Rust file ({e}):\n{tokens}"),
    }
}

fn pretty(tokens: TokenStream) -> String {
    prettyplease::unparse(&file(tokens))
}

/// Without whitespace, for assertions that do not depend on line breaks.
fn compact(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Asserts the expansion contains each snippet (whitespace ignored).
fn assert_contains(tokens: &TokenStream, snippets: &[&str]) {
    let flat = compact(&tokens.to_string());
    for s in snippets {
        assert!(
            flat.contains(&compact(s)),
            "missing `{s}` in\n{}",
            pretty(tokens.clone())
        );
    }
}

/// The `compile_error!` messages in an expansion, in order.
fn compile_errors(tokens: &TokenStream) -> Vec<String> {
    fn walk(tokens: TokenStream, out: &mut Vec<String>) {
        let trees: Vec<_> = tokens.into_iter().collect();
        for (i, tt) in trees.iter().enumerate() {
            match tt {
                proc_macro2::TokenTree::Ident(id) if id == "compile_error" => {
                    if let Some(proc_macro2::TokenTree::Group(g)) = trees.get(i + 2) {
                        let lit: syn::LitStr = syn::parse2(g.stream()).unwrap();
                        out.push(lit.value());
                    }
                }
                proc_macro2::TokenTree::Group(g) => walk(g.stream(), out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(tokens.clone(), &mut out);
    out
}

/// The items inside the expansion's `const _: () = { … };` blocks.
fn const_block_items(f: &syn::File) -> Vec<syn::Item> {
    let mut items = Vec::new();
    for item in &f.items {
        if let syn::Item::Const(c) = item
            && let syn::Expr::Block(b) = &*c.expr
        {
            for stmt in &b.block.stmts {
                if let syn::Stmt::Item(i) = stmt {
                    items.push(i.clone());
                }
            }
        }
    }
    items
}

fn impl_of<'a>(items: &'a [syn::Item], trait_name: &str) -> &'a syn::ItemImpl {
    items
        .iter()
        .find_map(|i| match i {
            syn::Item::Impl(imp)
                if imp.trait_.as_ref().is_some_and(|(_, path, _)| {
                    path.segments.last().is_some_and(|s| s.ident == trait_name)
                }) =>
            {
                Some(imp)
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no impl of `{trait_name}`"))
}

fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/expanded")
        .join(name);
    if std::env::var_os("STACKSCAN_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} ({e}); run with STACKSCAN_BLESS=1", path.display()));
    assert_eq!(
        actual,
        expected,
        "{} changed; review and rerun with STACKSCAN_BLESS=1",
        path.display()
    );
}

fn toy_a() -> TokenStream {
    quote! {
        #[sublayer(config = ToyConfig, carry = Hidden, name = "A")]
        pub struct GatedMlp<T> {
            #[param(shape = [cfg.d, cfg.f], shard = 0)]
            pub w1: T,
            #[param(shape = [cfg.f, cfg.d], shard = 1, init = normal(0.01))]
            pub w2: T,
            #[param(shape = [cfg.d], replicated)]
            pub gain: T,
            #[param(shape = [cfg.d], replicated, init = zeros, dtype = bf16, name = "b")]
            pub bias: T,
        }
    }
}

#[test]
fn sublayer_expands_to_both_impls_in_a_const_block() {
    let out = derive(toy_a()).unwrap();
    golden("sublayer.rs", &pretty(out.clone()));
    assert!(compile_errors(&out).is_empty());
    let f = file(out.clone());
    assert_eq!(f.items.len(), 1, "one `const _` item");
    let items = const_block_items(&f);
    let sublayer = impl_of(&items, "SubLayer");
    let self_ty = &sublayer.self_ty;
    assert_eq!(
        quote!(#self_ty).to_string(),
        quote!(GatedMlp<::stackscan::__private::Tensor>).to_string()
    );
    assert!(
        sublayer
            .attrs
            .iter()
            .any(|a| a.path().is_ident("automatically_derived"))
    );
    let assoc: Vec<String> = sublayer
        .items
        .iter()
        .filter_map(|i| match i {
            syn::ImplItem::Type(t) => {
                let ty = &t.ty;
                Some(format!("{} = {}", t.ident, quote!(#ty)))
            }
            syn::ImplItem::Const(c) => {
                let e = &c.expr;
                Some(format!("{} = {}", c.ident, quote!(#e)))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        assoc,
        [
            "Config = ToyConfig",
            "Carry = Hidden",
            "Of = GatedMlp < T >",
            "NAME = \"A\"",
            "IDENTITY = :: stackscan :: __private :: concat ! (:: stackscan :: __private :: module_path ! () , \"::\" , \"GatedMlp\" , \":\" , :: stackscan :: __private :: line ! () , \":\" , :: stackscan :: __private :: column ! ())"
        ]
    );
    let params = impl_of(&items, "Params");
    assert_eq!(params.generics.params.len(), 1);
    assert_contains(
        &out,
        &[
            "ParamSpec::sharded(\"w1\", &[__stackscan_cfg.d, __stackscan_cfg.f], ::stackscan::__private::DType::F32, 0usize)",
            ".with_init(::stackscan::__private::Init::Normal(0.01))",
            // Defaults: normal(0.02) when sharded, ones when replicated.
            ".with_init(::stackscan::__private::Init::Normal(0.02))",
            "ParamSpec::replicated(\"gain\", &[__stackscan_cfg.d], ::stackscan::__private::DType::F32)",
            ".with_init(::stackscan::__private::Init::Ones)",
            "ParamSpec::replicated(\"b\", &[__stackscan_cfg.d], ::stackscan::__private::DType::BF16)",
            ".with_init(::stackscan::__private::Init::Zeros)",
            "const LEN: ::stackscan::__private::primitive::usize = 4usize;",
            "__stackscan_out.push(self.w1); __stackscan_out.push(self.w2);",
            "w1: __stackscan_values.one()?, w2: __stackscan_values.one()?",
        ],
    );
}

#[test]
fn generic_config_types_keep_their_commas() {
    let out = derive(quote! {
        #[sublayer(config = Sizes<f32, 4>, carry = Hidden)]
        struct S<T> {
            #[param(shape = [cfg.d], shard = 0)]
            w: T,
        }
    })
    .unwrap();
    assert!(compile_errors(&out).is_empty());
    assert_contains(&out, &["type Config = Sizes<f32, 4>;"]);
}

#[test]
fn sublayer_mistakes_are_all_reported_and_stub_impls_keep_the_type_usable() {
    let out = derive(quote! {
        #[sublayer(config = Cfg, carry = Hidden, colour = "red")]
        struct Bad<T> {
            #[param(shape = [1, 2], shard = 2)]
            a: T,
            #[param(shard = 0)]
            b: T,
            #[param(shape = [1], replicated, frozen)]
            c: T,
            d: T,
        }
    })
    .unwrap();
    let errors = compile_errors(&out);
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert!(errors[0].starts_with("unknown sublayer option `colour`; expected one of"));
    assert!(
        errors
            .iter()
            .any(|e| e.contains("shard dimension 2 is out of range"))
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("parameter `b` has no shape"))
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("`frozen` is not supported"))
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("field `d` has no `#[param"))
    );
    let items = const_block_items(&file(out));
    impl_of(&items, "SubLayer");
    impl_of(&items, "Params");
}

#[test]
fn stub_impls_take_the_structs_generics_as_written() {
    let out = derive(quote! {
        #[sublayer(config = Cfg, carry = Hidden)]
        struct Bad<'a, T: Clone, const N: usize>
        where
            T: Send,
        {
            #[param(shape = [4], shard = 0)]
            a: &'a T,
        }
    })
    .unwrap();
    let errors = compile_errors(&out);
    assert!(
        errors[0].starts_with("lifetime parameters are not supported"),
        "{errors:#?}"
    );
    let items = const_block_items(&file(out.clone()));
    let sublayer = impl_of(&items, "SubLayer");
    assert_eq!(sublayer.generics.params.len(), 3);
    assert_contains(
        &out,
        &[
            "impl<'a, T: Clone, const N: usize> ::stackscan::__private::SubLayer for Bad<'a, T, N>",
            "Bad<'a, T, N>: 'static + ::stackscan::__private::Params<::stackscan::__private::Tensor>",
            "impl<'a, T: Clone, const N: usize> ::stackscan::__private::Params<T> for Bad<'a, T, N> where T: Send",
        ],
    );
}

#[test]
fn a_missing_config_or_carry_still_gets_a_stub_with_a_placeholder() {
    let out = derive(quote! {
        #[sublayer(name = "x")]
        struct Bad<T> {
            #[param(shape = [4], shard = 0)]
            a: T,
        }
    })
    .unwrap();
    assert_eq!(compile_errors(&out).len(), 2);
    let items = const_block_items(&file(out.clone()));
    impl_of(&items, "SubLayer");
    assert_contains(
        &out,
        &[
            "type Config = NoConfigInSublayerAttribute;",
            "type Carry = NoCarryInSublayerAttribute;",
        ],
    );
}

#[test]
fn sublayer_on_an_enum_or_tuple_struct_is_an_error_beside_stub_impls() {
    for input in [
        quote!(
            enum E<T> {
                A(T),
            }
        ),
        quote!(
            #[sublayer(config = C)]
            struct S<T>(T);
        ),
    ] {
        let out = derive(input).unwrap();
        assert!(!compile_errors(&out).is_empty());
        let items = const_block_items(&file(out));
        impl_of(&items, "SubLayer");
        impl_of(&items, "Params");
    }
}

fn toy_stack(args: TokenStream) -> TokenStream {
    layer_stack(
        args,
        quote!(
            pub struct Toy;
        ),
    )
    .unwrap()
}

#[test]
fn layer_stack_expands_to_the_item_an_impl_and_const_checks() {
    let out = toy_stack(quote! {
        block = [GatedMlp, GatedMlp, GatedMlp, SineResidual],
        layers = 12,
        prefetch_fsdp_weights,
        defer_grad_reduce_scatter,
    });
    golden("layer_stack.rs", &pretty(out.clone()));
    assert!(compile_errors(&out).is_empty());
    let f = file(out.clone());
    assert!(matches!(&f.items[0], syn::Item::Struct(s) if s.ident == "Toy"));
    let items = const_block_items(&f);
    let imp = impl_of(&items, "LayerStack");
    let self_ty = &imp.self_ty;
    assert_eq!(quote!(#self_ty).to_string(), "Toy");
    // The options check; the distinct-name check lives in `stack()`'s names.
    let consts = items
        .iter()
        .filter(|i| matches!(i, syn::Item::Const(_)))
        .count();
    assert_eq!(consts, 1);
    let this = "<Toy as ::stackscan::__private::LayerStack>";
    assert_contains(
        &out,
        &[
            // A literal count, checked here, needs no config.
            "fn __stackscan_stack(_: &<Toy as ::stackscan::__private::LayerStack>::Config)",
            "::stackscan::__private::Count::Layers(::stackscan::__private::count_value(12usize))",
            "::stackscan::__private::Source::Const",
            "prefetch_fsdp_weights: true",
            "defer_grad_reduce_scatter: true",
            "unroll: 2usize",
            &format!("{this}::OPTIONS.validate()"),
            // Each distinct entry is bound once per body, as a value whose type is inferred.
            "let __stackscan_entry0 = GatedMlp::__STACKSCAN_ENTRY;",
            "let __stackscan_entry1 = SineResidual::__STACKSCAN_ENTRY;",
            "::stackscan::__private::clash(__stackscan_entry0, __stackscan_entry1)",
            "::stackscan::__private::with_config::<<Toy as ::stackscan::__private::LayerStack>::Config, _>(__stackscan_entry0,",
            // The config is the first entry's, through a bound (a private entry may be first).
            "impl<__StackscanConfig> ::stackscan::__private::LayerStack for Toy where GatedMlp<::stackscan::__private::Tensor>: ::stackscan::__private::SubLayer<Config = __StackscanConfig>,",
            "type Config = __StackscanConfig;",
        ],
    );
    let flat = compact(&out.to_string());
    // One kind per distinct sub-layer, in order of first appearance.
    assert_eq!(flat.matches("__private::kind(").count(), 2);
    // Every entry names its kind in the stack; one pair is checked for a shared kind name.
    assert_eq!(flat.matches("__private::name(").count(), 4);
    assert_eq!(flat.matches("__private::clash(").count(), 1);
    // Only the config's bound names an entry as a type, with its value type written out.
    assert_eq!(
        flat.matches("GatedMlp<::stackscan::__private::Tensor>")
            .count(),
        1
    );
}

#[test]
fn a_count_over_the_config_is_read_when_the_stack_is_built() {
    let out = toy_stack(quote!(
        block = [Mlp],
        layers = cfg.layers,
        prefetch_fsdp_weights
    ));
    assert!(compile_errors(&out).is_empty());
    assert_contains(
        &out,
        &[
            // The user's `cfg` is renamed to the parameter (a `const cfg` in scope would turn a
            // parameter named `cfg` into a pattern), and the field is named for the error.
            "fn __stackscan_stack(__stackscan_cfg: &<Toy as ::stackscan::__private::LayerStack>::Config)",
            "::stackscan::__private::Count::Layers(::stackscan::__private::count_value(__stackscan_cfg.layers))",
            "::stackscan::__private::Source::Field(\"layers\")",
        ],
    );
    // No `const` check: its value is not known at compile time.
    assert!(!out.to_string().contains("__STACKSCAN_COUNT"));
    let out = toy_stack(quote!(block = [Mlp], repeat = cfg.blocks / 2));
    assert_contains(
        &out,
        &[
            "::stackscan::__private::Count::Repeat(",
            "::stackscan::__private::Source::Expr(\"cfg . blocks / 2\")",
        ],
    );
    // `x.cfg` and `m::cfg` are not the config: a constant, checked at compile time.
    let out = toy_stack(quote!(block = [Mlp], repeat = m::cfg + X.cfg));
    assert_contains(
        &out,
        &["const __STACKSCAN_COUNT: ::stackscan::__private::primitive::usize = m::cfg + X.cfg;"],
    );
    let out = toy_stack(quote!(block = [Mlp], repeat = 1, unroll = cfg.u));
    assert_eq!(
        compile_errors(&out),
        [
            "`unroll` is a constant: the options are checked at compile time, so it cannot read `cfg`"
        ]
    );
}

mod nesting;
mod robustness;
mod stack_errors;
