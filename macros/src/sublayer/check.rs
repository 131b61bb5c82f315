//! Rules over a whole sub-layer declaration; a declaration that passes becomes a [`Model`],
//! the only thing `expand` reads.

use std::collections::HashMap;

use syn::ext::IdentExt;
use syn::{Expr, Ident, Type};

use super::parse::{self, Derive, InitSpec, Input};
use crate::args;
use crate::errors::Errors;

/// A validated sub-layer or module.
pub(crate) struct Model {
    pub(crate) derive: Derive,
    pub(crate) ident: Ident,
    pub(crate) value_ty: Ident,
    pub(crate) config: Type,
    /// `Some` exactly for a sub-layer.
    pub(crate) carry: Option<Type>,
    pub(crate) name: String,
    pub(crate) members: Vec<Member>,
    /// A model's `inputs = Type`, a path (`Batch` or `Batch<T>`).
    pub(crate) inputs: Option<syn::TypePath>,
    /// The generics as written (a model may be generic over its stack).
    pub(crate) generics: syn::Generics,
}

/// A validated field, in declaration order.
pub(crate) enum Member {
    Param(Param),
    Module(SubModule),
    /// A model's stack field.
    Stack(StackMember),
    /// A field of an inputs struct.
    Input(InputMember),
}

/// A validated `#[stack]` field.
pub(crate) struct StackMember {
    pub(crate) field: Ident,
    /// `Layers<S>` as written.
    pub(crate) ty: Type,
}

/// A validated `#[input(...)]` field.
pub(crate) struct InputMember {
    pub(crate) field: Ident,
    pub(crate) name: String,
    pub(crate) dims: Vec<Expr>,
    /// A variant of `DType`.
    pub(crate) dtype: &'static str,
    pub(crate) values: Option<Expr>,
}

/// A validated sub-module field.
pub(crate) struct SubModule {
    pub(crate) field: Ident,
    /// The name its parameters are nested under (the field's, unraw).
    pub(crate) name: String,
    /// The field's type as written, over the value type (`Attention<T>`).
    pub(crate) ty: Type,
    /// `config = <expr>`: its config from the enclosing `cfg`; `None`: `cfg` itself.
    pub(crate) config: Option<Expr>,
}

/// A validated parameter.
pub(crate) struct Param {
    pub(crate) field: Ident,
    pub(crate) name: String,
    pub(crate) dims: Vec<Expr>,
    /// `None`: replicated.
    pub(crate) shard: Option<usize>,
    pub(crate) init: Init,
    /// A variant of `DType`.
    pub(crate) dtype: &'static str,
}

/// An initialiser with the default resolved.
pub(crate) enum Init {
    Normal(Expr),
    /// `normal(0.02)`, the default of a sharded parameter.
    NormalDefault,
    Ones,
    Zeros,
}

/// What a stub impl needs when the declaration is invalid: enough for uses of the type to
/// type-check, so one mistake does not cascade through every block naming it.
pub(crate) struct Stub {
    pub(crate) derive: Derive,
    pub(crate) ident: Ident,
    /// `None`: the struct has no type parameter; the stub holds `Tensor`s.
    pub(crate) value_ty: Option<Ident>,
    /// The struct's generics as written (bounds, `where` clause, extra parameters).
    pub(crate) generics: syn::Generics,
    /// `None`: missing; the stub names a placeholder type.
    pub(crate) config: Option<Type>,
    /// `None`: missing; the stub names a placeholder marker.
    pub(crate) carry: Option<Type>,
    pub(crate) fields: Vec<Ident>,
    /// A model's first `#[stack]` field's type (`Layers<S>`), if it has one.
    pub(crate) stack: Option<Type>,
    /// A model's `inputs = Type`, if written and a path.
    pub(crate) inputs: Option<syn::TypePath>,
}

/// The outcome of [`check`].
pub(crate) enum Checked {
    Valid(Model),
    /// Errors were recorded; the stub's bodies read no fields, so an enum, a tuple struct or a
    /// struct without its type parameter gets one too.
    Invalid(Stub),
}

