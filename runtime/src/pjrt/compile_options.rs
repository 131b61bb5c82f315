//! `xla.CompileOptionsProto`, hand-written for the fields stackscan sets.
//!
//! Field numbers follow XLA's `compile_options.proto` and `xla_data.proto`; fields we never set
//! are left out, which protobuf encodes exactly like their defaults.

use std::collections::BTreeMap;

use prost::{Message, Oneof};

use crate::error::{Error, Result};

/// Options for one compilation: how many replicas and partitions, and on which devices.
#[derive(Clone, Debug, PartialEq)]
pub struct CompileOptions {
    proto: CompileOptionsProto,
}

impl Default for CompileOptions {
    /// One replica, one partition, device chosen by the plugin.
    fn default() -> Self {
        CompileOptions::replicas_on(&[])
    }
}

/// Rejects a device assignment that names a device twice: XLA would run two replicas or
/// partitions on one device, and their collectives would wait on each other forever.
fn distinct(device_ids: &[i32]) -> Result<()> {
    for (i, id) in device_ids.iter().enumerate() {
        if device_ids[..i].contains(id) {
            return Err(Error::Mesh(format!(
                "device {id} appears twice in the device assignment {device_ids:?}"
            )));
        }
    }
    Ok(())
}

impl CompileOptions {
    /// `num_replicas = device_ids.len()` (at least 1), one partition: the program runs once
    /// per device and collectives name replicas. An empty list lets the plugin place a
    /// single replica. Device ids must be distinct.
    pub fn replicas(device_ids: &[i32]) -> Result<Self> {
        distinct(device_ids)?;
        Ok(CompileOptions::replicas_on(device_ids))
    }

    /// One replica, `num_partitions = device_ids.len()`, SPMD partitioning by Shardy: the form
    /// JAX emits for `shard_map` (`sdy.manual_computation`), used on TPU pods. Device ids must
    /// be distinct, and there must be at least one.
    pub fn partitions(device_ids: &[i32]) -> Result<Self> {
        distinct(device_ids)?;
        if device_ids.is_empty() {
            return Err(Error::Mesh(
                "a partitioned program needs at least one device".into(),
            ));
        }
        Ok(CompileOptions::partitions_on(device_ids))
    }

    /// [`CompileOptions::replicas`] for ids already known to be distinct (a [`Mesh`]'s).
    ///
    /// [`Mesh`]: crate::Mesh
    pub(crate) fn replicas_on(device_ids: &[i32]) -> Self {
        let n = device_ids.len().max(1) as i64;
        let assignment = (!device_ids.is_empty()).then(|| DeviceAssignmentProto {
            replica_count: n as i32,
            computation_count: 1,
            computation_devices: vec![ComputationDevice {
                replica_device_ids: device_ids.iter().map(|&d| i64::from(d)).collect(),
            }],
        });
        CompileOptions {
            proto: CompileOptionsProto {
                env_option_overrides: BTreeMap::new(),
                executable_build_options: Some(ExecutableBuildOptionsProto {
                    device_ordinal: -1,
                    num_replicas: 1.max(n),
                    num_partitions: 1,
                    device_assignment: assignment,
                    ..Default::default()
                }),
            },
        }
    }

    /// [`CompileOptions::partitions`] for ids already known to be distinct and non-empty.
    pub(crate) fn partitions_on(device_ids: &[i32]) -> Self {
        let n = device_ids.len() as i64;
        CompileOptions {
            proto: CompileOptionsProto {
                env_option_overrides: BTreeMap::new(),
                executable_build_options: Some(ExecutableBuildOptionsProto {
                    device_ordinal: -1,
                    num_replicas: 1,
                    num_partitions: n,
                    use_spmd_partitioning: true,
                    use_shardy_partitioner: true,
                    device_assignment: Some(DeviceAssignmentProto {
                        replica_count: 1,
                        computation_count: n as i32,
                        computation_devices: device_ids
                            .iter()
                            .map(|&d| ComputationDevice {
                                replica_device_ids: vec![i64::from(d)],
                            })
                            .collect(),
                    }),
                }),
            },
        }
    }

