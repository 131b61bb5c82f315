//! Expert parallelism on a two-axis mesh `fsdp × expert`.
//!
//! Every stacked weight is split over all devices (co-sharding over `(fsdp, expert)`). Dense
//! weights are gathered over both axes, as under plain FSDP; an expert bank `[E, …]` is
//! gathered over `fsdp` only, so each device holds the `E / ep` experts of its `expert`
//! coordinate `x`. Device `(f, x)` stores experts `(f·ep + x)·e + j` (`e = E / devices`,
//! `j < e`), so after the gather rank `x` holds experts `{(f·ep + x)·e + j}` in `(f, j)` order.
//! Routing renumbers each chosen expert into that *rank-major* order ([`ExpertMesh::rank_major`])
//! before the dispatch buffer `[E, C, d]` is built, so piece `x` of the buffer's expert
//! dimension holds exactly rank `x`'s experts; one `all_to_all` over `expert` sends it there
//! ([`dispatch`]: `[E, C, d] → [E / ep, ep·C, d]`), the experts run on the tokens of all ranks
//! of the group, and the inverse `all_to_all` ([`combine`]) brings the results back. Their VJPs
//! are the same two exchanges reversed.
//!
//! With context parallelism (`fsdp × expert × context`, [`ExpertMesh::with_context`]) the two
//! are co-sharded: the `context` devices that hold pieces of the same sequences are expert
//! ranks as well. Expert banks are still gathered over `fsdp` alone, so the experts split over
//! the `expert × context` compound (`ep · cp` ranks, each holding `E / (ep·cp)` of them after
//! its gather), and tokens are exchanged over that compound. Device `(f, x, c)` is rank
//! `x·cp + c`, and every formula above holds with `ep · cp` in place of `ep`.
//!
//! ```
//! use stackscan_models::moe::ExpertMesh;
//! let em = ExpertMesh::new(8, 4, 16)?;
//! assert_eq!((em.fsdp, em.expert), (2, 4));
//! // Device (f, x) stores experts 2(4f + x) and 2(4f + x) + 1; rank 0 gathers experts
//! // 0, 1 (from f = 0) then 8, 9 (from f = 1) into its positions 0..4.
//! let perm = em.rank_major(16);
//! assert_eq!([perm[0], perm[1], perm[8], perm[9]], [0, 1, 2, 3]);
//! assert_eq!(perm[2], 4); // expert 2 sits on device (0, 1): rank 1's first
//! assert!(ExpertMesh::new(8, 3, 16).is_err());
//! # Ok::<(), stackscan::Error>(())
//! ```

use stackscan::nn::context::CONTEXT_AXIS;
use stackscan::{Axis, Error, Mesh, Result, Tensor};

/// The FSDP axis of an expert-parallel mesh (the major one).
pub const FSDP_AXIS: &str = "fsdp";
/// The expert axis of an expert-parallel mesh (the minor one).
pub const EXPERT_AXIS: &str = "expert";

/// The shape of an expert-parallel mesh: `fsdp × expert` devices. `expert = 1` is plain FSDP
/// (no exchange; the experts are gathered over every device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExpertMesh {
    /// Devices along `fsdp`.
    pub fsdp: usize,
    /// Devices along `expert` (expert-parallel ranks, `--ep`).
    pub expert: usize,
    /// Devices along `context`, the minor-most axis (context parallelism, `--cp`; 1: no such
    /// axis). Under expert parallelism they are expert ranks too (see the module docs).
    pub context: usize,
}

impl Default for ExpertMesh {
    fn default() -> Self {
        ExpertMesh::OFF
    }
}

impl ExpertMesh {
    /// No expert parallelism.
    pub const OFF: ExpertMesh = ExpertMesh {
        fsdp: 1,
        expert: 1,
        context: 1,
    };

    /// `devices` split into `devices / ep` along `fsdp` and `ep` along `expert`, for a model
    /// of `experts` routed experts. `ep` must divide the devices, and the devices must divide
    /// the experts (each device stores a whole number of experts' weights).
    pub fn new(devices: usize, ep: usize, experts: usize) -> Result<ExpertMesh> {
        let invalid = |message: String| Error::InvalidOp {
            op: "expert_parallel",
            message,
        };
        if ep == 0 || devices == 0 || !devices.is_multiple_of(ep) {
            return Err(invalid(format!(
                "--ep {ep} must be at least 1 and divide the {devices} devices"
            )));
        }
        if !experts.is_multiple_of(ep) || !experts.is_multiple_of(devices) {
            return Err(invalid(format!(
                "--ep {ep} on {devices} devices: the {experts} experts must split over the \
                 {ep} expert ranks and over all {devices} devices"
            )));
        }
        Ok(ExpertMesh {
            fsdp: devices / ep,
            expert: ep,
            context: 1,
        })
    }

    /// This mesh with each sequence split over `cp` of its `fsdp` devices: `fsdp / cp × expert
    /// × cp`, the `cp` devices of a sequence also expert ranks. `cp` must divide the `fsdp`
    /// devices (the experts already split over all devices, so over `ep · cp` ranks too).
    pub fn with_context(self, cp: usize) -> Result<ExpertMesh> {
        let groups = self.fsdp * self.context;
        if cp == 0 || !groups.is_multiple_of(cp) {
            return Err(Error::InvalidOp {
                op: "context_parallel",
                message: format!(
                    "--cp {cp} must be at least 1 and divide the {groups} devices of an expert rank"
                ),
            });
        }
        Ok(ExpertMesh {
            fsdp: groups / cp,
            context: cp,
            ..self
        })
    }

