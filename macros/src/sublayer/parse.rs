//! `#[derive(SubLayer)]` input → a model that keeps the user's syntax nodes for spans.
//!
//! Parsing records what is written and reports only what cannot be read (an enum, an unknown
//! or repeated key, a malformed value); rules over the whole declaration live in `check`.

use proc_macro2::Span;
use syn::punctuated::Punctuated;
use syn::{Data, DeriveInput, Expr, Fields, GenericParam, Ident, LitInt, LitStr, Token, Type};

use crate::args::{self, Arg};
use crate::errors::Errors;

pub(crate) use super::field_attrs::{ModuleAttr, StackAttr};
use super::field_attrs::{module_attr, stack_attr};
pub(crate) use super::kind::Derive;

/// Keys of the struct-level `#[sublayer(...)]`.
pub(crate) const STRUCT_KEYS: &[&str] = &["config", "carry", "name", "crate"];
/// Keys of the struct-level `#[module(...)]` of `#[derive(Module)]`.
pub(crate) const MODULE_KEYS: &[&str] = &["config", "crate"];
/// Keys of a sub-module field's `#[module(...)]`.
pub(crate) const FIELD_MODULE_KEYS: &[&str] = &["config"];
/// Keys of the struct-level `#[model(...)]` of `#[derive(Model)]`.
pub(crate) const MODEL_KEYS: &[&str] = &["config", "inputs", "crate"];
/// Keys of the struct-level `#[inputs(...)]` of `#[derive(Inputs)]`.
pub(crate) const INPUTS_KEYS: &[&str] = &["config", "crate"];
/// Keys of an input field's `#[input(...)]`.
pub(crate) const INPUT_KEYS: &[&str] = &["shape", "dtype", "values", "name"];
/// Element types an input may have.
pub(crate) const INPUT_DTYPES: &[&str] = &["i32", "i64", "f32", "bf16", "f64"];

/// Keys of a field's `#[param(...)]`.
pub(crate) const PARAM_KEYS: &[&str] = &["shape", "shard", "replicated", "init", "dtype", "name"];
/// Initialisers.
pub(crate) const INITS: &[&str] = &["normal(<std>)", "ones", "zeros"];
/// Element types a parameter may have (parameters are differentiated).
pub(crate) const DTYPES: &[&str] = &["f32", "bf16", "f64"];

/// The derive input.
pub(crate) struct Input {
    pub(crate) derive: Derive,
    pub(crate) ident: Ident,
    /// The one type parameter: the value type of the parameters.
    pub(crate) value_ty: Option<Ident>,
    /// The generics as written, extra parameters and bounds included: a stub for an invalid
    /// declaration must name the struct with all of them.
    pub(crate) generics: syn::Generics,
    pub(crate) config: Option<Type>,
    pub(crate) carry: Option<Type>,
    /// `inputs = Type` of a model: its `#[derive(Inputs)]` struct, named without `<T>`.
    pub(crate) inputs: Option<Type>,
    pub(crate) name: Option<LitStr>,
    /// `crate = "path"`: how generated code reaches the DSL.
    pub(crate) krate: Option<syn::Path>,
    /// Whether the struct-level `#[sublayer(...)]` (`#[module(...)]`) was written at all.
    pub(crate) has_sublayer_attr: bool,
    /// Whether reading `#[sublayer(...)]` failed somewhere (then a missing key is not
    /// reported: it is likely the misspelt one).
    pub(crate) sublayer_attr_malformed: bool,
    /// `None` for an enum, union or a struct without named fields.
    pub(crate) fields: Option<Vec<Field>>,
}