    /// The same options with the XLA `DebugOptions` field `name` set to `value` (the
    /// `env_option_overrides` JAX's `compiler_options` fill), on top of the plugin's defaults
    /// and `XLA_FLAGS`. A plugin that does not know the field refuses the compile.
    pub fn with_override(mut self, name: &str, value: OverrideValue) -> Self {
        self.proto
            .env_option_overrides
            .insert(name.to_owned(), OptionOverrideProto { value: Some(value) });
        self
    }

    /// The same options without an override of the field `name`: the plugin's default or
    /// `XLA_FLAGS` decide it again.
    pub fn without_override(mut self, name: &str) -> Self {
        self.proto.env_option_overrides.remove(name);
        self
    }

    /// The `DebugOptions` overrides set, by field name.
    pub fn overrides(&self) -> impl Iterator<Item = (&str, &OverrideValue)> {
        self.proto
            .env_option_overrides
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.value.as_ref()?)))
    }

    /// The serialized `CompileOptionsProto` PJRT expects.
    pub fn encode(&self) -> Vec<u8> {
        self.proto.encode_to_vec()
    }

    /// Replicas and partitions this compilation asks for.
    pub fn replicas_and_partitions(&self) -> (i64, i64) {
        let b = self.proto.executable_build_options.as_ref();
        (
            b.map_or(1, |b| b.num_replicas),
            b.map_or(1, |b| b.num_partitions),
        )
    }
}

#[derive(Clone, PartialEq, Message)]
struct CompileOptionsProto {
    #[prost(message, optional, tag = "3")]
    executable_build_options: Option<ExecutableBuildOptionsProto>,
    /// `env_option_overrides`: `DebugOptions` fields by name, applied by the plugin on top of
    /// its defaults and `XLA_FLAGS`. A `BTreeMap` so the encoding (and with it the compile
    /// cache's key) does not depend on a hash order.
    #[prost(btree_map = "string, message", tag = "7")]
    env_option_overrides: BTreeMap<String, OptionOverrideProto>,
}

/// `xla.OptionOverrideProto`: one value of a `DebugOptions` field.
#[derive(Clone, PartialEq, Message)]
struct OptionOverrideProto {
    #[prost(oneof = "OverrideValue", tags = "1, 2, 3, 4")]
    value: Option<OverrideValue>,
}

/// The value of one `DebugOptions` override, as XLA's `OptionOverrideProto` carries it.
#[derive(Clone, PartialEq, Oneof)]
pub enum OverrideValue {
    /// A string, parsed by XLA as the flag of that name would be (lists comma-separated).
    #[prost(string, tag = "1")]
    String(String),
    /// A boolean field.
    #[prost(bool, tag = "2")]
    Bool(bool),
    /// An integer field.
    #[prost(int64, tag = "3")]
    Int(i64),
    /// A floating-point field.
    #[prost(double, tag = "4")]
    Double(f64),
}

#[derive(Clone, PartialEq, Message)]
struct ExecutableBuildOptionsProto {
    #[prost(int64, tag = "1")]
    device_ordinal: i64,
    #[prost(int64, tag = "4")]
    num_replicas: i64,
    #[prost(int64, tag = "5")]
    num_partitions: i64,
    #[prost(bool, tag = "6")]
    use_spmd_partitioning: bool,
    #[prost(message, optional, tag = "9")]
    device_assignment: Option<DeviceAssignmentProto>,
    #[prost(bool, tag = "19")]
    use_shardy_partitioner: bool,
}

#[derive(Clone, PartialEq, Message)]
struct DeviceAssignmentProto {
    #[prost(int32, tag = "1")]
    replica_count: i32,
    #[prost(int32, tag = "2")]
    computation_count: i32,
    #[prost(message, repeated, tag = "3")]
    computation_devices: Vec<ComputationDevice>,
}

