//! `main`'s parameters: global tensor types and the sharding annotations that divide them.
//!
//! Both spellings of a function are read: the pretty `func.func @main(%a: tensor<4xf32>
//! {attrs} loc(…), …)` and the generic `"func.func"() <{function_type = (…) -> …,
//! arg_attrs = [{…}, …]}>`. A type that is not a static tensor of a [`DType`] is refused:
//! its per-device buffer could not be checked.

use std::str::FromStr;

use stackscan::{DType, TensorType};

use super::Reason;
use super::cursor::{Cursor, bad_string, entry, unexpected};
use super::lexer::Kind;
use super::module::{Main, Module};
use super::sharding::SdySharding;

/// One parameter as written: its global type and how it is laid out.
#[derive(Debug)]
pub(super) struct Param {
    pub ty: TensorType,
    pub layout: Layout,
}

/// The sharding annotations of one parameter.
#[derive(Debug, Default)]
pub(super) struct Layout {
    /// `sdy.sharding = #sdy.sharding<…>`.
    pub sdy: Option<SdySharding>,
    /// `mhlo.sharding = "{…}"` (GSPMD), as written.
    pub gspmd: Option<String>,
}

/// The parameters of `main`, in order.
pub(super) fn params(main: &Main<'_>, module: &Module<'_>) -> Result<Vec<Param>, Reason> {
    match main {
        Main::Pretty(at) => pretty_params(&mut at.clone(), module),
        Main::Generic {
            function_type,
            arg_attrs,
        } => {
            let types = function_inputs(&mut function_type.clone(), module)?;
            let layouts = match arg_attrs {
                Some(at) => arg_attr_list(&mut at.clone(), module)?,
                None => types.iter().map(|_| Layout::default()).collect(),
            };
            if layouts.len() != types.len() {
                return Err(Reason::new(format!(
                    "`function_type` has {} inputs but `arg_attrs` has {} entries",
                    types.len(),
                    layouts.len()
                )));
            }
            Ok(types
                .into_iter()
                .zip(layouts)
                .map(|(ty, layout)| Param { ty, layout })
                .collect())
        }
    }
}

/// `(%a: tensor<…> {…} loc(…), …)`; declarations without names (`(tensor<…>, …)`) too.
fn pretty_params(c: &mut Cursor<'_>, module: &Module<'_>) -> Result<Vec<Param>, Reason> {
    c.expect("(", "opening the parameters of `@main`")?;
    let mut params = Vec::new();
    if c.eat(")")? {
        return Ok(params);
    }
    loop {
        let index = params.len();
        let param = pretty_param(c, module).map_err(|r| r.in_param(index))?;
        params.push(param);
        let t = c.next()?;
        if t.is(")") {
            return Ok(params);
        }
        if !t.is(",") {
            return Err(unexpected(&t, "`,` or `)` after a parameter of `@main`"));
        }
    }
}

fn pretty_param(c: &mut Cursor<'_>, module: &Module<'_>) -> Result<Param, Reason> {
    if c.peek()?.kind == Kind::Percent {
        c.next()?;
        c.expect(":", "after the parameter name")?;
    }
    let ty = tensor_type(c, module)?;
    let mut layout = Layout::default();
    loop {
        let t = c.peek()?;
        if t.is("{") {
            c.next()?;
            layout = layout_of(&c.dict_entries()?, module)?;
        } else if t.is_id("loc") {
            c.next()?;
            let open = c.next()?;
            if !open.is("(") {
                return Err(unexpected(&open, "`(` after `loc`"));
            }
            c.skip_balanced(&open)?;
        } else {
            return Ok(Param { ty, layout });
        }
    }
}

/// The inputs of a function type, `(tensor<…>, …) -> …`.
fn function_inputs(c: &mut Cursor<'_>, module: &Module<'_>) -> Result<Vec<TensorType>, Reason> {
    let t = c.next()?;
    if t.kind == Kind::Bang
        && let Some(at) = module.type_alias(t.text)?
    {
        return function_inputs(&mut c.follow(at, t.text)?, module);
    }
    if !t.is("(") {
        return Err(unexpected(&t, "`(` opening `function_type`"));
    }
    let mut types = Vec::new();
    if c.eat(")")? {
        return Ok(types);
    }
    loop {
        let index = types.len();
        types.push(tensor_type(c, module).map_err(|r| r.in_param(index))?);
        let t = c.next()?;
        if t.is(")") {
            return Ok(types);
        }
        if !t.is(",") {
            return Err(unexpected(&t, "`,` or `)` in `function_type`"));
        }
    }
}

