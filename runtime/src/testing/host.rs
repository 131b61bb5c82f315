//! Host values of a one-device program's arguments, compiled and run at a chosen float type:
//! the shape the layer tests (GDN, gated attention) feed their f64 and f32 checks.

use stackscan::{DType, Function, Program};

use crate::{Buffer, Client, Executable, Mesh};

/// Host values of one argument, row-major, with its dimensions.
#[derive(Clone, Debug)]
pub struct HostArg {
    /// Dimensions (empty for a scalar).
    pub dims: Vec<i64>,
    /// Values in row-major order.
    pub values: Vec<f64>,
}

/// The scalar 1, the cotangent that seeds a scalar loss.
pub fn one() -> HostArg {
    HostArg {
        dims: Vec::new(),
        values: vec![1.0],
    }
}

/// Compiles `f` for one device.
pub fn compile(client: &Client, f: &Function) -> Executable {
    let mesh = Mesh::new(client, "x", 1).expect("a one-device mesh");
    client
        .compile_program(&Program::new(f.clone()), &mesh)
        .expect("the program compiles")
}

/// Runs `exe` on `args` converted to `dtype` (f32, else f64); each result as f64 values.
pub fn execute(client: &Client, exe: &Executable, dtype: DType, args: &[HostArg]) -> Vec<Vec<f64>> {
    let dev = &client.devices()[0];
    let bufs: Vec<Buffer> = args
        .iter()
        .map(|a| match dtype {
            DType::F32 => {
                let v: Vec<f32> = a.values.iter().map(|&x| x as f32).collect();
                client.buffer(&v, &a.dims, dev).expect("upload")
            }
            _ => client.buffer(&a.values, &a.dims, dev).expect("upload"),
        })
        .collect();
    let refs: Vec<&Buffer> = bufs.iter().collect();
    let out = exe.execute(&[refs]).expect("execute");
    out[0]
        .iter()
        .map(|b| match dtype {
            DType::F32 => b
                .to_host::<f32>()
                .expect("read back")
                .into_iter()
                .map(f64::from)
                .collect(),
            _ => b.to_host::<f64>().expect("read back"),
        })
        .collect()
}

/// Compiles and runs `f` on `args` (converted to `dtype`); each result as f64 values.
pub fn run(client: &Client, f: &Function, dtype: DType, args: &[HostArg]) -> Vec<Vec<f64>> {
    execute(client, &compile(client, f), dtype, args)
}
