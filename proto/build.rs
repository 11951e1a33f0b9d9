//! Compiles `proto/toolmesh/v1/*.proto` with protox (no system `protoc`) and
//! writes the file descriptor set that server reflection serves.

use std::{env, fs, path::PathBuf};

use protox::prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/toolmesh/v1/toolmesh.proto"];
    println!("cargo:rerun-if-changed=proto");

    let fds = protox::compile(files, ["proto"])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out_dir.join("toolmesh_descriptor.bin"), fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