pub(crate) fn check(input: Input, errors: &mut Errors) -> Checked {
    let derive = input.derive;
    let (attr, what) = (derive.attr(), derive.what());
    if !input.has_sublayer_attr {
        let expected = parse::struct_attr(derive);
        errors.error_spanned_by(&input.ident, format!("missing {expected} on the {what}"));
    } else if !input.sublayer_attr_malformed {
        if input.config.is_none() {
            errors.error_spanned_by(
                &input.ident,
                format!("missing `config = <type>` in `#[{attr}(...)]`: the config the shapes are computed from"),
            );
        }
        if input.carry.is_none() && derive == Derive::SubLayer {
            errors.error_spanned_by(
                &input.ident,
                "missing `carry = <type>` in `#[sublayer(...)]`: the activation marker this sub-layer reads and writes",
            );
        }
    }
    let name = match &input.name {
        Some(lit) if lit.value().is_empty() => {
            errors.error_spanned_by(lit, "the kind name is empty");
            String::new()
        }
        Some(lit) => lit.value(),
        // `r#type` names the kind `type`: the `r#` only escapes a keyword in Rust source.
        None => input.ident.unraw().to_string(),
    };
    if matches!(&input.fields, Some(f) if f.is_empty()) {
        errors.error_spanned_by(
            &input.ident,
            format!("a {what} needs at least one parameter"),
        );
    }
    let has_fields = input.fields.is_some();
    let fields = input.fields.unwrap_or_default();
    let mut params = Vec::new();
    let mut names: HashMap<String, Ident> = HashMap::new();
    for f in &fields {
        // syn reads `_: T` as a named field (unnamed fields, unstable), but the expansion
        // reads and builds every field by name, and `self._` does not parse: an error here
        // (with a stub) rather than an expansion that is no Rust.
        if f.ident == "_" {
            errors.error_spanned_by(&f.ident, "a parameter field needs a name, not `_`");
        }
        if derive == Derive::Inputs {
            if let Some(m) = input_field(f, input.value_ty.as_ref(), &mut names, errors) {
                params.push(Member::Input(m));
            }
            continue;
        }
        if let Some(stack) = &f.stack {
            if let Some(attr) = f.attr.as_ref() {
                errors.error_spanned_by(
                    attr,
                    format!("field `{}` is the stack; it takes no `#[param]`", f.ident),
                );
            }
            if f.module.is_some() {
                errors.error_spanned_by(
                    &stack.path,
                    format!(
                        "field `{}` is both the stack and a sub-module; keep one",
                        f.ident
                    ),
                );
            }
            if let Some(first) = params.iter().find_map(|m| match m {
                Member::Stack(s) => Some(s.field.clone()),
                _ => None,
            }) {
                errors.error_spanned_by(
                    &stack.path,
                    format!("a model has one stack field; `{first}` is it already"),
                );
            }
            params.push(Member::Stack(StackMember {
                field: f.ident.clone(),
                ty: f.ty.clone(),
            }));
            continue;
        }
        let is_value_ty = |t: &Ident| is_type_param(&f.ty, t);
        if let Some(module) = &f.module {
            if let Some(param) = &f.attr {
                errors.error_spanned_by(
                    param,
                    format!(
                        "field `{}` is both a parameter and a sub-module; keep `#[param(...)]` for a tensor `T` or `#[module]` for a module type",
                        f.ident
                    ),
                );
            }
            if let Some(t) = input.value_ty.as_ref().filter(|t| is_value_ty(t)) {
                errors.error_spanned_by(
                    &f.ty,
                    format!(
                        "a `#[module]` field has a module type over `{t}` (`Attention<{t}>`), not `{t}` itself; a tensor field takes `#[param(...)]`"
                    ),
                );
            }
            let name = claim_name(f, "parameter", &mut names, errors);
            params.push(Member::Module(SubModule {
                field: f.ident.clone(),
                name,
                ty: f.ty.clone(),
                config: module.config.clone(),
            }));
            continue;
        }
        // Without `#[param]` the missing-attribute error below says it all.
        if let Some(t) = input
            .value_ty
            .as_ref()
            .filter(|t| f.attr.is_some() && !is_value_ty(t))
        {
            errors.error_spanned_by(
                &f.ty,
                format!("a parameter field has the struct's value type `{t}`; a field of another type is a sub-module, marked `#[module]`"),
            );
        }
        let pname = claim_name(f, "parameter", &mut names, errors);
        let Some(attr) = &f.attr else {
            errors.error_spanned_by(
                &f.ident,
                format!(
                    "field `{}` has no `#[param(shape = [...], shard = <dim>)]` or `#[module]`; every field of a {what} is a parameter (`T`) or a sub-module (`Attention<T>`, marked `#[module]`)",
                    f.ident
                ),
            );
            continue;
        };
        let Some(shape) = &f.shape else {
            if f.malformed {
                continue;
            }
            errors.error_spanned_by(
                attr,
                format!(
                    "parameter `{}` has no shape; add `shape = [<dim>, ...]`",
                    f.ident
                ),
            );
            continue;
        };
        let rank = shape.dims.len();
        let shard = match (&f.shard, &f.replicated) {
            (Some(_), Some(r)) => {
                errors.error_spanned_by(
                    r,
                    "`replicated` conflicts with `shard`; a parameter is either sharded or replicated",
                );
                None
            }
            (None, None) if f.malformed => None,
            (None, None) => {
                errors.error_spanned_by(
                    attr,
                    format!(
                        "parameter `{}` needs `shard = <dimension>` (sharded over the FSDP axis) or `replicated`",
                        f.ident
                    ),
                );
                None
            }
            (None, Some(_)) => None,
            (Some(lit), None) => match lit.base10_parse::<usize>() {
                Ok(d) if d < rank => Some(d),
                Ok(d) => {
                    let valid = match rank {
                        0 => "a rank-0 parameter cannot be sharded; use `replicated`".to_owned(),
                        1 => "expected 0".to_owned(),
                        _ => format!("expected 0 to {}", rank - 1),
                    };
                    errors.error_spanned_by(
                        lit,
                        format!("shard dimension {d} is out of range for a shape of rank {rank}; {valid}"),
                    );
                    None
                }
                Err(_) => {
                    errors.error_spanned_by(lit, "expected a dimension index (`0`, `1`, …)");
                    None
                }
            },
        };
        let init = match &f.init {
            Some(InitSpec::Normal(std)) => Init::Normal(std.clone()),
            Some(InitSpec::Ones) => Init::Ones,
            Some(InitSpec::Zeros) => Init::Zeros,
            None if f.replicated.is_some() => Init::Ones,
            None => Init::NormalDefault,
        };
        let dtype = match &f.dtype {
            None => "F32",
            Some(d) => dtype_variant(d, parse::DTYPES, "parameter", errors).unwrap_or("F32"),
        };
        params.push(Member::Param(Param {
            field: f.ident.clone(),
            name: pname,
            dims: shape.dims.clone(),
            shard,
            init,
            dtype,
        }));
    }
    let inputs = input.inputs.as_ref().and_then(|ty| inputs_path(ty, errors));
    if derive == Derive::Model {
        if !params.iter().any(|m| matches!(m, Member::Stack(_))) && has_fields {
            errors.error_spanned_by(
                &input.ident,
                "a model needs its stack as a field: `#[stack] layers: Layers<MyStack>`",
            );
        }
        if input.inputs.is_none() && input.has_sublayer_attr && !input.sublayer_attr_malformed {
            errors.error_spanned_by(
                &input.ident,
                "missing `inputs = <type>` in `#[model(...)]`: the `#[derive(Inputs)]` struct of the model's inputs",
            );
        }
    }
    let carry_ok = input.carry.is_some() || derive != Derive::SubLayer;
    match (input.value_ty, input.config, input.carry) {
        (Some(value_ty), Some(config), carry) if carry_ok && errors.is_empty() => {
            Checked::Valid(Model {
                derive,
                ident: input.ident,
                value_ty,
                config,
                carry,
                name,
                members: params,
                inputs,
                generics: input.generics,
            })
        }
        (value_ty, config, carry) => Checked::Invalid(Stub {
            derive,
            ident: input.ident,
            value_ty,
            generics: input.generics,
            config,
            carry,
            stack: fields
                .iter()
                .find(|f| f.stack.is_some())
                .map(|f| f.ty.clone()),
            inputs,
            fields: fields.into_iter().map(|f| f.ident).collect(),
        }),
    }
}