/// `arg_attrs = [{…}, {}, …]`, an alias allowed for the list or any element.
fn arg_attr_list(c: &mut Cursor<'_>, module: &Module<'_>) -> Result<Vec<Layout>, Reason> {
    let t = c.next()?;
    if t.kind == Kind::Hash
        && let Some(at) = module.attr_alias(t.text)?
    {
        return arg_attr_list(&mut c.follow(at, t.text)?, module);
    }
    if !t.is("[") {
        return Err(unexpected(&t, "`[` opening `arg_attrs`"));
    }
    let mut layouts = Vec::new();
    if c.eat("]")? {
        return Ok(layouts);
    }
    loop {
        let index = layouts.len();
        layouts.push(arg_attr_dict(c, module).map_err(|r| r.in_param(index))?);
        let t = c.next()?;
        if t.is("]") {
            return Ok(layouts);
        }
        if !t.is(",") {
            return Err(unexpected(&t, "`,` or `]` in `arg_attrs`"));
        }
    }
}

fn arg_attr_dict(c: &mut Cursor<'_>, module: &Module<'_>) -> Result<Layout, Reason> {
    let t = c.next()?;
    if t.kind == Kind::Hash
        && let Some(at) = module.attr_alias(t.text)?
    {
        return arg_attr_dict(&mut c.follow(at, t.text)?, module);
    }
    if !t.is("{") {
        return Err(unexpected(&t, "an argument's attribute dictionary"));
    }
    layout_of(&c.dict_entries()?, module)
}

fn layout_of(
    entries: &[(String, Option<Cursor<'_>>)],
    module: &Module<'_>,
) -> Result<Layout, Reason> {
    let sdy = entry(entries, "sdy.sharding")?
        .map(|mut at| SdySharding::parse(&mut at, module))
        .transpose()?;
    let gspmd = match entry(entries, "mhlo.sharding")? {
        None => None,
        Some(mut at) => {
            let t = at.next()?;
            if t.kind != Kind::Str {
                return Err(unexpected(&t, "a string `mhlo.sharding`"));
            }
            Some(t.string_value().ok_or_else(|| bad_string(&t))?)
        }
    };
    Ok(Layout { sdy, gspmd })
}

/// A static tensor type: `tensor<4x8xf32>`, `tensor<4 x 8 x f32>`, `tensor<f32>`, or an alias.
pub(super) fn tensor_type(c: &mut Cursor<'_>, module: &Module<'_>) -> Result<TensorType, Reason> {
    let t = c.next()?;
    if t.kind == Kind::Bang {
        return match module.type_alias(t.text)? {
            Some(at) => tensor_type(&mut c.follow(at, t.text)?, module),
            None => Err(Reason::new(format!("type `{}` is not a tensor", t.text))),
        };
    }
    if !t.is_id("tensor") {
        return Err(match t.kind {
            Kind::BareId => Reason::new(format!("type `{}` is not a tensor", t.text)),
            _ => unexpected(&t, "a tensor type"),
        });
    }
    c.expect("<", "after `tensor`")?;
    // MLIR lexes `4x8xf32` as `4` and `x8xf32` and splits the `x`s off in its parser; so do
    // we, which also accepts the spaced `4 x 8 x f32` it accepts.
    let mut dims = Vec::new();
    let mut want_dim = true;
    loop {
        let t = c.next()?;
        let mut piece = match t.kind {
            Kind::Int if want_dim => {
                dims.push(dim(t.text)?);
                want_dim = false;
                continue;
            }
            Kind::BareId => t.text,
            _ if t.is("?") => {
                return Err(Reason::new("dynamic dimensions (`?`) are not supported"));
            }
            _ if t.is("*") => {
                return Err(Reason::new(
                    "unranked tensors (`tensor<*x…>`) are not supported",
                ));
            }
            _ => return Err(unexpected(&t, "a dimension or an element type")),
        };
        loop {
            if !want_dim {
                piece = piece
                    .strip_prefix('x')
                    .ok_or_else(|| unexpected(&t, "`x` after a dimension"))?;
                want_dim = true;
            }
            let digits = piece.len() - piece.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            if digits > 0 {
                dims.push(dim(&piece[..digits])?);
                piece = &piece[digits..];
                want_dim = false;
            } else if !piece.is_empty() {
                let dtype = DType::from_str(piece).map_err(|e| Reason::new(e.to_string()))?;
                let close = c.next()?;
                if close.is(",") {
                    return Err(Reason::new("tensor encodings are not supported"));
                }
                if !close.is(">") {
                    return Err(unexpected(&close, "`>` closing the tensor type"));
                }
                return Ok(TensorType::new(dtype, dims));
            }
            if piece.is_empty() {
                break;
            }
        }
    }
}

fn dim(text: &str) -> Result<i64, Reason> {
    text.parse()
        .map_err(|_| Reason::new(format!("dimension `{text}` does not fit in 64 bits")))
}
