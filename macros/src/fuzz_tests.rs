//! Bounded fuzzing of the macro front end: valid declarations, mutations of them and random
//! attribute arguments and items go through [`derive`] and [`layer_stack`], the functions the
//! two entry points call. Whatever the input, neither may panic (the user would get "proc
//! macro panicked" with no span) and the output, expansion and `compile_error!`s alike, must
//! parse as items (or the user gets errors about code they never wrote).
//!
//! Each case has its own seed, so the run is deterministic. The default is a few thousand
//! cases in a few seconds; `STACKSCAN_FUZZ_CASES=N` runs `N` cases per macro and
//! `STACKSCAN_FUZZ_SEED=S` draws other ones. A failure prints the input's tokens; inputs that
//! once failed are kept in [`REGRESSIONS`].

mod generate;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use proc_macro2::TokenStream;
use quote::quote;

use self::generate::Gen;
use crate::stack::layer_stack;
use crate::sublayer::derive;

const DEFAULT_CASES: u64 = 2_000;
const DEFAULT_SEED: u64 = 0x57AC_5CA2;
/// Kinds of failure shown with their first case; further kinds are only counted.
const SHOWN_FAILURES: usize = 5;

/// Valid `#[layer_stack(...)]` arguments (from the expansion and ui tests).
const STACK_ARGS: &[&str] = &[
    "block = [GatedMlp, GatedMlp, GatedMlp, SineResidual], layers = 12, prefetch_fsdp_weights, defer_grad_reduce_scatter,",
    "prefix = [Dense, Dense, Dense], block = [Moe], layers = LAYERS, prefetch_fsdp_weights = true, unroll = UNROLL,",
    "block = [Mlp, stackscan_ui_tests::Mlp, Mlp<Tensor>], repeat = 1 << 1, prefetch_fsdp_weights",
    "prefix = [Mlp, Mlp, Mlp], block = [Attn], layers = LAYERS, defer_grad_reduce_scatter, prefetch_fsdp_weights = true, unroll = UNROLL",
    "block = [Mlp], repeat = LAYERS - 1, unroll = 1",
    "block = [Values], layers = LAYERS, prefetch_fsdp_weights",
    "block = [A, B], repeat = 2, unroll = 2, defer_grad_reduce_scatter = false",
    "prefix = [D], block = [A, A, A, B], layers = 9",
];

/// Items `#[layer_stack]` may be put on: valid ones first, then mistakes.
const STACK_ITEMS: &[&str] = &[
    "pub struct Toy;",
    "struct Model;",
    "#[derive(Clone)] pub(crate) struct Deep {}",
    "struct Unit();",
    "struct W where u8: Copy;",
    "struct G<T>(T);",
    "struct L<'a> { x: &'a u8 }",
    "enum E {}",
    "fn f() {}",
    "impl A for B {}",
    "type X = u8;",
    "union U { a: u8 }",
    "const C: u8 = 0;",
    "mod m;",
    "macro_rules! m { () => {} }",
];
const VALID_STACK_ITEMS: usize = 5;

/// Valid sub-layer declarations (from the expansion and ui tests).
const SUBLAYERS: &[&str] = &[
    r#"#[sublayer(config = ToyConfig, carry = Hidden, name = "A")]
    pub struct GatedMlp<T> {
        #[param(shape = [cfg.d, cfg.f], shard = 0)]
        pub w1: T,
        #[param(shape = [cfg.f, cfg.d], shard = 1, init = normal(0.01))]
        pub w2: T,
        #[param(shape = [cfg.d], replicated)]
        pub gain: T,
        #[param(shape = [cfg.d], replicated, init = zeros, dtype = bf16, name = "b")]
        pub bias: T,
    }"#,
    r#"#[sublayer(config = Config, carry = Residual, name = "decoder")]
    struct Decoder<T> {
        #[param(shape = [cfg.d], replicated)]
        norm: T,
        #[param(shape = [cfg.d, 4 * cfg.d], shard = 1, dtype = bf16, name = "w_up")]
        up: T,
        #[param(shape = [4 * cfg.d, cfg.d], shard = 0, init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt()))]
        down: T,
        #[param(shape = [cfg.d], replicated, init = zeros)]
        bias: T,
    }"#,
    "#[sublayer(config = Sizes<f32, 4>, carry = Hidden)]
    struct S<T> {
        #[param(shape = [cfg.d], shard = 0)]
        w: T,
    }",
    "/// The square weight.
    #[sublayer(carry = crate::Hidden, config = self::Cfg,)]
    pub struct Values<V> {
        /// Doc.
        #[param(shape = [], replicated = true, init = ones, dtype = f64)]
        values: V,
    }",
];

