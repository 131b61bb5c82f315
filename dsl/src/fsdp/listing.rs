//! The model's parameters under hierarchical names (`embed`, `layers.attn.wq`), with shapes,
//! element types and FSDP shard dimensions: what a plan listing, a log line or a checkpoint
//! names them by, all through [`StackModel::weight_names`] and [`crate::module::stacked_name`]. Stacked parameters are listed once per kind with the number of layers that
//! hold a copy, since the stacked arrays are `[layers of the kind, ..shape]`.

use std::fmt::Write as _;

use super::model::{ParamSpec, StackModel};
use crate::module::stacked_name;

/// One row of [`StackModel::parameters`].
#[derive(Clone, Debug, PartialEq)]
pub struct NamedParam {
    /// `name` for a parameter outside the stack; `layers.<name>` for a stacked one, with the
    /// kind between (`layers.<kind>.<name>`) when the stack has several
    /// ([`stacked_name`](crate::module::stacked_name)). `name` is the path inside the layer
    /// (`attn.wq`).
    pub path: String,
    /// Layers that hold a copy: 1 outside the stack.
    pub copies: usize,
    /// The spec (its `name` is the last part of `path`).
    pub spec: ParamSpec,
}

impl NamedParam {
    /// Elements over all copies.
    pub fn elements(&self) -> i64 {
        self.spec.shape.iter().product::<i64>() * self.copies as i64
    }
}

impl StackModel {
    /// Every parameter with its hierarchical name: the outer ones first, then each kind's in
    /// stack kind order. Kinds without a stack entry (an invalid model) are listed with 0 copies.
    pub fn parameters(&self) -> Vec<NamedParam> {
        let outer = self.outer_params.iter().map(|p| NamedParam {
            path: p.name.clone(),
            copies: 1,
            spec: p.clone(),
        });
        let kinds = self.kinds.len();
        let stacked = self.kinds.iter().enumerate().flat_map(move |(k, kind)| {
            let copies = if k < self.stack.num_kinds() {
                self.stack.layers_of_kind(k)
            } else {
                0
            };
            kind.params.iter().map(move |p| NamedParam {
                path: stacked_name(kinds, &kind.name, &p.name),
                copies,
                spec: p.clone(),
            })
        });
        outer.chain(stacked).collect()
    }

    /// Every weight's name in [`weights`](Self::weights) order: the names checkpoints and
    /// logs use, the paths of [`parameters`](Self::parameters).
    pub fn weight_names(&self) -> Vec<String> {
        self.parameters().into_iter().map(|p| p.path).collect()
    }

    /// [`parameters`](Self::parameters) as an aligned table, one parameter a line, and a total.
    pub fn parameter_table(&self) -> String {
        let rows: Vec<[String; 5]> = self
            .parameters()
            .into_iter()
            .map(|p| {
                let shape = p
                    .spec
                    .shape
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ");
                let shard = match p.spec.shard_dim {
                    Some(d) => format!("shard {d}"),
                    None => "replicated".to_owned(),
                };
                [
                    p.path.clone(),
                    format!("×{}", p.copies),
                    format!("[{shape}]"),
                    p.spec.dtype.to_string(),
                    shard,
                ]
            })
            .collect();
        let width = |c: usize| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0);
        let widths = [width(0), width(1), width(2), width(3)];
        let mut out = String::new();
        for r in &rows {
            // Writing to a String cannot fail.
            let _ = writeln!(
                out,
                "{:<w0$}  {:>w1$}  {:<w2$}  {:<w3$}  {}",
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2],
                w3 = widths[3],
            );
        }
        let total: i64 = self.parameters().iter().map(NamedParam::elements).sum();
        let _ = write!(out, "{total} parameters");
        out
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::fsdp::{InputSpec, LayerKind};
    use crate::plan::Stack;
    use crate::{DType, TensorType};

    #[test]
    fn names_are_hierarchical_and_counts_per_kind() {
        let row = TensorType::new(DType::F32, [2, 8]);
        let kind = |name: &str, p: ParamSpec| LayerKind {
            name: name.into(),
            params: vec![p],
            forward: Rc::new(|h, _| Ok(h.clone())),
        };
        let m = StackModel {
            stack: Stack::blocks(&["A", "A", "B"], 2).unwrap(),
            kinds: vec![
                kind("A", ParamSpec::sharded("w", &[8, 4], DType::F32, 1)),
                kind("B", ParamSpec::replicated("gain", &[8], DType::F32)),
            ],
            activation: row.clone(),
            inputs: vec![InputSpec::new("x", row)],
            outer_params: vec![ParamSpec::sharded("embed", &[16, 8], DType::F32, 0)],
            pre: Rc::new(|i, _| Ok(i[0].clone())),
            post: Rc::new(|h, _, _| h.mean(&[0, 1])),
        };
        let p = m.parameters();
        let paths: Vec<_> = p.iter().map(|p| (p.path.as_str(), p.copies)).collect();
        assert_eq!(
            paths,
            [("embed", 1), ("layers.A.w", 4), ("layers.B.gain", 2)]
        );
        // 16·8 + 4·8·4 + 2·8, counted by hand.
        assert_eq!(
            p.iter().map(NamedParam::elements).sum::<i64>(),
            128 + 128 + 16
        );
        let table = m.parameter_table();
        let lines: Vec<_> = table.lines().collect();
        assert_eq!(lines[0], "embed          ×1  [16, 8]  f32  shard 0");
        assert_eq!(lines[1], "layers.A.w     ×4  [8, 4]   f32  shard 1");
        assert_eq!(lines[2], "layers.B.gain  ×2  [8]      f32  replicated");
        assert_eq!(lines[3], "272 parameters");
    }
}