/// One field: a parameter or a sub-module.
pub(crate) struct Field {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
    /// The field's `#[module]` or `#[module(config = <expr>)]`, if it is a sub-module.
    pub(crate) module: Option<ModuleAttr>,
    /// The field's `#[stack(...)]` (a model's stack field).
    pub(crate) stack: Option<StackAttr>,
    /// The `input` of the field's `#[input(...)]` (an input of an inputs struct).
    pub(crate) input: Option<syn::Path>,
    /// `values = <range>` of an input.
    pub(crate) values: Option<Expr>,
    /// The `param` of the field's `#[param(...)]`, `None` if it has none.
    pub(crate) attr: Option<syn::Path>,
    pub(crate) name: Option<LitStr>,
    pub(crate) shape: Option<Shape>,
    pub(crate) shard: Option<LitInt>,
    pub(crate) replicated: Option<Ident>,
    pub(crate) init: Option<InitSpec>,
    pub(crate) dtype: Option<Ident>,
    /// Whether reading `#[param(...)]` failed somewhere (then a missing key is not reported).
    pub(crate) malformed: bool,
}

/// `shape = [d0, d1, …]`: dimensions as expressions over the config.
pub(crate) struct Shape {
    pub(crate) dims: Vec<Expr>,
}

/// `init = …` as written.
pub(crate) enum InitSpec {
    Normal(Expr),
    Ones,
    Zeros,
}

pub(crate) fn parse(input: &DeriveInput, derive: Derive, errors: &mut Errors) -> Input {
    let mut out = Input {
        derive,
        ident: input.ident.clone(),
        value_ty: value_type(input, derive, errors),
        generics: input.generics.clone(),
        config: None,
        carry: None,
        inputs: None,
        name: None,
        krate: None,
        has_sublayer_attr: false,
        sublayer_attr_malformed: false,
        fields: None,
    };
    let struct_attr = struct_attr(derive);
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("param")) {
        errors.error_spanned_by(
            attr.path(),
            format!("`#[param(...)]` goes on a field (one per parameter), not on the struct; the struct takes {struct_attr}"),
        );
    }
    if derive == Derive::SubLayer {
        for attr in input.attrs.iter().filter(|a| a.path().is_ident("module")) {
            errors.error_spanned_by(
                attr.path(),
                "`#[module]` goes on a sub-module field, not on a sub-layer; the struct takes `#[sublayer(config = <type>, carry = <type>)]`",
            );
        }
    }
    let (keys, attr_name) = match derive {
        Derive::SubLayer => (STRUCT_KEYS, "sublayer"),
        Derive::Module => (MODULE_KEYS, "module"),
        Derive::Model => (MODEL_KEYS, "model"),
        Derive::Inputs => (INPUTS_KEYS, "inputs"),
    };
    let before = errors.len();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident(attr_name)) {
        out.has_sublayer_attr = true;
        let Some(tokens) = list_tokens(attr, errors) else {
            continue;
        };
        for arg in args::split(tokens, errors) {
            match arg.key.to_string().as_str() {
                "config" => set(&mut out.config, &arg, "a type", errors, Arg::parse),
                "carry" if derive == Derive::SubLayer => {
                    set(&mut out.carry, &arg, "a type", errors, Arg::parse);
                }
                "name" if derive == Derive::SubLayer => {
                    set(&mut out.name, &arg, "\"kind name\"", errors, Arg::parse);
                }
                "inputs" if derive == Derive::Model => {
                    set(&mut out.inputs, &arg, "a type", errors, Arg::parse);
                }
                "crate" => set(&mut out.krate, &arg, "", errors, |a, _, e| {
                    crate::crate_path(a, e)
                }),
                "carry" | "name" if derive == Derive::Module => errors.error_spanned_by(
                    &arg.key,
                    format!(
                        "a module has no `{}`: it is a part of a layer, not a kind of a stack; use `#[derive(SubLayer)]` for a layer",
                        arg.key
                    ),
                ),
                other => errors.error_spanned_by(
                    &arg.key,
                    format!(
                        "unknown {attr_name} option `{other}`; expected {}",
                        args::one_of(keys)
                    ),
                ),
            }
        }
    }
    out.sublayer_attr_malformed = errors.len() > before;
    match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => {
                out.fields = Some(
                    named
                        .named
                        .iter()
                        .map(|f| field(f, errors))
                        .collect(),
                );
            }
            Fields::Unnamed(unnamed) => errors.error_at(
                unnamed.paren_token.span.join(),
                format!("`#[derive({})]` needs named fields, one per parameter or sub-module; tuple structs are not supported", derive.name()),
            ),
            Fields::Unit => errors.error_spanned_by(
                &input.ident,
                format!("`#[derive({})]` needs named fields, one per parameter or sub-module; a unit struct has none", derive.name()),
            ),
        },
        Data::Enum(e) => errors.error_spanned_by(
            e.enum_token,
            format!("`#[derive({})]` goes on a struct with one named field per parameter, not on an enum", derive.name()),
        ),
        Data::Union(u) => errors.error_spanned_by(
            u.union_token,
            format!("`#[derive({})]` goes on a struct with one named field per parameter, not on a union", derive.name()),
        ),
    }
    out
}

