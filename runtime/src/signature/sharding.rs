//! Per-device types from Shardy annotations: `#sdy.sharding<@mesh, [{"x"}, {}]>` on a
//! `sdy.mesh @mesh = <["x"=4]>`.
//!
//! A dimension sharded over axes of total size `k` is `1/k` as long on every device. The
//! reader computes that only when it is certain: the mesh must be known and span exactly the
//! program's partitions, every dimension must be closed (an open `?` dimension lets the
//! partitioner choose) and divide evenly (XLA pads uneven shards). Anything else is refused.

use stackscan::TensorType;

use super::Reason;
use super::cursor::{Cursor, bad_string, unexpected};
use super::lexer::{Kind, Token};
use super::module::Module;

/// A parsed `#sdy.sharding<…>`; its mesh is resolved when the per-device type is asked for.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SdySharding {
    mesh: MeshRef,
    dims: Vec<DimSharding>,
}

#[derive(Clone, Debug, PartialEq)]
enum MeshRef {
    /// `@mesh`, declared by `sdy.mesh`.
    Named(String),
    /// `mesh<["x"=4]>` written in place.
    Inline(Mesh),
}

/// The axes one dimension is split over.
#[derive(Clone, Debug, PartialEq)]
struct DimSharding {
    axes: Vec<AxisRef>,
    /// `{"x", ?}` or `{?}`: the partitioner may shard it further.
    open: bool,
}

/// `"x"`, or the sub-axis `"x":(pre)size`.
#[derive(Clone, Debug, PartialEq)]
struct AxisRef {
    name: String,
    sub: Option<(i64, i64)>,
}

/// A mesh's named axes and their sizes.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Mesh {
    axes: Vec<(String, i64)>,
}

impl SdySharding {
    /// Reads `#sdy.sharding<…>` (or an alias of one) at `c`.
    pub fn parse(c: &mut Cursor<'_>, module: &Module<'_>) -> Result<SdySharding, Reason> {
        let t = c.next()?;
        if t.kind == Kind::Hash && t.text != "#sdy.sharding" {
            return match module.attr_alias(t.text)? {
                Some(at) => SdySharding::parse(&mut c.follow(at, t.text)?, module),
                None => Err(unexpected(&t, "`#sdy.sharding<…>`")),
            };
        }
        if t.kind != Kind::Hash {
            return Err(unexpected(&t, "`#sdy.sharding<…>`"));
        }
        c.expect("<", "after `#sdy.sharding`")?;
        let t = c.next()?;
        let mesh = match t.kind {
            Kind::Symbol => MeshRef::Named(t.symbol_name().ok_or_else(|| bad_string(&t))?),
            Kind::BareId if t.text == "mesh" => {
                c.expect("<", "after `mesh`")?;
                MeshRef::Inline(Mesh::body(c)?)
            }
            Kind::Hash => MeshRef::Inline(Mesh::attr_after(&t, c, module)?),
            _ => return Err(unexpected(&t, "a mesh (`@name` or `mesh<…>`)")),
        };
        c.expect(",", "after the mesh of a sharding")?;
        c.expect("[", "opening the dimension shardings")?;
        let mut dims = Vec::new();
        if !c.eat("]")? {
            loop {
                dims.push(DimSharding::parse(c)?);
                let t = c.next()?;
                if t.is("]") {
                    break;
                }
                if !t.is(",") {
                    return Err(unexpected(&t, "`,` or `]` between dimension shardings"));
                }
            }
        }
        // `replicated={…}` and `unreduced={…}` name axes a value is not split over.
        while c.eat(",")? {
            let t = c.next()?;
            if !(t.is_id("replicated") || t.is_id("unreduced")) {
                return Err(unexpected(&t, "`replicated` or `unreduced`"));
            }
            c.expect("=", "after `replicated`")?;
            let open = c.next()?;
            if !open.is("{") {
                return Err(unexpected(&open, "`{`"));
            }
            c.skip_balanced(&open)?;
        }
        c.expect(">", "closing `#sdy.sharding`")?;
        Ok(SdySharding { mesh, dims })
    }

