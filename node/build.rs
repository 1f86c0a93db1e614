//! Sets up the linker flags a Node.js addon needs (napi-rs).
fn main() {
    napi_build::setup();
}
