//! The CPU plugins the tests run on: the default one loaded once per test binary, clients of
//! it with virtual devices, and the newer plugin where it is present.

use std::sync::OnceLock;

use crate::{Client, ClientOptions, Plugin, plugin};

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

/// The newer CPU plugin (PJRT API 0.115), when its wheel is already in the cache or
/// `STACKSCAN_CPU_0115_PLUGIN` names its library; otherwise why a test of it is skipped, for
/// the test to print (a library prints nothing). `.ci/run` fetches it, so CI always runs
/// these tests.
pub fn newer_cpu_plugin() -> Result<Plugin, String> {
    let path = match std::env::var_os("STACKSCAN_CPU_0115_PLUGIN") {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let package = plugin::CPU_0115;
            match plugin::ensure_installed(&package, &plugin::cache_dir(), false) {
                Ok(dir) => dir.join(package.library),
                Err(e) => return Err(format!("the cpu-0.115 plugin is not present ({e})")),
            }
        }
    };
    let plugin = Plugin::load(&path).expect("load the cpu-0.115 plugin");
    assert_eq!(plugin.api_version(), (0, 115));
    Ok(plugin)
}