    /// The ranks experts are split over and tokens exchanged among: `expert · context` under
    /// expert parallelism, else 1.
    pub fn ranks(&self) -> usize {
        if self.is_parallel() {
            self.expert * self.context
        } else {
            1
        }
    }

    /// Whether tokens are exchanged between expert ranks.
    pub fn is_parallel(&self) -> bool {
        self.expert > 1
    }

    /// Devices of the mesh.
    pub fn devices(&self) -> usize {
        self.fsdp * self.context * self.expert
    }

    /// The mesh `["fsdp"=f, "expert"=ep]`, or `["fsdp"=f, "expert"=ep, "context"=cp]`:
    /// `context` minor-most, so the devices that share a sequence (and exchange keys and values
    /// in every attention layer) are neighbours, and device `d` holds piece `d % cp`.
    pub fn mesh(&self) -> Result<Mesh> {
        if self.context > 1 {
            return Mesh::new(&[
                (FSDP_AXIS, self.fsdp),
                (EXPERT_AXIS, self.expert),
                (CONTEXT_AXIS, self.context),
            ]);
        }
        Mesh::new(&[(FSDP_AXIS, self.fsdp), (EXPERT_AXIS, self.expert)])
    }

    /// The axis tokens are exchanged over: `expert`, or the `expert × context` compound.
    pub fn expert_axis(&self) -> Axis {
        let expert = Axis::new(EXPERT_AXIS, self.expert);
        if self.context > 1 {
            return Axis::compound(&[&expert, &Axis::new(CONTEXT_AXIS, self.context)]);
        }
        expert
    }

    /// The `fsdp` axis, which expert banks are gathered over.
    pub fn fsdp_axis(&self) -> Axis {
        Axis::new(FSDP_AXIS, self.fsdp)
    }

    /// For each expert id, its position in rank-major order: rank `x`'s experts (see the
    /// module docs) take positions `[x·E/ep, (x+1)·E/ep)`, in the order the gather over `fsdp`
    /// lays them out.
    pub fn rank_major(&self, experts: usize) -> Vec<i64> {
        let per_device = experts / self.devices().max(1);
        (0..experts)
            .map(|g| {
                let (device, j) = (g / per_device, g % per_device);
                // Device `(f·ep + x)·cp + c` = `f·R + r` is rank `r` of `R = ep·cp`.
                let ranks = self.expert * self.context;
                let (f, x) = (device / ranks, device % ranks);
                (x * self.fsdp * per_device + f * per_device + j) as i64
            })
            .collect()
    }
}

/// Sends each expert rank its experts' slots: `[E, C, d]` in rank-major order (the local
/// buffer of this device's tokens) to `[E / ep, ep·C, d]` (the slots of this rank's experts
/// from every device of its `expert` group, source rank major). An `all_to_all` over `expert`
/// splitting dimension 0 and concatenating dimension 1.
pub fn dispatch(slots: &Tensor, em: &ExpertMesh) -> Result<Tensor> {
    slots.all_to_all(0, 1, &em.expert_axis())
}

/// The inverse of [`dispatch`]: the experts' outputs `[E / ep, ep·C, d]` back to the devices
/// whose tokens they are, `[E, C, d]` in rank-major order.
pub fn combine(out: &Tensor, em: &ExpertMesh) -> Result<Tensor> {
    out.all_to_all(1, 0, &em.expert_axis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_major_is_a_permutation_grouping_each_ranks_experts() {
        for (devices, ep) in [(8, 4), (8, 2), (4, 4), (8, 1)] {
            let em = ExpertMesh::new(devices, ep, 16).unwrap();
            let perm = em.rank_major(16);
            let mut sorted = perm.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..16).collect::<Vec<i64>>());
            let per_device = 16 / devices;
            for (g, &p) in perm.iter().enumerate() {
                // The rank holding expert g (its device's expert coordinate) owns the block.
                let rank = (g / per_device) % ep;
                assert_eq!(p as usize / (16 / ep), rank, "expert {g} on {devices}/{ep}");
            }
        }
    }

    #[test]
    fn with_a_context_axis_the_ranks_are_expert_by_context() {
        for (devices, ep, cp) in [(8, 2, 2), (8, 4, 2), (16, 2, 4)] {
            let em = ExpertMesh::new(devices, ep, 16)
                .unwrap()
                .with_context(cp)
                .unwrap();
            assert_eq!(em.devices(), devices);
            assert_eq!(em.ranks(), ep * cp);
            assert_eq!(em.fsdp_axis().size, devices / ep / cp);
            assert_eq!(em.expert_axis().size, ep * cp);
            let perm = em.rank_major(16);
            let mut sorted = perm.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..16).collect::<Vec<i64>>());
            let per_device = 16 / devices;
            for (g, &p) in perm.iter().enumerate() {
                // Device d = (f·ep + x)·cp + c is rank x·cp + c = d % (ep·cp).
                let rank = (g / per_device) % (ep * cp);
                assert_eq!(
                    p as usize / (16 / (ep * cp)),
                    rank,
                    "expert {g} on {devices}/{ep}/{cp}"
                );
            }
        }
        assert!(ExpertMesh::new(8, 4, 16).unwrap().with_context(4).is_err());
    }

    #[test]
    fn bad_ep_is_an_error_naming_it() {
        for (devices, ep, experts) in [(8, 3, 16), (8, 0, 16), (8, 4, 12), (6, 2, 16)] {
            let e = ExpertMesh::new(devices, ep, experts)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("--ep {ep}")), "{e}");
        }
    }
}
