//! Device meshes with named axes, and the collective axes they resolve.
//!
//! A [`Mesh`] lists its axes major to minor (`fsdp × expert`); device `i` of the program sits at
//! the row-major coordinates of `i`, as Shardy's default (iota) device order places it. A
//! collective names the devices it spans with an [`Axis`]: one mesh axis (`expert`: the devices
//! that differ only in their `expert` coordinate) or a compound of several in mesh order
//! (`fsdp,expert`, written by [`Axis::compound`]: every device, in device order). From the mesh
//! a collective's replica groups follow, and this device's index along its axis.
//!
//! ```
//! use stackscan::Mesh;
//! let mesh = Mesh::new(&[("fsdp", 2), ("expert", 4)])?;
//! let expert = mesh.axis("expert")?;
//! assert_eq!(mesh.replica_groups(&expert)?, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
//! let fsdp = mesh.axis("fsdp")?;
//! assert_eq!(mesh.replica_groups(&fsdp)?[1], vec![1, 5]);
//! assert_eq!(mesh.all().name, "fsdp,expert");
//! assert_eq!(mesh.replica_groups(&mesh.all())?, vec![(0..8).collect::<Vec<_>>()]);
//! # Ok::<(), stackscan::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::ir::Axis;

/// Separates the mesh axes of a compound [`Axis`] name.
const COMPOUND_SEPARATOR: char = ',';

impl Axis {
    /// One named axis of `size` devices.
    pub fn new(name: &str, size: usize) -> Axis {
        Axis {
            name: name.to_owned(),
            size,
        }
    }

    /// The devices spanned by all of `parts` together, the first the major one: a collective on
    /// it runs over their product (gathers concatenate in that order). `parts` must be axes of
    /// one mesh, in mesh order; the mesh checks that when the program is emitted.
    pub fn compound(parts: &[&Axis]) -> Axis {
        Axis {
            name: parts
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(&COMPOUND_SEPARATOR.to_string()),
            size: parts.iter().map(|a| a.size).product(),
        }
    }

    /// The mesh axes this axis spans, major first (one for a plain axis).
    pub fn parts(&self) -> impl Iterator<Item = &str> {
        self.name.split(COMPOUND_SEPARATOR)
    }
}

/// Named mesh axes, major to minor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mesh {
    axes: Vec<Axis>,
}

