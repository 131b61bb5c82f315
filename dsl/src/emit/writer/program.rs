//! The program around `main`'s body: the module, `main`'s signature and, on a mesh, the
//! Shardy manual computation that makes every op inside see per-device shapes.

use std::fmt;

use crate::emit::text::{Writer, types};
use crate::emit::{Alias, Sharding};
use crate::ir::Function;
use crate::mesh::Mesh;
use crate::types::TensorType;

/// `"fsdp", "expert"`: every axis of the mesh, major first.
fn axis_list(mesh: &Mesh) -> String {
    mesh.axes()
        .iter()
        .map(|a| format!("\"{}\"", a.name))
        .collect::<Vec<_>>()
        .join(", ")
}

fn shardy_dims(mesh: &Mesh, rank: usize, s: Sharding) -> String {
    let dims: Vec<String> = (0..rank)
        .map(|d| match s {
            Sharding::Dim(k) if k == d => format!("{{{}}}", axis_list(mesh)),
            _ => "{}".to_owned(),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// The argument attribute XLA reads for input/output aliasing: `tf.aliasing_output = R` on
/// `main`'s parameter makes result `R` reuse its buffer (MLIR→HLO conversion turns it into the
/// module's `input_output_alias`; JAX writes donation the same way). `None` for a parameter
/// that is not donated.
fn aliasing_attr(aliases: &[Alias], param: usize) -> Option<String> {
    aliases
        .iter()
        .find(|a| a.param == param)
        .map(|a| format!("tf.aliasing_output = {} : i32", a.result))
}

fn module_name(f: &Function) -> String {
    let clean: String = f
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "main".to_owned()
    } else {
        clean
    }
}

impl Writer {
    pub(super) fn write_single(&mut self, f: &Function, aliases: &[Alias]) -> fmt::Result {
        self.line(0, &format!("module @{} {{", module_name(f)))?;
        let args: Vec<String> = self
            .name_params(f, "arg")
            .into_iter()
            .enumerate()
            .map(|(i, decl)| match aliasing_attr(aliases, i) {
                Some(attr) => format!("{decl} {{{attr}}}"),
                None => decl,
            })
            .collect();
        self.line(
            1,
            &format!(
                "func.func public @main({}) -> ({}) {{",
                args.join(", "),
                types(&f.result_types())
            ),
        )?;
        self.write_nodes(f, 2)?;
        let results = self.value_names(&f.results);
        self.line(
            2,
            &format!(
                "\"func.return\"({results}) : ({}) -> ()",
                types(&f.result_types())
            ),
        )?;
        self.line(1, "}")?;
        self.line(0, "}")
    }

    pub(super) fn write_sharded(
        &mut self,
        f: &Function,
        mesh: &Mesh,
        params: &[Sharding],
        results: &[Sharding],
        aliases: &[Alias],
    ) -> fmt::Result {
        let n = mesh.size();
        let global = |t: &TensorType, s: Sharding| -> TensorType {
            match s {
                Sharding::Dim(d) => {
                    let mut dims = t.dims.clone();
                    dims[d] *= n as i64;
                    t.with_dims(dims)
                }
                Sharding::Replicated => t.clone(),
            }
        };
        let pt = f.param_types();
        let rt = f.result_types();
        let gp: Vec<TensorType> = pt.iter().zip(params).map(|(t, &s)| global(t, s)).collect();
        let gr: Vec<TensorType> = rt.iter().zip(results).map(|(t, &s)| global(t, s)).collect();
        let sh =
            |t: &TensorType, s: Sharding| format!("<@mesh, {}>", shardy_dims(mesh, t.rank(), s));
        self.line(
            0,
            &format!(
                "module @{} attributes {{mhlo.num_partitions = {n} : i32, mhlo.num_replicas = 1 : i32}} {{",
                module_name(f)
            ),
        )?;
        self.line(1, &format!("sdy.mesh @mesh = <{}>", mesh.describe()))?;
        let gargs: Vec<String> = gp.iter().map(|_| self.fresh("arg")).collect();
        let arg_decls: Vec<String> = gargs
            .iter()
            .zip(&gp)
            .zip(params)
            .enumerate()
            .map(|(i, ((a, t), &s))| {
                let alias = aliasing_attr(aliases, i).map_or(String::new(), |x| format!(", {x}"));
                format!(
                    "{a}: {t} {{sdy.sharding = #sdy.sharding{}{alias}}}",
                    sh(t, s)
                )
            })
            .collect();
        let res_decls: Vec<String> = gr
            .iter()
            .zip(results)
            .map(|(t, &s)| format!("{t} {{sdy.sharding = #sdy.sharding{}}}", sh(t, s)))
            .collect();
        self.line(
            1,
            &format!(
                "func.func public @main({}) -> ({}) {{",
                arg_decls.join(", "),
                res_decls.join(", ")
            ),
        )?;
        let mc = self.fresh("manual");
        let lhs = if gr.len() == 1 {
            mc.clone()
        } else {
            format!("{mc}:{}", gr.len())
        };
        let local_args = self.name_params(f, "local");
        let in_sh: Vec<String> = gp.iter().zip(params).map(|(t, &s)| sh(t, s)).collect();
        let out_sh: Vec<String> = gr.iter().zip(results).map(|(t, &s)| sh(t, s)).collect();
        self.line(
            2,
            &format!(
                "{lhs} = sdy.manual_computation({}) in_shardings=[{}] out_shardings=[{}] manual_axes={{{}}} ({}) {{",
                gargs.join(", "),
                in_sh.join(", "),
                out_sh.join(", "),
                axis_list(mesh),
                local_args.join(", ")
            ),
        )?;
        self.write_nodes(f, 3)?;
        let local_results = self.value_names(&f.results);
        self.line(3, &format!("sdy.return {local_results} : {}", types(&rt)))?;
        self.line(2, &format!("}} : ({}) -> ({})", types(&gp), types(&gr)))?;
        let outs: Vec<String> = if gr.len() == 1 {
            vec![mc]
        } else {
            (0..gr.len()).map(|i| format!("{mc}#{i}")).collect()
        };
        self.line(2, &format!("return {} : {}", outs.join(", "), types(&gr)))?;
        self.line(1, "}")?;
        self.line(0, "}")
    }
}