/// The struct-level attribute of `derive`, as a message shows it.
pub(crate) fn struct_attr(derive: Derive) -> &'static str {
    match derive {
        Derive::SubLayer => "`#[sublayer(config = <type>, carry = <type>)]`",
        Derive::Module => "`#[module(config = <type>)]`",
        Derive::Model => "`#[model(config = <type>, inputs = <type>)]`",
        Derive::Inputs => "`#[inputs(config = <type>)]`",
    }
}

/// The one type parameter, without bounds.
fn value_type(input: &DeriveInput, derive: Derive, errors: &mut Errors) -> Option<Ident> {
    let g = &input.generics;
    let what = derive.what();
    let hint = format!(
        "a {what} has exactly one type parameter, the value type of its parameters (`struct Mlp<T> {{ w: T }}`)"
    );
    if g.params.is_empty() {
        errors.error_spanned_by(&input.ident, format!("missing type parameter: {hint}"));
        return None;
    }
    let mut value_ty = None;
    for p in &g.params {
        match p {
            GenericParam::Type(t) if value_ty.is_none() => {
                if !t.bounds.is_empty() {
                    errors.error_spanned_by(
                        &t.bounds,
                        format!("the value type parameter of a {what} takes no bounds"),
                    );
                }
                value_ty = Some(t.ident.clone());
            }
            GenericParam::Lifetime(l) => errors.error_spanned_by(
                l,
                format!("lifetime parameters are not supported: {hint}, and no lifetime or const parameters"),
            ),
            GenericParam::Const(c) => errors.error_spanned_by(
                c,
                format!("const parameters are not supported: {hint}, and no lifetime or const parameters"),
            ),
            // A model may be generic over its stack (`Llama<T, S>`).
            GenericParam::Type(_) if derive == Derive::Model => {}
            GenericParam::Type(t) => errors.error_spanned_by(
                t,
                format!("a second type parameter is not supported: {hint}"),
            ),
        }
    }
    if let Some(w) = g.where_clause.as_ref().filter(|_| derive != Derive::Model) {
        errors.error_spanned_by(w, format!("a {what} takes no `where` clause"));
    }
    value_ty
}

