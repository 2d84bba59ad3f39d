//! Generates the prost messages, the tonic client and protobuf-JSON serde impls from ../../proto.
use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // No system protoc needed: the vendored binary comes from a crate.
    env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    let proto_root = PathBuf::from("../../proto");
    let protos: Vec<PathBuf> = ["trace", "assertion", "suite", "result", "grader_service"]
        .iter()
        .map(|name| proto_root.join(format!("trajgrade/v1/{name}.proto")))
        .collect();
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let descriptors = out_dir.join("trajgrade_descriptors.bin");

    tonic_prost_build::configure()
        .build_server(false)
        .file_descriptor_set_path(&descriptors)
        .compile_protos(&protos, &[proto_root])?;

    pbjson_build::Builder::new()
        .register_descriptors(&fs::read(&descriptors)?)?
        .preserve_proto_field_names()
        .build(&[".trajgrade.v1"])?;
    Ok(())
}