/// Valid `#[sublayer(...)]` and `#[param(...)]` arguments, for the structs composed here.
const SUBLAYER_ARGS: &[&str] = &[
    r#"config = ToyConfig, carry = Hidden, name = "A""#,
    "config = Sizes<f32, 4>, carry = Hidden",
    "carry = H, config = C,",
];
const PARAM_ARGS: &[&str] = &[
    "shape = [cfg.d, cfg.f], shard = 0",
    "shape = [cfg.f, cfg.d], shard = 1, init = normal(0.01)",
    "shape = [cfg.d], replicated",
    r#"shape = [cfg.d], replicated, init = zeros, dtype = bf16, name = "b""#,
    "shape = [4 * cfg.d, cfg.d], shard = 0, init = normal(0.02 / (2.0 * cfg.layers as f64).sqrt())",
    "shape = [], replicated = true, init = ones, dtype = f64",
];
const GENERICS: &[&str] = &[
    "<T>",
    "<T>",
    "<T>",
    "",
    "<T, U>",
    "<'a, T>",
    "<T: Clone>",
    "<T = f32>",
    "<const N: usize, T>",
];
const FIELD_NAMES: &[&str] = &["w", "w1", "gain", "r#type", "cfg", "values", "w", "_"];
const FIELD_TYPES: &[&str] = &["T", "T", "T", "U", "Vec<T>", "&'a T", "Tensor"];
const STACK_KEYS: &[&str] = &[
    "block",
    "prefix",
    "repeat",
    "layers",
    "prefetch_fsdp_weights",
    "defer_grad_reduce_scatter",
    "unroll",
    "prefech_fsdp_weights",
];
const STRUCT_KEYS: &[&str] = &["config", "carry", "name", "colour"];
const PARAM_KEYS: &[&str] = &[
    "shape",
    "shard",
    "replicated",
    "init",
    "dtype",
    "name",
    "frozen",
];

/// Inputs that once made a macro fail, as (`layer_stack` arguments or `None` for the derive,
/// item).
const REGRESSIONS: &[(Option<&str>, &str)] = &[
    // A path ending in a keyword segment got `<Tensor>` appended: `super<Tensor>` is no type.
    (Some("block = [super], repeat = 1"), "struct Model;"),
    (
        Some("prefix = [self], block = [stackscan_ui_tests::super, crate], layers = 3"),
        "struct Model;",
    ),
    // A trailing `+` of a trait object: `<Values + as SubLayer>` does not parse.
    (
        Some("block = [Values +, dyn A +, impl B + 'static +], repeat = 1"),
        "struct Model;",
    ),
    // `try` is read like `super`: `a::try<Tensor>` does not parse.
    (
        Some("block = [a::try, Self, r#gen], repeat = 1"),
        "struct Model;",
    ),
    // A field named `_` (which syn reads) was expanded as `self._`.
    (
        None,
        "#[sublayer(config = C, carry = H)] struct S<T> { #[param(shape = [1], shard = 0)] _: T }",
    ),
];

fn tokens(s: &str) -> TokenStream {
    s.parse()
        .unwrap_or_else(|e| panic!("`{s}` does not lex: {e}"))
}

/// Calls a macro function as its entry point does: a panic, or output that does not parse as
/// items, is an `Err` describing it.
fn run(expand: impl FnOnce() -> syn::Result<TokenStream>) -> Result<TokenStream, String> {
    let result = catch_unwind(AssertUnwindSafe(expand)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        format!("panicked: {message}")
    })?;
    let out = result.unwrap_or_else(syn::Error::into_compile_error);
    match syn::parse2::<syn::File>(out.clone()) {
        Ok(_) => Ok(out),
        Err(e) => Err(format!("the output does not parse as items ({e}):\n{out}")),
    }
}

/// One case: the input as text (for the failure message) and the outcome.
type Outcome = (String, Result<TokenStream, String>);

fn run_stack(attr: TokenStream, item: TokenStream) -> Outcome {
    let text = format!("#[layer_stack({attr})] {item}");
    (text, run(|| layer_stack(attr, item)))
}