fn field(f: &syn::Field, errors: &mut Errors) -> Field {
    let mut out = Field {
        module: None,
        stack: None,
        input: None,
        values: None,
        // Named fields always have an ident; the span fallback only keeps this total.
        ident: f
            .ident
            .clone()
            .unwrap_or_else(|| Ident::new("field", Span::call_site())),
        ty: f.ty.clone(),
        attr: None,
        name: None,
        shape: None,
        shard: None,
        replicated: None,
        init: None,
        dtype: None,
        malformed: false,
    };
    for attr in f.attrs.iter().filter(|a| a.path().is_ident("sublayer")) {
        errors.error_spanned_by(
            attr.path(),
            "`#[sublayer(...)]` goes on the struct, not on a field; a field takes `#[param(shape = [...], shard = <dim>)]` or `#[module]`",
        );
    }
    let before = errors.len();
    let ident = out.ident.clone();
    once(f, "module", &ident, errors, |attr, errors| {
        out.module = Some(module_attr(attr, errors));
    });
    once(f, "stack", &ident, errors, |attr, errors| {
        out.stack = Some(stack_attr(attr, errors));
    });
    once(f, "input", &ident, errors, |attr, errors| {
        out.input = Some(attr.path().clone());
        for arg in list_tokens(attr, errors)
            .map(|t| args::split(t, errors))
            .into_iter()
            .flatten()
        {
            if tensor_key(&mut out, &arg, "i32", errors) {
                continue;
            }
            match arg.key.to_string().as_str() {
                "values" => set(&mut out.values, &arg, "<start>..<end>", errors, Arg::parse),
                other => errors.error_spanned_by(
                    &arg.key,
                    format!(
                        "unknown input option `{other}`; expected {}",
                        args::one_of(INPUT_KEYS)
                    ),
                ),
            }
        }
    });
    once(f, "param", &ident, errors, |attr, errors| {
        out.attr = Some(attr.path().clone());
        for arg in list_tokens(attr, errors)
            .map(|t| args::split(t, errors))
            .into_iter()
            .flatten()
        {
            if tensor_key(&mut out, &arg, "f32", errors) {
                continue;
            }
            match arg.key.to_string().as_str() {
                "shard" => set(&mut out.shard, &arg, "<dimension>", errors, Arg::parse),
                "replicated" => {
                    let flag = arg.flag(errors);
                    let key = arg.key.clone();
                    set(&mut out.replicated, &arg, "", errors, |_, _, _| {
                        flag.and_then(|on| on.then_some(key))
                    });
                }
                "init" => {
                    let init = init(&arg, errors);
                    set(&mut out.init, &arg, "", errors, |_, _, _| init);
                }
                "frozen" | "trainable" | "no_grad" => errors.error_spanned_by(
                    &arg.key,
                    format!(
                        "`{}` is not supported: every parameter of a sub-layer is trained",
                        arg.key
                    ),
                ),
                other => errors.error_spanned_by(
                    &arg.key,
                    format!(
                        "unknown param option `{other}`; expected {}",
                        args::one_of(PARAM_KEYS)
                    ),
                ),
            }
        }
    });
    out.malformed = errors.len() > before;
    out
}

/// Reads the field's first `#[name]` attribute with `read`, then reports each further one as
/// a duplicate (in source order, after the first's own errors).
fn once(
    f: &syn::Field,
    name: &str,
    field: &Ident,
    errors: &mut Errors,
    mut read: impl FnMut(&syn::Attribute, &mut Errors),
) {
    for (i, attr) in f
        .attrs
        .iter()
        .filter(|a| a.path().is_ident(name))
        .enumerate()
    {
        if i == 0 {
            read(attr, errors);
        } else {
            errors.error_spanned_by(
                attr.path(),
                format!("duplicate `#[{name}]` on `{field}`; merge them into one"),
            );
        }
    }
}

/// The keys a parameter and an input share (`shape`, `dtype`, `name`): read into `out`, and
/// `true`; any other key is the caller's.
fn tensor_key(out: &mut Field, arg: &Arg, dtype: &str, errors: &mut Errors) -> bool {
    match arg.key.to_string().as_str() {
        "shape" => {
            let shape = shape(arg, errors);
            set(&mut out.shape, arg, "", errors, |_, _, _| shape);
        }
        "dtype" => set(&mut out.dtype, arg, dtype, errors, Arg::parse),
        "name" => set(&mut out.name, arg, "\"name\"", errors, Arg::parse),
        _ => return false,
    }
    true
}

/// Stores the value of `arg` in `slot`, reporting a repeated key at its second occurrence.
pub(super) fn set<T>(
    slot: &mut Option<T>,
    arg: &Arg,
    what: &str,
    errors: &mut Errors,
    parse: impl FnOnce(&Arg, &str, &mut Errors) -> Option<T>,
) {
    let value = parse(arg, what, errors);
    if slot.is_some() {
        errors.error_spanned_by(&arg.key, format!("duplicate option `{}`", arg.key));
    } else {
        *slot = value;
    }
}