/// A model's `inputs = Type` as the path the `Inputs` type is built from: `Batch` (the
/// struct named without its value type) or `Batch<T>` (over the model's value type). The
/// expansion writes it with `Tensor` for the value type, so anything else (`()`, `&Batch`,
/// `<X as Y>::Z`) is reported here, on the type, rather than left to become tokens that do
/// not parse.
fn inputs_path(ty: &Type, errors: &mut Errors) -> Option<syn::TypePath> {
    match ty {
        // A `$t:ty` fragment of a `macro_rules!` arrives in an invisible group.
        Type::Group(g) => inputs_path(&g.elem, errors),
        Type::Paren(p) => inputs_path(&p.elem, errors),
        Type::Path(p)
            if p.qself.is_none()
                && p.path.segments.last().is_some_and(|s| {
                    !matches!(s.arguments, syn::PathArguments::Parenthesized(_))
                }) =>
        {
            Some(p.clone())
        }
        other => {
            errors.error_spanned_by(
                other,
                format!(
                    "expected `inputs = <path>` naming the `#[derive(Inputs)]` struct of the model's inputs (`inputs = Batch`), found `{}`",
                    quote::ToTokens::to_token_stream(other)
                ),
            );
            None
        }
    }
}

/// Whether `ty` is the type parameter `t`, also when it arrives as a `macro_rules!` `$t:ty`
/// fragment (an invisible group) or in parentheses.
fn is_type_param(ty: &Type, t: &Ident) -> bool {
    match ty {
        Type::Group(g) => is_type_param(&g.elem, t),
        Type::Paren(p) => is_type_param(&p.elem, t),
        Type::Path(p) => p.qself.is_none() && p.path.is_ident(t),
        _ => false,
    }
}