#[derive(Clone, PartialEq, Message)]
struct ComputationDevice {
    #[prost(int64, repeated, tag = "1")]
    replica_device_ids: Vec<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_or_missing_devices_are_refused() {
        for err in [
            CompileOptions::replicas(&[0, 1, 1]).unwrap_err(),
            CompileOptions::partitions(&[2, 0, 2]).unwrap_err(),
        ] {
            assert!(
                matches!(&err, Error::Mesh(m) if m.contains("appears twice")),
                "{err}"
            );
        }
        assert!(matches!(
            CompileOptions::partitions(&[]),
            Err(Error::Mesh(m)) if m.contains("at least one")
        ));
        assert_eq!(
            CompileOptions::replicas(&[]).unwrap(),
            CompileOptions::default()
        );
    }

    #[test]
    fn overrides_encode_as_env_option_overrides_in_name_order() {
        let options = CompileOptions::default()
            .with_override("xla_cpu_use_xnnpack", OverrideValue::Bool(false))
            .with_override(
                "xla_cpu_experimental_xnn_fusion_type",
                OverrideValue::String(String::new()),
            );
        let bytes = options.encode();
        let decoded = CompileOptionsProto::decode(bytes.as_slice()).unwrap();
        let names: Vec<_> = decoded.env_option_overrides.keys().cloned().collect();
        assert_eq!(
            names,
            [
                "xla_cpu_experimental_xnn_fusion_type",
                "xla_cpu_use_xnnpack"
            ]
        );
        assert_eq!(
            decoded.env_option_overrides["xla_cpu_use_xnnpack"].value,
            Some(OverrideValue::Bool(false))
        );
        // Field 7 holds map entries: key = 1, value = 2 (an `OptionOverrideProto`, whose
        // bool is field 2), as XLA's `compile_options.proto` declares them.
        let entry = [
            0x3a, 25, 0x0a, 19, b'x', b'l', b'a', b'_', b'c', b'p', b'u', b'_', b'u', b's', b'e',
            b'_', b'x', b'n', b'n', b'p', b'a', b'c', b'k', 0x12, 2, 0x10, 0,
        ];
        assert!(
            bytes.windows(entry.len()).any(|w| w == entry),
            "{bytes:02x?}"
        );
        // The same overrides set in another order encode to the same bytes.
        let reversed = CompileOptions::default()
            .with_override(
                "xla_cpu_experimental_xnn_fusion_type",
                OverrideValue::String(String::new()),
            )
            .with_override("xla_cpu_use_xnnpack", OverrideValue::Bool(false));
        assert_eq!(reversed.encode(), bytes);
    }

    #[test]
    fn partitions_encode_the_fields_xla_reads() {
        let bytes = CompileOptions::partitions(&[0, 1]).unwrap().encode();
        let decoded = CompileOptionsProto::decode(bytes.as_slice()).unwrap();
        let b = decoded.executable_build_options.unwrap();
        assert_eq!((b.num_replicas, b.num_partitions), (1, 2));
        assert!(b.use_spmd_partitioning && b.use_shardy_partitioner);
        let a = b.device_assignment.unwrap();
        assert_eq!((a.replica_count, a.computation_count), (1, 2));
        assert_eq!(a.computation_devices[1].replica_device_ids, vec![1]);
    }

    #[test]
    fn replicas_put_all_devices_in_one_computation() {
        let options = CompileOptions::replicas(&[0, 1, 2, 3]).unwrap();
        assert_eq!(options.replicas_and_partitions(), (4, 1));
        let decoded = CompileOptionsProto::decode(options.encode().as_slice()).unwrap();
        let a = decoded
            .executable_build_options
            .unwrap()
            .device_assignment
            .unwrap();
        assert_eq!(a.computation_devices.len(), 1);
        assert_eq!(
            a.computation_devices[0].replica_device_ids,
            vec![0, 1, 2, 3]
        );
    }
}