/// The tokens inside `#[attr(...)]`.
fn list_tokens(attr: &syn::Attribute, errors: &mut Errors) -> Option<proc_macro2::TokenStream> {
    match &attr.meta {
        syn::Meta::List(list) => Some(list.tokens.clone()),
        other => {
            let name = attr
                .path()
                .get_ident()
                .map(Ident::to_string)
                .unwrap_or_default();
            errors.error_spanned_by(other, format!("expected `#[{name}(...)]`"));
            None
        }
    }
}

fn shape(arg: &Arg, errors: &mut Errors) -> Option<Shape> {
    let (_, tokens) = args::bracketed(arg, "<dim>, ...", errors)?;
    if let Some(semi) = args::top_level_semicolon(&tokens) {
        errors.error_at(
            semi,
            "`shape = [dim; n]` is not supported; write each dimension (`shape = [cfg.d, cfg.d]`)",
        );
        return None;
    }
    let parser = Punctuated::<Expr, Token![,]>::parse_terminated;
    match syn::parse::Parser::parse2(parser, tokens) {
        Ok(dims) => {
            let dims: Vec<Expr> = dims.into_iter().collect();
            for dim in &dims {
                check_literal_dim(dim, errors);
            }
            Some(Shape { dims })
        }
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

/// Rejects a literal dimension that cannot be a size: `0` or a negated literal. Expressions
/// are checked when the model is built; a literal is wrong whatever the config.
fn check_literal_dim(dim: &Expr, errors: &mut Errors) {
    let int = |e: &Expr| match e {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(lit),
            ..
        }) => Some(lit.base10_parse::<u64>().is_ok_and(|v| v == 0)),
        _ => None,
    };
    match dim {
        Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            expr,
            ..
        }) if int(expr).is_some() => errors.error_spanned_by(
            dim,
            "a dimension is a positive size; a negative literal is never one",
        ),
        _ if int(dim) == Some(true) => errors.error_spanned_by(
            dim,
            "a dimension of size 0 makes an empty parameter; dimensions are positive",
        ),
        _ => {}
    }
}

fn init(arg: &Arg, errors: &mut Errors) -> Option<InitSpec> {
    let expected = args::one_of(INITS);
    let expr: Expr = arg.parse(&expected, errors)?;
    let unknown = |errors: &mut Errors, what: &Expr| {
        let name = match what {
            Expr::Path(p) => p.path.get_ident().map(|i| format!(" `{i}`")),
            _ => None,
        };
        errors.error_spanned_by(
            what,
            format!(
                "unknown initializer{}; expected {expected}",
                name.unwrap_or_default()
            ),
        );
    };
    match &expr {
        Expr::Path(p) if p.path.is_ident("ones") => Some(InitSpec::Ones),
        Expr::Path(p) if p.path.is_ident("zeros") => Some(InitSpec::Zeros),
        Expr::Path(p) if p.path.is_ident("normal") => {
            errors.error_spanned_by(
                p,
                "`normal` needs the standard deviation: write `init = normal(0.02)`",
            );
            None
        }
        Expr::Call(call) => match &*call.func {
            Expr::Path(p) if p.path.is_ident("ones") || p.path.is_ident("zeros") => {
                let name = p.path.get_ident().map(Ident::to_string).unwrap_or_default();
                errors.error_at(
                    call.paren_token.span.join(),
                    format!("`{name}` takes no arguments: write `init = {name}`"),
                );
                None
            }
            Expr::Path(p) if p.path.is_ident("normal") => {
                if call.args.len() == 1 {
                    call.args.first().cloned().map(InitSpec::Normal)
                } else {
                    errors.error_at(
                        call.paren_token.span.join(),
                        "`normal` takes one argument, the standard deviation: `normal(0.02)`",
                    );
                    None
                }
            }
            other => {
                unknown(errors, other);
                None
            }
        },
        other => {
            unknown(errors, other);
            None
        }
    }
}
