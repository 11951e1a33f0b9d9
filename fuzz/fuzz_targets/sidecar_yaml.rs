//! The sidecar's config file: `SidecarConfig::from_yaml_str` (serde, the
//! key-path errors, the rules), then `validate` again on what it accepted.
//! Nothing here touches the file system or runs a program.
//!
//! Input: the YAML text, UTF-8.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolmesh_sidecar::config::SidecarConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(yaml) = std::str::from_utf8(data) else {
        return;
    };
    match SidecarConfig::from_yaml_str(yaml) {
        Ok(config) => {
            if let Err(error) = config.validate() {
                panic!("from_yaml_str accepted a config that validate refuses: {error}");
            }
        }
        Err(error) => {
            let _ = error.to_string();
        }
    }
});