    /// The type each of `partitions` devices holds of a value of global type `global`.
    pub fn per_device(
        &self,
        global: &TensorType,
        module: &Module<'_>,
        partitions: i64,
    ) -> Result<TensorType, Reason> {
        let mesh = match &self.mesh {
            MeshRef::Named(name) => Mesh::parse(&mut module.mesh(name)?.clone(), module)
                .map_err(|r| r.context(&format!("mesh `@{name}`")))?,
            MeshRef::Inline(mesh) => mesh.clone(),
        };
        let devices = mesh.devices()?;
        // A mesh without axes (JAX's `@empty_mesh = <[]>`, what it gives a scalar) splits
        // nothing: the value is whole on every device, however many partitions there are.
        if devices != partitions && !mesh.axes.is_empty() {
            return Err(Reason::new(format!(
                "its mesh has {devices} devices but the program is compiled for {partitions} partitions"
            )));
        }
        if self.dims.len() != global.rank() {
            return Err(Reason::new(format!(
                "the sharding names {} dimensions for `{global}`",
                self.dims.len()
            )));
        }
        let mut dims = Vec::with_capacity(global.rank());
        for (d, (&size, sharding)) in global.dims.iter().zip(&self.dims).enumerate() {
            if sharding.open {
                return Err(Reason::new(format!(
                    "dimension {d} is open (`?`), so the partitioner chooses its sharding"
                )));
            }
            let mut ways: i64 = 1;
            for axis in &sharding.axes {
                let along = mesh.axis(&axis.name)?;
                let split = match axis.sub {
                    None => along,
                    Some((pre, sub))
                        if pre > 0
                            && sub > 0
                            && pre.checked_mul(sub).is_some_and(|k| along % k == 0) =>
                    {
                        sub
                    }
                    Some((pre, sub)) => {
                        return Err(Reason::new(format!(
                            "sub-axis `\"{}\":({pre}){sub}` does not fit an axis of size {along}",
                            axis.name
                        )));
                    }
                };
                ways = ways.checked_mul(split).ok_or_else(|| overflow(d))?;
            }
            if size % ways != 0 {
                return Err(Reason::new(format!(
                    "dimension {d} of size {size} does not split evenly over {ways} devices"
                )));
            }
            dims.push(size / ways);
        }
        Ok(global.with_dims(dims))
    }
}

impl DimSharding {
    /// `{"x", "y":(1)2}`, `{}`, `{"x", ?}`, optionally followed by a priority `p0`.
    fn parse(c: &mut Cursor<'_>) -> Result<DimSharding, Reason> {
        c.expect("{", "opening a dimension sharding")?;
        let mut sharding = DimSharding {
            axes: Vec::new(),
            open: false,
        };
        if !c.eat("}")? {
            loop {
                let t = c.next()?;
                if t.is("?") {
                    sharding.open = true;
                } else if t.kind == Kind::Str {
                    let name = t.string_value().ok_or_else(|| bad_string(&t))?;
                    let sub = if c.eat(":")? {
                        c.expect("(", "opening a sub-axis")?;
                        let pre = int(&c.next()?)?;
                        c.expect(")", "closing a sub-axis offset")?;
                        Some((pre, int(&c.next()?)?))
                    } else {
                        None
                    };
                    sharding.axes.push(AxisRef { name, sub });
                } else {
                    return Err(unexpected(&t, "an axis name or `?`"));
                }
                let t = c.next()?;
                if t.is("}") {
                    break;
                }
                if !t.is(",") {
                    return Err(unexpected(&t, "`,` or `}` in a dimension sharding"));
                }
            }
        }
        let t = c.peek()?;
        if t.kind == Kind::BareId
            && t.text
                .strip_prefix('p')
                .is_some_and(|n| n.parse::<u64>().is_ok())
        {
            c.next()?;
        }
        Ok(sharding)
    }
}

