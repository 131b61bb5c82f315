//! One pass over a module's tokens: its aliases, its Shardy meshes and every `main`.
//!
//! MLIR lets a module declare meshes after the functions that use them and print aliases
//! (`#loc3 = loc(…)`) at either end, so nothing is resolved during the pass: it records where
//! each definition starts, and the signature is read once everything is known. Every
//! `func.func` named `main`, in either form, is recorded, so a second one is refused instead
//! of silently picking the first.

use std::collections::HashMap;

use super::Reason;
use super::cursor::{Cursor, bad_string, entry, unexpected};
use super::lexer::Kind;

/// What the pass found.
#[derive(Debug, Default)]
pub(super) struct Module<'a> {
    attr_aliases: HashMap<&'a str, Definition<'a>>,
    type_aliases: HashMap<&'a str, Definition<'a>>,
    meshes: HashMap<String, Definition<'a>>,
    pub mains: Vec<Main<'a>>,
}

/// Where a named thing is defined; a name defined twice is ambiguous.
#[derive(Debug)]
enum Definition<'a> {
    Once(Cursor<'a>),
    Repeated,
}

/// A `func.func` named `main`.
#[derive(Debug)]
pub(super) enum Main<'a> {
    /// `func.func [public|private] @main (…`: a cursor just before the `(`.
    Pretty(Cursor<'a>),
    /// `"func.func"() <{function_type = …, sym_name = "main", arg_attrs = […]}> (…)`.
    Generic {
        function_type: Cursor<'a>,
        arg_attrs: Option<Cursor<'a>>,
    },
}

impl<'a> Module<'a> {
    pub fn scan(text: &'a str) -> Result<Module<'a>, Reason> {
        let mut module = Module::default();
        let mut cursor = Cursor::new(text);
        loop {
            let t = cursor.next()?;
            match t.kind {
                Kind::Eof => return Ok(module),
                Kind::BareId if t.text == "func.func" => module.pretty_func(&cursor)?,
                Kind::BareId if t.text == "sdy.mesh" => module.pretty_mesh(&cursor)?,
                Kind::Str if cursor.peek()?.is("(") => match t.string_value().as_deref() {
                    Some("func.func") => module.generic_func(&cursor)?,
                    Some("sdy.mesh") => module.generic_mesh(&cursor)?,
                    _ => {}
                },
                Kind::Hash | Kind::Bang if cursor.peek()?.is("=") => {
                    cursor.next()?;
                    let table = if t.kind == Kind::Hash {
                        &mut module.attr_aliases
                    } else {
                        &mut module.type_aliases
                    };
                    define(table, t.text, cursor.clone());
                }
                _ => {}
            }
        }
    }

    /// Where the attribute alias `#name` is defined, if it is one.
    pub fn attr_alias(&self, name: &str) -> Result<Option<&Cursor<'a>>, Reason> {
        lookup(&self.attr_aliases, name, "attribute alias")
    }

    /// Where the type alias `!name` is defined, if it is one.
    pub fn type_alias(&self, name: &str) -> Result<Option<&Cursor<'a>>, Reason> {
        lookup(&self.type_aliases, name, "type alias")
    }

    /// Where the value of `sdy.mesh @name` starts.
    pub fn mesh(&self, name: &str) -> Result<&Cursor<'a>, Reason> {
        lookup(&self.meshes, name, "mesh")?
            .ok_or_else(|| Reason::new(format!("no `sdy.mesh @{name}` in the program")))
    }

    fn pretty_func(&mut self, after_op: &Cursor<'a>) -> Result<(), Reason> {
        let mut look = after_op.clone();
        let mut t = look.next()?;
        if t.kind == Kind::BareId && matches!(t.text, "public" | "private" | "nested") {
            t = look.next()?;
        }
        if t.kind != Kind::Symbol {
            return Err(unexpected(&t, "a function name after `func.func`"));
        }
        if t.symbol_name().ok_or_else(|| bad_string(&t))? == "main" {
            self.mains.push(Main::Pretty(look));
        }
        Ok(())
    }

    fn generic_func(&mut self, after_op: &Cursor<'a>) -> Result<(), Reason> {
        let mut look = after_op.clone();
        let entries = look.generic_op_entries()?;
        let Some(mut name) = entry(&entries, "sym_name")? else {
            return Err(Reason::new("a generic `func.func` has no `sym_name`"));
        };
        let t = name.next()?;
        if t.kind != Kind::Str {
            return Err(unexpected(&t, "a string `sym_name`"));
        }
        if t.string_value().ok_or_else(|| bad_string(&t))? != "main" {
            return Ok(());
        }
        let function_type = entry(&entries, "function_type")?
            .ok_or_else(|| Reason::new("the generic `func.func` `main` has no `function_type`"))?;
        self.mains.push(Main::Generic {
            function_type,
            arg_attrs: entry(&entries, "arg_attrs")?,
        });
        Ok(())
    }

    /// `sdy.mesh @name = <["x"=4]>`; a declaration this cannot read is left out, so a
    /// sharding that uses it reports the mesh as unknown.
    fn pretty_mesh(&mut self, after_op: &Cursor<'a>) -> Result<(), Reason> {
        let mut look = after_op.clone();
        let t = look.next()?;
        if let (Kind::Symbol, Some(name)) = (t.kind, t.symbol_name())
            && look.eat("=")?
        {
            define(&mut self.meshes, name, look);
        }
        Ok(())
    }

    /// `"sdy.mesh"() <{mesh = #sdy.mesh<["x"=4]>, sym_name = "name"}> : () -> ()`.
    fn generic_mesh(&mut self, after_op: &Cursor<'a>) -> Result<(), Reason> {
        let mut look = after_op.clone();
        let entries = look.generic_op_entries()?;
        if let (Some(mut name), Some(mesh)) =
            (entry(&entries, "sym_name")?, entry(&entries, "mesh")?)
            && let Some(name) = name.next()?.string_value()
        {
            define(&mut self.meshes, name, mesh);
        }
        Ok(())
    }
}

fn define<'a, K: std::hash::Hash + Eq>(
    table: &mut HashMap<K, Definition<'a>>,
    name: K,
    at: Cursor<'a>,
) {
    table
        .entry(name)
        .and_modify(|d| *d = Definition::Repeated)
        .or_insert(Definition::Once(at));
}

fn lookup<'t, 'a, K: std::borrow::Borrow<str> + std::hash::Hash + Eq>(
    table: &'t HashMap<K, Definition<'a>>,
    name: &str,
    what: &str,
) -> Result<Option<&'t Cursor<'a>>, Reason> {
    match table.get(name) {
        None => Ok(None),
        Some(Definition::Once(at)) => Ok(Some(at)),
        Some(Definition::Repeated) => Err(Reason::new(format!(
            "{what} `{name}` is defined more than once"
        ))),
    }
}
