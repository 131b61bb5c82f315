//! Shared set-up of the runtime's integration tests: the default CPU plugin, loaded once.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::sync::OnceLock;

use stackscan_runtime::{Client, ClientOptions, Plugin, plugin};

/// The default CPU plugin (fetched into the cache on first use).
pub fn cpu_plugin() -> Plugin {
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN
        .get_or_init(|| {
            let path = plugin::resolve("cpu").expect("resolve the cpu plugin");
            Plugin::load(path).expect("load the cpu plugin")
        })
        .clone()
}

/// A client of the default CPU plugin with `devices` virtual devices.
pub fn cpu_client(devices: usize) -> Client {
    Client::new(&cpu_plugin(), &ClientOptions::cpu(devices)).expect("create a cpu client")
}