impl Mesh {
    /// A mesh attribute: `<["x"=4]>` (as `sdy.mesh` prints it), `#sdy.mesh<…>` or an alias.
    pub fn parse(c: &mut Cursor<'_>, module: &Module<'_>) -> Result<Mesh, Reason> {
        let t = c.next()?;
        if t.is("<") {
            Mesh::body(c)
        } else if t.kind == Kind::Hash {
            Mesh::attr_after(&t, c, module)
        } else {
            Err(unexpected(&t, "a mesh `<[…]>`"))
        }
    }

    /// `#sdy.mesh<…>` or an alias of a mesh, its `#…` token `t` just consumed.
    fn attr_after(t: &Token<'_>, c: &mut Cursor<'_>, module: &Module<'_>) -> Result<Mesh, Reason> {
        if t.text == "#sdy.mesh" {
            c.expect("<", "after `#sdy.mesh`")?;
            return Mesh::body(c);
        }
        match module.attr_alias(t.text)? {
            Some(at) => Mesh::parse(&mut c.follow(at, t.text)?, module),
            None => Err(unexpected(t, "`#sdy.mesh<…>`")),
        }
    }

    /// `["x"=4, "y"=2], device_ids=[…]>` after the `<`.
    fn body(c: &mut Cursor<'_>) -> Result<Mesh, Reason> {
        c.expect("[", "opening the mesh axes")?;
        let mut axes: Vec<(String, i64)> = Vec::new();
        if !c.eat("]")? {
            loop {
                let t = c.next()?;
                if t.kind != Kind::Str {
                    return Err(unexpected(&t, "a quoted axis name"));
                }
                let name = t.string_value().ok_or_else(|| bad_string(&t))?;
                c.expect("=", "after an axis name")?;
                let size = int(&c.next()?)?;
                if size < 1 || axes.iter().any(|(n, _)| *n == name) {
                    return Err(Reason::new(format!(
                        "mesh axis `\"{name}\"={size}` is repeated or empty"
                    )));
                }
                axes.push((name, size));
                let t = c.next()?;
                if t.is("]") {
                    break;
                }
                if !t.is(",") {
                    return Err(unexpected(&t, "`,` or `]` between mesh axes"));
                }
            }
        }
        if c.eat(",")? {
            let t = c.next()?;
            if !t.is_id("device_ids") {
                return Err(unexpected(&t, "`device_ids`"));
            }
            c.expect("=", "after `device_ids`")?;
            let open = c.next()?;
            if !open.is("[") {
                return Err(unexpected(&open, "`[`"));
            }
            c.skip_balanced(&open)?;
        }
        c.expect(">", "closing the mesh")?;
        Ok(Mesh { axes })
    }

    /// Devices the mesh spans: the product of its axis sizes.
    fn devices(&self) -> Result<i64, Reason> {
        self.axes
            .iter()
            .try_fold(1i64, |n, (_, size)| n.checked_mul(*size))
            .ok_or_else(|| Reason::new("the mesh has more devices than fit in 64 bits"))
    }

    fn axis(&self, name: &str) -> Result<i64, Reason> {
        self.axes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, size)| *size)
            .ok_or_else(|| {
                let names: Vec<String> = self
                    .axes
                    .iter()
                    .map(|(n, _)| format!("`\"{n}\"`"))
                    .collect();
                Reason::new(format!(
                    "axis `\"{name}\"` is not in the mesh; it has {}",
                    if names.is_empty() {
                        "no axes".to_owned()
                    } else {
                        names.join(", ")
                    }
                ))
            })
    }
}

fn int(t: &Token<'_>) -> Result<i64, Reason> {
    if t.kind != Kind::Int {
        return Err(unexpected(t, "an integer"));
    }
    t.text
        .parse()
        .map_err(|_| Reason::new(format!("`{}` does not fit in 64 bits", t.text)))
}

fn overflow(d: usize) -> Reason {
    Reason::new(format!(
        "dimension {d} is split over more devices than fit in 64 bits"
    ))
}
