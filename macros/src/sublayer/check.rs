//! Rules over a whole sub-layer declaration; a declaration that passes becomes a [`Model`],
//! the only thing `expand` reads.

use std::collections::HashMap;

use syn::ext::IdentExt;
use syn::{Expr, Ident, Type};

use super::parse::{self, InitSpec, Input};
use crate::args;
use crate::errors::Errors;

/// A validated sub-layer.
pub(crate) struct Model {
    pub(crate) ident: Ident,
    pub(crate) value_ty: Ident,
    pub(crate) config: Type,
    pub(crate) carry: Type,
    pub(crate) name: String,
    pub(crate) params: Vec<Param>,
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
}

/// The outcome of [`check`].
pub(crate) enum Checked {
    Valid(Model),
    /// Errors were recorded; the stub's bodies read no fields, so an enum, a tuple struct or a
    /// struct without its type parameter gets one too.
    Invalid(Stub),
}

pub(crate) fn check(input: Input, errors: &mut Errors) -> Checked {
    if !input.has_sublayer_attr {
        errors.error_spanned_by(
            &input.ident,
            "missing `#[sublayer(config = <type>, carry = <type>)]` on the sub-layer",
        );
    } else if !input.sublayer_attr_malformed {
        if input.config.is_none() {
            errors.error_spanned_by(
                &input.ident,
                "missing `config = <type>` in `#[sublayer(...)]`: the config the shapes are computed from",
            );
        }
        if input.carry.is_none() {
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
        errors.error_spanned_by(&input.ident, "a sub-layer needs at least one parameter");
    }
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
        if let Some(t) = &input.value_ty {
            let is_value_ty = is_type_param(&f.ty, t);
            if !is_value_ty {
                errors.error_spanned_by(
                    &f.ty,
                    format!("a parameter field has the struct's value type `{t}`"),
                );
            }
        }
        let pname = f
            .name
            .as_ref()
            .map(syn::LitStr::value)
            .unwrap_or_else(|| f.ident.unraw().to_string());
        if let Some(lit) = f.name.as_ref().filter(|l| l.value().is_empty()) {
            errors.error_spanned_by(
                lit,
                format!(
                    "the parameter name of `{}` is empty; write a name or drop `name` to use the field's",
                    f.ident
                ),
            );
        }
        if let Some(first) = names.get(&pname) {
            let msg = format!("duplicate parameter name `{pname}`; field `{first}` has it already");
            match &f.name {
                Some(lit) => errors.error_spanned_by(lit, msg),
                None => errors.error_spanned_by(&f.ident, msg),
            }
        } else {
            names.insert(pname.clone(), f.ident.clone());
        }
        let Some(attr) = &f.attr else {
            errors.error_spanned_by(
                &f.ident,
                format!(
                    "field `{}` has no `#[param(shape = [...], shard = <dim>)]`; every field of a sub-layer is a parameter",
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
            Some(d) => match d.to_string().as_str() {
                "f32" => "F32",
                "bf16" => "BF16",
                "f64" => "F64",
                other => {
                    errors.error_spanned_by(
                        d,
                        format!(
                            "unsupported parameter element type `{other}`; expected {}",
                            args::one_of(parse::DTYPES)
                        ),
                    );
                    "F32"
                }
            },
        };
        params.push(Param {
            field: f.ident.clone(),
            name: pname,
            dims: shape.dims.clone(),
            shard,
            init,
            dtype,
        });
    }
    match (input.value_ty, input.config, input.carry) {
        (Some(value_ty), Some(config), Some(carry)) if errors.is_empty() => Checked::Valid(Model {
            ident: input.ident,
            value_ty,
            config,
            carry,
            name,
            params,
        }),
        (value_ty, config, carry) => Checked::Invalid(Stub {
            ident: input.ident,
            value_ty,
            generics: input.generics,
            config,
            carry,
            fields: fields.into_iter().map(|f| f.ident).collect(),
        }),
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