/// The name field `f` gives its parameter, sub-module or input (`what`): its `name = "…"`, or
/// the field's own without `r#`; an empty or repeated name is reported, at the literal when
/// one is written.
fn claim_name(
    f: &parse::Field,
    what: &str,
    names: &mut HashMap<String, Ident>,
    errors: &mut Errors,
) -> String {
    let name = f
        .name
        .as_ref()
        .map(syn::LitStr::value)
        .unwrap_or_else(|| f.ident.unraw().to_string());
    if let Some(lit) = f.name.as_ref().filter(|l| l.value().is_empty()) {
        errors.error_spanned_by(
            lit,
            format!(
                "the {what} name of `{}` is empty; write a name or drop `name` to use the field's",
                f.ident
            ),
        );
    }
    if let Some(first) = names.get(&name) {
        let msg = format!("duplicate {what} name `{name}`; field `{first}` has it already");
        match &f.name {
            Some(lit) => errors.error_spanned_by(lit, msg),
            None => errors.error_spanned_by(&f.ident, msg),
        }
    } else {
        names.insert(name.clone(), f.ident.clone());
    }
    name
}

/// The `DType` variant of element type `d` if it is one of `allowed`; else an error naming
/// `what` (`parameter`, `input`) and the choices.
fn dtype_variant(
    d: &Ident,
    allowed: &[&str],
    what: &str,
    errors: &mut Errors,
) -> Option<&'static str> {
    let name = d.to_string();
    let variant = match name.as_str() {
        "i32" => "I32",
        "i64" => "I64",
        "f32" => "F32",
        "bf16" => "BF16",
        "f64" => "F64",
        _ => "",
    };
    if variant.is_empty() || !allowed.contains(&name.as_str()) {
        errors.error_spanned_by(
            d,
            format!(
                "unsupported {what} element type `{name}`; expected {}",
                args::one_of(allowed)
            ),
        );
        return None;
    }
    Some(variant)
}

/// A field of an inputs struct: `#[input(shape = [...], dtype = <type>)]` on a value-type field.
fn input_field(
    f: &parse::Field,
    value_ty: Option<&Ident>,
    names: &mut HashMap<String, Ident>,
    errors: &mut Errors,
) -> Option<InputMember> {
    if let Some(t) = value_ty
        && !is_type_param(&f.ty, t)
    {
        errors.error_spanned_by(
            &f.ty,
            format!("an input field has the struct's value type `{t}`"),
        );
    }
    let name = claim_name(f, "input", names, errors);
    let Some(attr) = &f.input else {
        errors.error_spanned_by(
            &f.ident,
            format!(
                "field `{}` has no `#[input(shape = [...], dtype = i32)]`; every field of an inputs struct is an input",
                f.ident
            ),
        );
        return None;
    };
    let Some(shape) = &f.shape else {
        if !f.malformed {
            errors.error_spanned_by(
                attr,
                format!(
                    "input `{}` has no shape; add `shape = [<dim>, ...]`",
                    f.ident
                ),
            );
        }
        return None;
    };
    let dtype = match &f.dtype {
        None => {
            errors.error_spanned_by(
                attr,
                format!(
                    "input `{}` needs `dtype = <type>`; expected {}",
                    f.ident,
                    args::one_of(parse::INPUT_DTYPES)
                ),
            );
            return None;
        }
        Some(d) => dtype_variant(d, parse::INPUT_DTYPES, "input", errors)?,
    };
    Some(InputMember {
        field: f.ident.clone(),
        name,
        dims: shape.dims.clone(),
        dtype,
        values: f.values.clone(),
    })
}