impl Mesh {
    /// A mesh of `axes` (`(name, size)`, major first). Names start with a letter and hold only
    /// letters, digits and `_`; no name appears twice; every size is at least 1.
    pub fn new(axes: &[(&str, usize)]) -> Result<Mesh> {
        if axes.is_empty() {
            return Err(Error::invalid("mesh", "a mesh needs at least one axis"));
        }
        for (i, &(name, size)) in axes.iter().enumerate() {
            let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(Error::invalid(
                    "mesh",
                    format!(
                        "axis name `{name}` must start with a letter and hold only letters, digits and `_`"
                    ),
                ));
            }
            if axes[..i].iter().any(|&(n, _)| n == name) {
                return Err(Error::invalid(
                    "mesh",
                    format!("axis `{name}` appears twice"),
                ));
            }
            if size == 0 {
                return Err(Error::invalid(
                    "mesh",
                    format!("axis `{name}` needs at least one device"),
                ));
            }
        }
        Ok(Mesh {
            axes: axes.iter().map(|&(n, s)| Axis::new(n, s)).collect(),
        })
    }

    /// The one-axis mesh of `axis` (the FSDP programs' mesh).
    pub fn line(axis: &Axis) -> Result<Mesh> {
        Mesh::new(&[(&axis.name, axis.size)])
    }

    /// The axes, major first.
    pub fn axes(&self) -> &[Axis] {
        &self.axes
    }

    /// Devices in the mesh.
    pub fn size(&self) -> usize {
        self.axes.iter().map(|a| a.size).product()
    }

    /// The mesh axis called `name`.
    pub fn axis(&self, name: &str) -> Result<Axis> {
        self.axes
            .iter()
            .find(|a| a.name == name)
            .cloned()
            .ok_or_else(|| {
                Error::invalid(
                    "mesh",
                    format!("no axis `{name}` in the mesh {}", self.describe()),
                )
            })
    }

    /// Every device, in device order: the compound of all axes.
    pub fn all(&self) -> Axis {
        Axis::compound(&self.axes.iter().collect::<Vec<_>>())
    }

    /// `["fsdp"=2, "expert"=4]`, as Shardy writes a mesh.
    pub fn describe(&self) -> String {
        let axes: Vec<String> = self
            .axes
            .iter()
            .map(|a| format!("\"{}\"={}", a.name, a.size))
            .collect();
        format!("[{}]", axes.join(", "))
    }

    /// Positions in [`Mesh::axes`] of the mesh axes `axis` spans, checked: each is an axis of
    /// this mesh, they are in mesh order without repeats, and their sizes multiply to
    /// `axis.size`.
    pub fn resolve(&self, axis: &Axis) -> Result<Vec<usize>> {
        let mut positions = Vec::new();
        for part in axis.parts() {
            let Some(p) = self.axes.iter().position(|a| a.name == part) else {
                return Err(Error::invalid(
                    "mesh",
                    format!(
                        "axis `{}` names `{part}`, which is not an axis of the mesh {}",
                        axis.name,
                        self.describe()
                    ),
                ));
            };
            if positions.last().is_some_and(|&last| p <= last) {
                return Err(Error::invalid(
                    "mesh",
                    format!(
                        "axis `{}` must list mesh axes once each, in the mesh's order {}",
                        axis.name,
                        self.describe()
                    ),
                ));
            }
            positions.push(p);
        }
        let size: usize = positions.iter().map(|&p| self.axes[p].size).product();
        if size != axis.size {
            return Err(Error::invalid(
                "mesh",
                format!(
                    "axis `{}` has {} devices but spans {size} in the mesh {}",
                    axis.name,
                    axis.size,
                    self.describe()
                ),
            ));
        }
        Ok(positions)
    }

    /// The groups of devices a collective on `axis` runs over: one group per coordinate of the
    /// other axes (in device order), each listing its devices by their index along `axis`.
    pub fn replica_groups(&self, axis: &Axis) -> Result<Vec<Vec<usize>>> {
        let along = self.resolve(axis)?;
        let strides = self.strides();
        let others: Vec<usize> = (0..self.axes.len())
            .filter(|p| !along.contains(p))
            .collect();
        let coords = |ps: &[usize], mut i: usize| -> usize {
            // The device offset of the `i`-th point (row-major) of the sub-grid over `ps`.
            let mut offset = 0;
            for &p in ps.iter().rev() {
                offset += (i % self.axes[p].size) * strides[p];
                i /= self.axes[p].size;
            }
            offset
        };
        let groups = others.iter().map(|&p| self.axes[p].size).product();
        Ok((0..groups)
            .map(|g| {
                let base = coords(&others, g);
                (0..axis.size).map(|i| base + coords(&along, i)).collect()
            })
            .collect())
    }

    /// Device `i`'s index along `axis` is `Σ ((i / stride) mod size) · weight` over the spanned
    /// mesh axes: `(stride, size, weight)` per spanned axis, major first.
    pub fn index_terms(&self, axis: &Axis) -> Result<Vec<(usize, usize, usize)>> {
        let along = self.resolve(axis)?;
        let strides = self.strides();
        let mut weight = 1;
        let mut terms: Vec<(usize, usize, usize)> = along
            .iter()
            .rev()
            .map(|&p| {
                let t = (strides[p], self.axes[p].size, weight);
                weight *= self.axes[p].size;
                t
            })
            .collect();
        terms.reverse();
        // Adjacent mesh axes that are contiguous in device order and in the index are one
        // term: the axis over every device is just the device index.
        let mut merged: Vec<(usize, usize, usize)> = Vec::new();
        for t in terms {
            match merged.last_mut() {
                Some(m) if m.0 == t.0 * t.1 && m.2 == t.2 * t.1 => *m = (t.0, m.1 * t.1, t.2),
                _ => merged.push(t),
            }
        }
        Ok(merged)
    }

    /// Device-index stride of each axis (row-major: the last axis is contiguous).
    fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1; self.axes.len()];
        for p in (0..self.axes.len().saturating_sub(1)).rev() {
            strides[p] = strides[p + 1] * self.axes[p + 1].size;
        }
        strides
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Mesh {
        Mesh::new(&[("fsdp", 4), ("expert", 2)]).unwrap()
    }

    #[test]
    fn groups_of_each_axis_and_of_the_compound() {
        let m = grid();
        let fsdp = m.axis("fsdp").unwrap();
        let expert = m.axis("expert").unwrap();
        assert_eq!(
            m.replica_groups(&fsdp).unwrap(),
            vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]
        );
        assert_eq!(
            m.replica_groups(&expert).unwrap(),
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
        );
        assert_eq!(
            m.replica_groups(&m.all()).unwrap(),
            vec![(0..8).collect::<Vec<_>>()]
        );
        let three = Mesh::new(&[("a", 2), ("b", 3), ("c", 2)]).unwrap();
        let ac = Axis::compound(&[&three.axis("a").unwrap(), &three.axis("c").unwrap()]);
        assert_eq!(
            three.replica_groups(&ac).unwrap(),
            vec![vec![0, 1, 6, 7], vec![2, 3, 8, 9], vec![4, 5, 10, 11]]
        );
    }

    #[test]
    fn index_along_an_axis_inverts_the_groups() {
        let three = Mesh::new(&[("a", 2), ("b", 3), ("c", 2)]).unwrap();
        let ac = Axis::compound(&[&three.axis("a").unwrap(), &three.axis("c").unwrap()]);
        assert_eq!(three.index_terms(&three.all()).unwrap(), vec![(1, 12, 1)]);
        for axis in [three.axis("b").unwrap(), ac, three.all()] {
            let terms = three.index_terms(&axis).unwrap();
            for group in three.replica_groups(&axis).unwrap() {
                for (i, &device) in group.iter().enumerate() {
                    let index: usize = terms
                        .iter()
                        .map(|&(stride, size, weight)| (device / stride) % size * weight)
                        .sum();
                    assert_eq!(index, i, "device {device} on `{}`", axis.name);
                }
            }
        }
    }

    #[test]
    fn bad_meshes_and_axes_are_errors_naming_them() {
        let msg = |r: Result<Mesh>| r.unwrap_err().to_string();
        assert!(msg(Mesh::new(&[])).contains("at least one axis"));
        assert!(msg(Mesh::new(&[("x", 2), ("x", 2)])).contains("`x` appears twice"));
        assert!(msg(Mesh::new(&[("a,b", 2)])).contains("`a,b`"));
        assert!(msg(Mesh::new(&[("x", 0)])).contains("`x` needs at least one device"));
        let m = grid();
        let e = m.axis("tensor").unwrap_err().to_string();
        assert!(e.contains("no axis `tensor`"), "{e}");
        let backwards = Axis::compound(&[&m.axis("expert").unwrap(), &m.axis("fsdp").unwrap()]);
        assert!(
            m.resolve(&backwards)
                .unwrap_err()
                .to_string()
                .contains("mesh's order")
        );
        let wrong = Axis::new("fsdp", 3);
        assert!(
            m.resolve(&wrong)
                .unwrap_err()
                .to_string()
                .contains("spans 4")
        );
    }
}