fn run_derive(item: TokenStream) -> Outcome {
    let text = format!("#[derive(SubLayer)] {item}");
    (text, run(|| derive(item)))
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    let parsed = match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => value.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={value}: {e}")))
}

/// Runs the configured number of cases of `case`, each on its own seed, and fails showing the
/// first case of each kind of failure (its seed and input) and how many cases failed.
fn fuzz(macro_name: &str, mut case: impl FnMut(&mut Gen) -> Outcome) {
    let cases = env_u64("STACKSCAN_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    let base = env_u64("STACKSCAN_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let mut seeds = generate::Rng::new(base);
    let mut g = Gen::new();
    // The first line of a failure (the panic message, or the parse error) names its kind.
    let mut kinds: Vec<(String, u64, String)> = Vec::new();
    let (mut failed, mut clean) = (0u64, 0u64);
    let start = Instant::now();
    for i in 0..cases {
        let seed = seeds.next_u64();
        g.reseed(seed);
        let (input, outcome) = case(&mut g);
        let why = match outcome {
            Ok(out) => {
                // How deep the cases reach: these passed every check of the macro.
                clean += u64::from(!out.to_string().contains("compile_error"));
                continue;
            }
            Err(why) => why,
        };
        failed += 1;
        let kind = why.lines().next().unwrap_or_default().to_owned();
        if let Some((_, count, _)) = kinds.iter_mut().find(|(k, ..)| *k == kind) {
            *count += 1;
        } else if kinds.len() < SHOWN_FAILURES {
            let first = format!("case {i} (seed {seed:#x}): {why}\ninput: {input}");
            kinds.push((kind, 1, first));
        }
    }
    eprintln!(
        "{macro_name}: {cases} cases from seed {base:#x} in {:.1?}, {clean} without errors",
        start.elapsed()
    );
    let shown: Vec<String> = kinds
        .iter()
        .map(|(_, count, first)| format!("{count} case(s), the first: {first}"))
        .collect();
    assert!(
        failed == 0,
        "{macro_name}: {failed} of {cases} cases failed:\n\n{}",
        shown.join("\n\n")
    );
}

/// Mostly a valid item, so the arguments decide the outcome.
fn stack_item(g: &mut Gen) -> TokenStream {
    if g.rng.below(3) > 0 {
        return tokens(g.rng.pick(&STACK_ITEMS[..VALID_STACK_ITEMS]));
    }
    let item = tokens(g.rng.pick(STACK_ITEMS));
    if g.rng.one_in(2) {
        g.mutate(item)
    } else {
        item
    }
}

#[test]
fn layer_stack_never_panics_and_always_emits_items() {
    fuzz("layer_stack", |g| {
        let valid = tokens(g.rng.pick(STACK_ARGS));
        let keys = STACK_KEYS;
        let attr = match g.rng.below(7) {
            0..=2 => g.mutate(valid),
            3 => g.random_args(keys),
            4 => {
                let args = g.random_args(keys);
                g.mutate(args)
            }
            5 => g.random_stream(3).into_iter().collect(),
            _ => valid,
        };
        run_stack(attr, stack_item(g))
    });
}

/// `#[name(args)]`, and sometimes a malformed form of the attribute.
fn attribute(g: &mut Gen, name: &str, args: TokenStream) -> TokenStream {
    let name = proc_macro2::Ident::new(name, proc_macro2::Span::call_site());
    match g.rng.below(12) {
        0 => quote!(#[#name]),
        1 => quote!(#[#name = #args]),
        2 => quote!(#[#name[#args]]),
        _ => quote!(#[#name(#args)]),
    }
}

/// Valid arguments, a mutation of them, or random ones.
fn arguments(g: &mut Gen, valid: &[&str], keys: &[&str]) -> TokenStream {
    let valid = tokens(g.rng.pick(valid));
    match g.rng.below(5) {
        0 | 1 => valid,
        2 | 3 => g.mutate(valid),
        _ => g.random_args(keys),
    }
}

/// A struct (mostly) assembled from attributes, generics and fields that are each valid,
/// mutated or random: the mistakes of a whole declaration, several at once.
fn sublayer_item(g: &mut Gen) -> TokenStream {
    let mut attrs = TokenStream::new();
    for _ in 0..g.rng.pick(&[0, 1, 1, 1, 1, 2]) {
        let args = arguments(g, SUBLAYER_ARGS, STRUCT_KEYS);
        attrs.extend(attribute(g, "sublayer", args));
    }
    if g.rng.one_in(4) {
        attrs.extend(quote!(#[doc = " A sub-layer."]));
    }
    let generics = tokens(g.rng.pick(GENERICS));
    let where_clause = if g.rng.one_in(10) {
        quote!(where T: Clone)
    } else {
        TokenStream::new()
    };
    let mut fields = TokenStream::new();
    for _ in 0..g.rng.pick(&[0, 1, 1, 2, 2, 3, 4]) {
        for _ in 0..g.rng.pick(&[0, 1, 1, 1, 1, 1, 2]) {
            let args = arguments(g, PARAM_ARGS, PARAM_KEYS);
            fields.extend(attribute(g, "param", args));
        }
        let name = tokens(g.rng.pick(FIELD_NAMES));
        let ty = tokens(g.rng.pick(FIELD_TYPES));
        fields.extend(quote!(#name: #ty,));
    }
    match g.rng.below(12) {
        0 => quote!(#attrs enum S #generics #where_clause { A(T), B { #fields } }),
        1 => quote!(#attrs struct S #generics (T, pub T) #where_clause;),
        2 => quote!(#attrs struct S #generics #where_clause;),
        3 => quote!(#attrs union S #generics #where_clause { #fields }),
        _ => quote!(#attrs pub struct S #generics #where_clause { #fields }),
    }
}

/// A valid struct of one to four parameters but for one mutated attribute: deep in the
/// checks and, when the mutation is harmless, through the expansion.
fn one_fault_sublayer(g: &mut Gen) -> TokenStream {
    let len = 1 + g.rng.below(4);
    let fault = g.rng.below(len + 1);
    let args = |g: &mut Gen, at: usize, valid: &[&str]| {
        let valid = tokens(g.rng.pick(valid));
        if at == fault { g.mutate(valid) } else { valid }
    };
    let struct_args = args(g, len, SUBLAYER_ARGS);
    let fields = (0..len).map(|i| {
        let param = args(g, i, PARAM_ARGS);
        let name = quote::format_ident!("w{i}");
        quote!(#[param(#param)] #name: T,)
    });
    let fields: TokenStream = fields.collect();
    quote!(#[sublayer(#struct_args)] struct S<T> { #fields })
}

#[test]
fn sublayer_derive_never_panics_and_always_emits_items() {
    fuzz("SubLayer", |g| {
        let item = match g.rng.below(8) {
            0 | 1 => {
                let valid = tokens(g.rng.pick(SUBLAYERS));
                g.mutate(valid)
            }
            2 | 3 => one_fault_sublayer(g),
            4 | 5 => sublayer_item(g),
            6 => {
                let item = sublayer_item(g);
                g.mutate(item)
            }
            _ => {
                let struct_args: TokenStream = g.random_stream(3).into_iter().collect();
                let param_args: TokenStream = g.random_stream(3).into_iter().collect();
                quote!(
                    #[sublayer(#struct_args)]
                    struct S<T> {
                        #[param(#param_args)]
                        w: T,
                    }
                )
            }
        };
        run_derive(item)
    });
}

/// The corpus the mutations start from is valid: each input expands without errors.
#[test]
fn the_valid_corpus_expands_without_errors() {
    let no_errors = |(input, outcome): Outcome| match outcome {
        Ok(out) => assert!(
            !out.to_string().contains("compile_error"),
            "errors for {input}:\n{out}"
        ),
        Err(why) => panic!("{why}\ninput: {input}"),
    };
    for attr in STACK_ARGS {
        for item in &STACK_ITEMS[..VALID_STACK_ITEMS] {
            no_errors(run_stack(tokens(attr), tokens(item)));
        }
    }
    for item in SUBLAYERS {
        no_errors(run_derive(tokens(item)));
    }
    for args in SUBLAYER_ARGS {
        for param in PARAM_ARGS {
            let (args, param) = (tokens(args), tokens(param));
            no_errors(run_derive(quote!(
                #[sublayer(#args)]
                struct S<T> {
                    #[param(#param)]
                    w: T,
                }
            )));
        }
    }
}

#[test]
fn inputs_that_once_failed_do_not_fail() {
    for (attr, item) in REGRESSIONS {
        let (input, outcome) = match attr {
            Some(attr) => run_stack(tokens(attr), tokens(item)),
            None => run_derive(tokens(item)),
        };
        if let Err(why) = outcome {
            panic!("{why}\ninput: {input}");
        }
    }
}
