//! Generates the prost messages (and their protobuf-JSON serde impls) from ../../proto.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files: Vec<PathBuf> = ["trace", "assertion", "suite", "result", "grader_service"]
        .iter()
        .map(|f| root.join(format!("trajgrade/v1/{f}.proto")))
        .collect();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    // A vendored protoc so a fresh machine needs nothing but cargo.
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = out.join("descriptors.bin");
    prost_build::Config::new()
        .file_descriptor_set_path(&descriptors)
        .compile_well_known_types()
        .compile_protos(&files, &[root])?;
    pbjson_build::Builder::new()
        .register_descriptors(&std::fs::read(&descriptors)?)?
        .preserve_proto_field_names()
        .build(&[".trajgrade"])?;
    Ok(())
}
